// The optimizer step on the GPU: the CUDA twin of layers/optimizer.h,
// with the same argument order plus the stream / library handle last (kernels/layers.h).
#pragma once

#include <cstdint>

#include "enhanced/model.h"
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
// halted (nullable, device): when non-zero, *norm = NaN, so the update below is skipped.
void gradient_norm(double* norm, float* scale, double* partials, const float* grads, const int32_t* halted,
                   const StepRange& range, float clip_norm, cudaStream_t stream);

// PyTorch SGD at scalars->learning_rate (momentum buffer starts at g when scalars->first_step),
// with weight_decay added to the gradient (the table's only when decay_embedding). Skips the
// update when *norm is not finite.
void sgd_step(float* params, float* velocity, const float* grads, const float* scale, const double* norm,
              const StepScalars* scalars, const StepRange& range, float momentum, float weight_decay,
              bool decay_embedding, cudaStream_t stream);

// PyTorch Adam: w -= step_size * m / (sqrt(v) / bias_correction2_sqrt + eps), the two from scalars,
// after AdamW's w *= scalars->adamw_decay (the table's only when decay_embedding).
void adam_step(float* params, float* first_moment, float* second_moment, const float* grads, const float* scale,
               const double* norm, const StepScalars* scalars, const StepRange& range, float beta1, float beta2,
               float epsilon, bool decay_embedding, cudaStream_t stream);

// grads = 0 over the range (rows_only: touched rows and everything after the table).
void zero_gradients(float* grads, const StepRange& range, cudaStream_t stream);

}  // namespace enhanced::cuda
