// Softmax cross-entropy with its gradient fused, as the CPU layer: max-shifted log-sum-exp; the
// class weights' scalars are steps/softmax_xent_steps.h's, which the CPU layer calls too.
#include "kernels/softmax_xent.cuh"
#include "steps/softmax_xent_steps.h"

namespace enhanced::cuda {
namespace {

constexpr int kThreads = 128;

// The weighted mean's denominator (the batch's total class weight in sample order, one thread, or
// its size), into *denominator.
__global__ void denominator_kernel(double* __restrict__ denominator, const int32_t* __restrict__ labels,
                                   const float* __restrict__ class_weights, int batch, ClassWeightMean mean) {
  *denominator = steps::loss_denominator(labels, class_weights, batch, mean);
}

// One thread per sample row (L is small); the same three passes as the CPU layer. denominator:
// the weighted mean's (read only with class_weights); whole (nullable): the whole batch's
// denominators instead (a shard's share, as the CPU layer's).
__global__ void softmax_xent_kernel(float* __restrict__ dlogits, float* __restrict__ sample_losses,
                                    const float* __restrict__ logits, const int32_t* __restrict__ labels,
                                    const float* __restrict__ class_weights, const double* __restrict__ denominator,
                                    const LossDenominator* __restrict__ whole, int batch, int num_labels) {
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
    const double divisor = whole ? whole->weighted : class_weights ? *denominator : 0.0;
    const float share = steps::loss_share<float>(class_weights, label, divisor, whole ? whole->batch : batch);
    for (int l = 0; l < num_labels; ++l) grad[l] = expf(row[l] - shift - log_sum) * share;
    grad[label] -= share;
  }
}

// The (weighted) mean in double, summed in sample order (one thread: B is at most a few
// thousand). With class_weights, *mean_loss holds the weighted mean's denominator on entry; whole
// (nullable): the whole batch's denominator divides instead.
__global__ void mean_loss_kernel(double* __restrict__ mean_loss, const float* __restrict__ sample_losses,
                                 const int32_t* __restrict__ labels, const float* __restrict__ class_weights,
                                 const LossDenominator* __restrict__ whole, int batch) {
  const double denominator = whole ? whole->weighted : class_weights ? *mean_loss : static_cast<double>(batch);
  double total = 0.0;
  for (int b = 0; b < batch; ++b)
    total += steps::sample_weight(class_weights, labels[b]) * static_cast<double>(sample_losses[b]);
  *mean_loss = steps::mean_of(total, denominator);
}

}  // namespace

void softmax_cross_entropy(float* dlogits, float* sample_losses, double* mean_loss, const float* logits,
                           const int32_t* labels, const float* class_weights, int batch, int num_labels,
                           const LossDenominator* whole, ClassWeightMean mean, cudaStream_t stream) {
  if (batch == 0) return;
  if (class_weights && !whole) {
    if (!mean_loss) fail("internal: the weighted softmax_cross_entropy needs mean_loss for its denominator");
    denominator_kernel<<<1, 1, 0, stream>>>(mean_loss, labels, class_weights, batch, mean);
    ENHANCED_CUDA_CHECK_LAUNCH();
  }
  softmax_xent_kernel<<<static_cast<unsigned>((batch + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      dlogits, sample_losses, logits, labels, class_weights, mean_loss, whole, batch, num_labels);
  ENHANCED_CUDA_CHECK_LAUNCH();
  if (mean_loss) {
    if (!sample_losses) fail("internal: softmax_cross_entropy needs sample_losses to compute the mean loss");
    mean_loss_kernel<<<1, 1, 0, stream>>>(mean_loss, sample_losses, labels, class_weights, whole, batch);
    ENHANCED_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace enhanced::cuda
