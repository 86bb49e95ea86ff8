// The device-side run totals of the training steps (step_totals.h).
#include "kernels/step_totals.h"

#include <cub/block/block_reduce.cuh>

namespace enhanced::cuda {
namespace {

constexpr int kAccountThreads = 256;

__global__ void account_kernel(DeviceTotals* __restrict__ totals, const double* __restrict__ mean_loss,
                               const float* __restrict__ logits, const int32_t* __restrict__ labels,
                               const StepScalars* __restrict__ scalars, int batch, int num_labels) {
  using Reduce = cub::BlockReduce<int, kAccountThreads>;
  __shared__ typename Reduce::TempStorage storage;
  int correct = 0;
  for (int b = static_cast<int>(threadIdx.x); b < batch; b += kAccountThreads) {
    const float* row = logits + static_cast<int64_t>(b) * num_labels;
    int best = 0;
    for (int l = 1; l < num_labels; ++l)
      if (row[l] > row[best]) best = l;
    correct += best == labels[b];
  }
  const int total = Reduce(storage).Sum(correct);
  if (threadIdx.x != 0 || totals->halted) return;
  const double loss = *mean_loss;
  if (!isfinite(loss)) {
    totals->halted = static_cast<int32_t>(Halt::loss);
    totals->halted_step = scalars->step;
    totals->halted_value = loss;
    return;
  }
  totals->loss_sum = __dadd_rn(totals->loss_sum, __dmul_rn(loss, static_cast<double>(batch)));
  totals->samples += batch;
  totals->correct += total;
}

__global__ void finish_step_kernel(DeviceTotals* __restrict__ totals, const double* __restrict__ norm,
                                   const StepScalars* __restrict__ scalars) {
  if (totals->halted) return;
  if (!isfinite(*norm)) {
    totals->halted = static_cast<int32_t>(Halt::gradient);
    totals->halted_step = scalars->step;
    totals->halted_value = *norm;
    return;
  }
  totals->steps += 1;
}

}  // namespace

void account_step(DeviceTotals* totals, const double* mean_loss, const float* logits, const int32_t* labels,
                  const StepScalars* scalars, int batch, int num_labels, cudaStream_t stream) {
  account_kernel<<<1, kAccountThreads, 0, stream>>>(totals, mean_loss, logits, labels, scalars, batch, num_labels);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void finish_step(DeviceTotals* totals, const double* norm, const StepScalars* scalars, cudaStream_t stream) {
  finish_step_kernel<<<1, 1, 0, stream>>>(totals, norm, scalars);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

}  // namespace enhanced::cuda
