// The optimizer step on the GPU: the CUDA twin of layers/optimizer.h, but not in its argument
// order. The CPU's one optimizer_step(params, state, grads, touched_rows, learning_rate) is two
// calls here: gradient_norm (its outputs first: norm, clip factor, scratch; then grads), then
// optimizer_update. That one takes device pointers (params, the moments that the CPU keeps in
// state, grads), the clip factor and norm that gradient_norm wrote, the step's StepScalars
// (which hold the learning rate) before the StepRange that stands for touched_rows, then the
// config, whose kind picks the update (steps::with_update, as on the CPU); every call takes the
// stream last (kernels/layers.h). zero_gradients keeps the CPU's order: grads, then the range for
// the rows.
#pragma once

#include <cstdint>

#include "enhanced/model.h"
#include "enhanced/train_totals.h"
#include "kernels/cuda_check.h"
#include "steps/optimizer_steps.h"

namespace enhanced::cuda {

using steps::StepRange;
using steps::StepScalars;
using steps::step_scalars;

// StepRange (the index space a step visits) and StepScalars (the step's scalars, read on the
// device) are in steps/optimizer_steps.h, shared with the CPU layer.

// norm (1, double) = sqrt(sum of squares of grads over the touched rows and the rest), in a
// fixed order (fixed grid, then one block): deterministic. scale (1, float) = the clipping
// factor (1 when clip_norm <= 0 or norm <= clip_norm). partials: 256 doubles of scratch.
// halted (nullable, device): when not Halt::none, *norm = NaN, so the update below is skipped.
void gradient_norm(double* norm, float* scale, double* partials, const float* grads, const Halt* halted,
                   const StepRange& range, float clip_norm, cudaStream_t stream);

// The config's optimizer (its steps/optimizer_steps.h update: SGD at scalars->learning_rate with
// weight decay added to the gradient, momentum buffer starting at g when scalars->first_step;
// Adam after AdamW's w *= scalars->adamw_decay), the table decaying only when
// weight_decay_embedding. moments: as moment_names(optimizer) orders them. Skips the update when
// *norm is not finite.
void optimizer_update(float* params, const steps::Moments& moments, const float* grads, const float* scale,
                      const double* norm, const StepScalars* scalars, const StepRange& range,
                      const OptimizerConfig& optimizer, cudaStream_t stream);

// grads = 0 over the range (rows_only: touched rows and everything after the table).
void zero_gradients(float* grads, const StepRange& range, cudaStream_t stream);

}  // namespace enhanced::cuda
