// The device-side run totals of the training steps (step_totals.h).
#include "kernels/step_totals.h"

#include <cub/block/block_reduce.cuh>

namespace enhanced::cuda {
namespace {

constexpr int kAccountThreads = 256;

// The samples whose first largest logit is the label (steps::predicted_label), in thread 0 of a
// block of kAccountThreads.
__device__ int block_correct(const float* __restrict__ logits, const int32_t* __restrict__ labels, int batch,
                             int num_labels) {
  using Reduce = cub::BlockReduce<int, kAccountThreads>;
  __shared__ typename Reduce::TempStorage storage;
  int correct = 0;
  for (int b = static_cast<int>(threadIdx.x); b < batch; b += kAccountThreads)
    correct += steps::predicted_label(logits + static_cast<int64_t>(b) * num_labels, num_labels) == labels[b];
  return Reduce(storage).Sum(correct);
}

__global__ void account_kernel(DeviceTotals* __restrict__ totals, const double* __restrict__ mean_loss,
                               const float* __restrict__ logits, const int32_t* __restrict__ labels,
                               const StepScalars* __restrict__ scalars, int batch, int num_labels) {
  const int correct = block_correct(logits, labels, batch, num_labels);
  if (threadIdx.x == 0) steps::account_loss(*totals, *mean_loss, batch, correct, scalars->step);
}

__global__ void shard_totals_kernel(double* __restrict__ sums, const double* __restrict__ loss_share,
                                    const float* __restrict__ logits, const int32_t* __restrict__ labels, int batch,
                                    int num_labels) {
  const int correct = block_correct(logits, labels, batch, num_labels);
  if (threadIdx.x != 0) return;
  sums[0] = batch > 0 ? *loss_share : 0.0;
  sums[1] = static_cast<double>(correct);
}

__global__ void account_reduced_kernel(DeviceTotals* __restrict__ totals, double* __restrict__ mean_loss,
                                       const double* __restrict__ sums, const LossDenominator* __restrict__ whole,
                                       const StepScalars* __restrict__ scalars) {
  *mean_loss = sums[0];
  steps::account_loss(*totals, sums[0], whole->batch, static_cast<int64_t>(sums[1]), scalars->step);
}

__global__ void finish_step_kernel(DeviceTotals* __restrict__ totals, const double* __restrict__ norm,
                                   const StepScalars* __restrict__ scalars) {
  steps::account_update(*totals, *norm, scalars->step);
}

}  // namespace

void account_step(DeviceTotals* totals, const double* mean_loss, const float* logits, const int32_t* labels,
                  const StepScalars* scalars, int batch, int num_labels, cudaStream_t stream) {
  account_kernel<<<1, kAccountThreads, 0, stream>>>(totals, mean_loss, logits, labels, scalars, batch, num_labels);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void shard_totals(double* sums, const double* loss_share, const float* logits, const int32_t* labels, int batch,
                  int num_labels, cudaStream_t stream) {
  shard_totals_kernel<<<1, kAccountThreads, 0, stream>>>(sums, loss_share, logits, labels, batch, num_labels);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void account_reduced_step(DeviceTotals* totals, double* mean_loss, const double* sums, const LossDenominator* whole,
                          const StepScalars* scalars, cudaStream_t stream) {
  account_reduced_kernel<<<1, 1, 0, stream>>>(totals, mean_loss, sums, whole, scalars);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void finish_step(DeviceTotals* totals, const double* norm, const StepScalars* scalars, cudaStream_t stream) {
  finish_step_kernel<<<1, 1, 0, stream>>>(totals, norm, scalars);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

}  // namespace enhanced::cuda
