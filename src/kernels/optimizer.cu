// Gradient norm (deterministic two-stage reduction), SGD and Adam in one launch each over the
// carved parameter buffer, and gradient zeroing. The index space and the update arithmetic are
// steps/optimizer_steps.h's, which the CPU layer (layers/optimizer.cpp) calls too, so from the
// same inputs the device step gives the CPU step's bits (the index space is tested on the host).
#include <cub/block/block_reduce.cuh>
#include <math_constants.h>

#include <algorithm>

#include "kernels/optimizer.cuh"

namespace enhanced::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kNormBlocks = 256;  // fixed: the reduction order never depends on the device
constexpr unsigned kMaxBlocks = 4096;

using steps::element_of;
using steps::Space;
using steps::space_of;

__global__ void norm_partials_kernel(double* __restrict__ partials, const float* __restrict__ grads, StepRange r,
                                     bool rows_only) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage storage;
  const Space s = space_of(r, rows_only);
  double sum = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < s.size;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double g = grads[element_of(r, rows_only, s, i)];
    sum += g * g;
  }
  const double block_sum = Reduce(storage).Sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = block_sum;
}

__global__ void norm_finish_kernel(double* __restrict__ norm, float* __restrict__ scale,
                                   const double* __restrict__ partials, const int32_t* __restrict__ halted,
                                   float clip_norm) {
  using Reduce = cub::BlockReduce<double, kNormBlocks>;
  __shared__ typename Reduce::TempStorage storage;
  const double total = Reduce(storage).Sum(partials[threadIdx.x]);
  if (threadIdx.x == 0) {
    const double value = (halted && *halted) ? CUDART_NAN : sqrt(total);
    *norm = value;
    *scale = steps::clip_factor(value, clip_norm);
  }
}

__global__ void sgd_kernel(float* __restrict__ w, float* __restrict__ velocity, const float* __restrict__ g,
                           const float* __restrict__ scale_ptr, const double* __restrict__ norm,
                           const StepScalars* __restrict__ scalars, StepRange r, float mu, float wd,
                           bool decay_embedding) {
  if (!isfinite(*norm)) return;  // the host reports the error; weights stay unchanged
  const float scale = *scale_ptr;
  const float lr = scalars->learning_rate;
  const bool first_step = scalars->first_step != 0;
  const Space s = space_of(r, r.rows_only);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < s.size;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = element_of(r, r.rows_only, s, i);
    steps::sgd_update(k, w, velocity, g, scale, lr, mu, steps::decay_at(k, r.table, decay_embedding, wd, 0.0f),
                      first_step);
  }
}

__global__ void adam_kernel(float* __restrict__ w, float* __restrict__ m, float* __restrict__ v,
                            const float* __restrict__ g, const float* __restrict__ scale_ptr,
                            const double* __restrict__ norm, const StepScalars* __restrict__ scalars,
                            StepRange r, float b1, float b2, float eps, bool decay_embedding) {
  if (!isfinite(*norm)) return;
  const float scale = *scale_ptr;
  const float step_size = scalars->adam_step_size;
  const float bias_correction2_sqrt = scalars->adam_bias_correction2_sqrt;
  const float decay = scalars->adamw_decay;
  const Space s = space_of(r, r.rows_only);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < s.size;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = element_of(r, r.rows_only, s, i);
    steps::adam_update(k, w, m, v, g, scale, b1, b2, eps, step_size, bias_correction2_sqrt,
                       steps::decay_at(k, r.table, decay_embedding, decay, 1.0f));
  }
}

__global__ void zero_kernel(float* __restrict__ g, StepRange r) {
  const Space s = space_of(r, true);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < s.size;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    g[element_of(r, true, s, i)] = 0.0f;
}

unsigned blocks_for(const StepRange& r, bool rows_only) {
  const int64_t bound = rows_only ? r.max_rows * r.dim + static_cast<int64_t>(r.total - r.table)
                                  : static_cast<int64_t>(r.total);
  const int64_t blocks = std::max<int64_t>(1, (bound + kThreads - 1) / kThreads);
  return static_cast<unsigned>(std::min<int64_t>(blocks, kMaxBlocks));
}

void check_range(const StepRange& r, bool needs_rows) {
  if (r.table > r.total || r.dim <= 0) fail("internal: bad optimizer range (table ", r.table, ", total ", r.total, ")");
  if (needs_rows && (!r.rows || !r.row_count)) fail("internal: optimizer range needs the touched rows");
}

}  // namespace

void gradient_norm(double* norm, float* scale, double* partials, const float* grads, const int32_t* halted,
                   const StepRange& range, float clip_norm, cudaStream_t stream) {
  const bool rows_only = range.rows != nullptr;  // as on the CPU: untouched rows are zero
  check_range(range, false);
  norm_partials_kernel<<<kNormBlocks, kThreads, 0, stream>>>(partials, grads, range, rows_only);
  ENHANCED_CUDA_CHECK_LAUNCH();
  norm_finish_kernel<<<1, kNormBlocks, 0, stream>>>(norm, scale, partials, halted, clip_norm);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void sgd_step(float* params, float* velocity, const float* grads, const float* scale, const double* norm,
              const StepScalars* scalars, const StepRange& range, float momentum, float weight_decay,
              bool decay_embedding, cudaStream_t stream) {
  check_range(range, range.rows_only);
  if (momentum > 0 && !velocity) fail("internal: SGD with momentum needs a velocity buffer");
  sgd_kernel<<<blocks_for(range, range.rows_only), kThreads, 0, stream>>>(
      params, velocity, grads, scale, norm, scalars, range, momentum, weight_decay, decay_embedding);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void adam_step(float* params, float* first_moment, float* second_moment, const float* grads, const float* scale,
               const double* norm, const StepScalars* scalars, const StepRange& range, float beta1, float beta2,
               float epsilon, bool decay_embedding, cudaStream_t stream) {
  check_range(range, range.rows_only);
  adam_kernel<<<blocks_for(range, range.rows_only), kThreads, 0, stream>>>(
      params, first_moment, second_moment, grads, scale, norm, scalars, range, beta1, beta2, epsilon, decay_embedding);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void zero_gradients(float* grads, const StepRange& range, cudaStream_t stream) {
  check_range(range, true);
  zero_kernel<<<blocks_for(range, true), kThreads, 0, stream>>>(grads, range);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

}  // namespace enhanced::cuda
