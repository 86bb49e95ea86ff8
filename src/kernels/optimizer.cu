// Gradient norm (deterministic two-stage reduction), the optimizer's update in one launch over
// the carved parameter buffer, and gradient zeroing. The index space and the update arithmetic are
// steps/optimizer_steps.h's, which the CPU layer (layers/optimizer.cpp) calls too, so from the
// same inputs the device step gives the CPU step's bits (the index space is tested on the host).
#include <cub/block/block_reduce.cuh>
#include <math_constants.h>

#include <algorithm>
#include <vector>

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
                                   const double* __restrict__ partials, const Halt* __restrict__ halted,
                                   float clip_norm) {
  using Reduce = cub::BlockReduce<double, kNormBlocks>;
  __shared__ typename Reduce::TempStorage storage;
  const double total = Reduce(storage).Sum(partials[threadIdx.x]);
  if (threadIdx.x == 0) {
    const double value = (halted && *halted != Halt::none) ? CUDART_NAN : sqrt(total);
    *norm = value;
    *scale = steps::clip_factor(value, clip_norm);
  }
}

template <class Update>
__global__ void update_kernel(float* __restrict__ w, steps::Moments m, const float* __restrict__ g,
                              const float* __restrict__ scale_ptr, const double* __restrict__ norm,
                              const StepScalars* __restrict__ scalars, StepRange r, OptimizerConfig c) {
  if (!isfinite(*norm)) return;  // the host reports the error; weights stay unchanged
  const float scale = *scale_ptr;
  const Update update = Update::of(c, *scalars);
  const float decay = update.decay();
  const Space s = space_of(r, r.rows_only);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < s.size;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = element_of(r, r.rows_only, s, i);
    update(k, w, m, g, scale, steps::decay_at(k, r.table, c.weight_decay_embedding, decay, Update::no_decay));
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

void gradient_norm(double* norm, float* scale, double* partials, const float* grads, const Halt* halted,
                   const StepRange& range, float clip_norm, cudaStream_t stream) {
  const bool rows_only = range.rows != nullptr;  // as on the CPU: untouched rows are zero
  check_range(range, false);
  norm_partials_kernel<<<kNormBlocks, kThreads, 0, stream>>>(partials, grads, range, rows_only);
  ENHANCED_CUDA_CHECK_LAUNCH();
  norm_finish_kernel<<<1, kNormBlocks, 0, stream>>>(norm, scale, partials, halted, clip_norm);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void optimizer_update(float* params, const steps::Moments& moments, const float* grads, const float* scale,
                      const double* norm, const StepScalars* scalars, const StepRange& range,
                      const OptimizerConfig& optimizer, cudaStream_t stream) {
  check_range(range, range.rows_only);
  const std::vector<const char*> names = moment_names(optimizer);
  for (size_t i = 0; i < names.size(); ++i)
    if (i >= steps::kMaxMoments || !moments.at[i])
      fail("internal: ", to_string(optimizer.kind), " needs a buffer for its moment '", names[i], "'");
  steps::with_update(optimizer.kind, [&](auto kind) {
    update_kernel<decltype(kind)><<<blocks_for(range, range.rows_only), kThreads, 0, stream>>>(
        params, moments, grads, scale, norm, scalars, range, optimizer);
    ENHANCED_CUDA_CHECK_LAUNCH();
  });
}

void zero_gradients(float* grads, const StepRange& range, cudaStream_t stream) {
  check_range(range, true);
  zero_kernel<<<blocks_for(range, true), kThreads, 0, stream>>>(grads, range);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

}  // namespace enhanced::cuda
