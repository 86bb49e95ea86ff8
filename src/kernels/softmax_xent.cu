// Softmax cross-entropy with its gradient fused, as the CPU layer: max-shifted log-sum-exp.
#include "kernels/softmax_xent.cuh"

namespace enhanced::cuda {
namespace {

constexpr int kThreads = 128;

// One thread per sample row (L is small); the same three passes as the CPU layer.
__global__ void softmax_xent_kernel(float* __restrict__ dlogits, float* __restrict__ sample_losses,
                                    const float* __restrict__ logits, const int32_t* __restrict__ labels, int batch,
                                    int num_labels) {
  const int b = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (b >= batch) return;
  const float* row = logits + static_cast<int64_t>(b) * num_labels;
  float shift = row[0];
  for (int l = 1; l < num_labels; ++l) shift = fmaxf(shift, row[l]);
  float sum = 0.0f;
  for (int l = 0; l < num_labels; ++l) sum += expf(row[l] - shift);
  const float log_sum = logf(sum);
  const int label = labels[b];
  if (sample_losses) sample_losses[b] = log_sum - (row[label] - shift);
  if (dlogits) {
    float* grad = dlogits + static_cast<int64_t>(b) * num_labels;
    const float inverse_batch = 1.0f / static_cast<float>(batch);
    for (int l = 0; l < num_labels; ++l) grad[l] = expf(row[l] - shift - log_sum) * inverse_batch;
    grad[label] -= inverse_batch;
  }
}

// The mean in double, summed in sample order (one thread: B is at most a few thousand).
__global__ void mean_loss_kernel(double* __restrict__ mean_loss, const float* __restrict__ sample_losses, int batch) {
  double total = 0.0;
  for (int b = 0; b < batch; ++b) total += static_cast<double>(sample_losses[b]);
  *mean_loss = total / batch;
}

}  // namespace

void softmax_cross_entropy(float* dlogits, float* sample_losses, double* mean_loss, const float* logits,
                           const int32_t* labels, int batch, int num_labels, cudaStream_t stream) {
  if (batch == 0) return;
  softmax_xent_kernel<<<static_cast<unsigned>((batch + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      dlogits, sample_losses, logits, labels, batch, num_labels);
  ENHANCED_CUDA_CHECK_LAUNCH();
  if (mean_loss) {
    if (!sample_losses) fail("internal: softmax_cross_entropy needs sample_losses to compute the mean loss");
    mean_loss_kernel<<<1, 1, 0, stream>>>(mean_loss, sample_losses, batch);
    ENHANCED_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace enhanced::cuda
