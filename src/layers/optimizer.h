// The optimizer step on the CPU: SGD (optional momentum, PyTorch semantics) or Adam over the
// whole parameter buffer in one loop. The embedding gradient is sparse: when rows_only(config)
// only the rows named in the batch are visited, so a step's cost does not grow with V. The
// per-element arithmetic is steps/optimizer_steps.h's, shared with kernels/optimizer.cu.
#pragma once

#include <cstdint>
#include <vector>

#include "enhanced/model.h"
#include "enhanced/optimizer_config.h"

namespace enhanced {

// params, state.moments -= update(grads); state.steps += 1. touched_rows: the sorted embedding
// rows named in the batch (every other row's gradient is zero). learning_rate: this step's rate
// (state.config's learning_rate is only the run's base rate; a schedule passes each step's).
// Returns the global gradient norm before clipping. A non-finite norm leaves everything unchanged
// and is returned (the engine halts on it, as the GPU's update kernels skip such a step); a bad
// rate throws Error and leaves everything unchanged.
double optimizer_step(ParameterBuffer<float>& params, OptimizerState& state, const ParameterBuffer<float>& grads,
                      const std::vector<int32_t>& touched_rows, float learning_rate);

// grads = 0 where a step may have written: everything but the embedding, and the touched rows.
void zero_gradients(ParameterBuffer<float>& grads, const std::vector<int32_t>& touched_rows);

}  // namespace enhanced
