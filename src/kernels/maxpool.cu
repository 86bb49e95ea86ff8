// Max-pool over features or time, and its scatter backward.
#include "kernels/maxpool.cuh"

namespace enhanced::cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

// Feature mode: one thread per position p, max over its C channels (first maximum wins).
__global__ void pool_feature_kernel(float* __restrict__ pooled, int32_t* __restrict__ argmax,
                                    const float* __restrict__ y, int64_t positions, int channels) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= positions) return;
  const float* row = y + p * channels;
  int best = 0;
  float best_value = row[0];
  for (int k = 1; k < channels; ++k) {
    const float value = row[k];
    if (value > best_value) {
      best_value = value;
      best = k;
    }
  }
  pooled[p] = best_value;
  argmax[p] = best;
}

// Time mode: one thread per (b, k), max over t (first maximum wins).
__global__ void pool_time_kernel(float* __restrict__ pooled, int32_t* __restrict__ argmax,
                                 const float* __restrict__ y, int batch, int seq_len, int channels) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<int64_t>(batch) * channels) return;
  const int64_t b = index / channels;
  const int k = static_cast<int>(index % channels);
  const float* sample = y + b * seq_len * channels + k;
  int best = 0;
  float best_value = sample[0];
  for (int t = 1; t < seq_len; ++t) {
    const float value = sample[static_cast<int64_t>(t) * channels];
    if (value > best_value) {
      best_value = value;
      best = t;
    }
  }
  pooled[index] = best_value;
  argmax[index] = best;
}

__global__ void unpool_feature_kernel(float* __restrict__ dy, const int32_t* __restrict__ argmax,
                                      const float* __restrict__ dpooled, int64_t positions, int channels) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= positions) return;
  dy[p * channels + argmax[p]] = dpooled[p];
}

__global__ void unpool_time_kernel(float* __restrict__ dy, const int32_t* __restrict__ argmax,
                                   const float* __restrict__ dpooled, int batch, int seq_len, int channels) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<int64_t>(batch) * channels) return;
  const int64_t b = index / channels;
  const int k = static_cast<int>(index % channels);
  dy[(b * seq_len + argmax[index]) * channels + k] = dpooled[index];
}

}  // namespace

void maxpool_forward(float* pooled, int32_t* argmax, const float* y, int batch, int seq_len, int channels,
                     PoolMode mode, cudaStream_t stream) {
  if (batch == 0) return;
  if (mode == PoolMode::feature) {
    const int64_t positions = static_cast<int64_t>(batch) * seq_len;
    pool_feature_kernel<<<blocks_for(positions), kThreads, 0, stream>>>(pooled, argmax, y, positions, channels);
  } else {
    pool_time_kernel<<<blocks_for(static_cast<int64_t>(batch) * channels), kThreads, 0, stream>>>(
        pooled, argmax, y, batch, seq_len, channels);
  }
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void maxpool_backward(float* dy, const int32_t* argmax, const float* dpooled, int batch, int seq_len, int channels,
                      PoolMode mode, cudaStream_t stream) {
  if (batch == 0) return;
  const int64_t positions = static_cast<int64_t>(batch) * seq_len;
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(dy, 0, static_cast<size_t>(positions) * channels * sizeof(float), stream));
  if (mode == PoolMode::feature) {
    unpool_feature_kernel<<<blocks_for(positions), kThreads, 0, stream>>>(dy, argmax, dpooled, positions, channels);
  } else {
    unpool_time_kernel<<<blocks_for(static_cast<int64_t>(batch) * channels), kThreads, 0, stream>>>(
        dy, argmax, dpooled, batch, seq_len, channels);
  }
  ENHANCED_CUDA_CHECK_LAUNCH();
}

}  // namespace enhanced::cuda
