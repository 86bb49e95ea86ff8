// What the device keeps about the training steps between two collect() calls (TrainTotals: the
// loss sum, samples, correct predictions and steps, and a halt that is sticky once a step meets
// a non-finite loss or gradient norm). Two launches a step fill it (step_totals.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda_check.h"
#include "kernels/softmax_xent.cuh"
#include "enhanced/train_totals.h"
#include "steps/optimizer_steps.h"
#include "steps/step_totals_steps.h"

namespace enhanced::cuda {

using steps::StepScalars;

// The device keeps the host's TrainTotals itself (its layout is the same on both sides); the
// kernels fill it with steps/step_totals_steps.h's rules, as the CPU engine does on the host.
using DeviceTotals = TrainTotals;

// After the loss: adds mean_loss * B (rounded as the host's `sum += loss * B`), B, and the
// samples whose first largest logit is the label (as std::max_element), or, when the loss is
// not finite, halts (Halt::loss, the step from scalars). Nothing once halted.
void account_step(DeviceTotals* totals, const double* mean_loss, const float* logits, const int32_t* labels,
                  const StepScalars* scalars, int batch, int num_labels, cudaStream_t stream);

// Data-parallel training, before the exchange: sums (2) = this rank's share of the whole batch's
// mean loss (*loss_share) and its samples predicted right (as account_step counts them); zeros
// for an empty shard (batch 0: *loss_share is not read). The sums are then reduced over the ranks.
void shard_totals(double* sums, const double* loss_share, const float* logits, const int32_t* labels, int batch,
                  int num_labels, cudaStream_t stream);

// After the sums are reduced over the ranks: account_step for the whole batch, as the CPU engine's
// data-parallel step: *mean_loss = sums[0] (the whole batch's mean, on every rank), then its
// times whole->batch, whole->batch samples and sums[1] correct are added, or the run halts.
void account_reduced_step(DeviceTotals* totals, double* mean_loss, const double* sums, const LossDenominator* whole,
                          const StepScalars* scalars, cudaStream_t stream);

// After the update: counts the step, or halts (Halt::gradient) when the gradient norm is not finite
// (the update kernels skipped it already). Nothing once halted.
void finish_step(DeviceTotals* totals, const double* norm, const StepScalars* scalars, cudaStream_t stream);

}  // namespace enhanced::cuda
