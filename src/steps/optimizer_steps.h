// The optimizer's arithmetic, written once for the CPU layer (layers/optimizer.cpp) and its CUDA
// twin (kernels/optimizer.cu): the step's scalars, the clipping factor, and the SGD / Adam update
// of one element with round-to-nearest operations, never contracted into FMA. Both devices call
// these, so their bits agree by construction; tests/test_optimizer_steps.cpp also runs the
// device's index space (StepRange) on the host against the CPU step.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "enhanced/optimizer_config.h"
#include "steps/host_device.h"

namespace enhanced::steps {

// The index space an optimizer step visits: the whole buffer, or (rows_only) the touched
// embedding rows followed by everything after the embedding table.
struct StepRange {
  size_t total = 0;            // elements in the buffer
  size_t table = 0;            // V * D: where the embedding ends
  int dim = 0;                 // D
  bool rows_only = false;
  const int32_t* rows = nullptr;        // device, sorted distinct rows (rows_only and norm)
  const int32_t* row_count = nullptr;   // device, one int
  int64_t max_rows = 0;                 // bound on *row_count, sizes the launch
};

// Per-step optimizer scalars, read on the device so that a captured CUDA graph replays any step
// (with its own learning rate: a schedule changes nothing but these).
struct StepScalars {
  float adam_step_size = 0;              // lr_t / (1 - beta1^t)
  float adam_bias_correction2_sqrt = 0;  // sqrt(1 - beta2^t)
  int32_t first_step = 0;                // SGD momentum: the buffer starts at g on step 1
  float learning_rate = 0;               // lr_t, this step's rate (SGD's; Adam's is in adam_step_size)
  int64_t step = 0;                      // t, 1-based
  float adamw_decay = 1;                 // AdamW: w *= 1 - lr_t * weight_decay first (1: no decay)
  int32_t reserved = 0;
};

// Step t's scalars for the rate lr_t: double arithmetic, then rounded to float.
inline StepScalars step_scalars(const OptimizerConfig& optimizer, int64_t step, float learning_rate) {
  StepScalars out;
  out.step = step;
  out.first_step = step == 1 ? 1 : 0;
  out.learning_rate = learning_rate;
  if (optimizer.kind == OptimizerKind::adam) {
    const double t = static_cast<double>(step);
    out.adam_step_size = static_cast<float>(static_cast<double>(learning_rate) /
                                            (1.0 - std::pow(static_cast<double>(optimizer.beta1), t)));
    out.adam_bias_correction2_sqrt =
        static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(optimizer.beta2), t)));
    if (optimizer.weight_decay > 0)
      out.adamw_decay = static_cast<float>(1.0 - static_cast<double>(learning_rate) * optimizer.weight_decay);
  }
  return out;
}

// The weight decay of buffer element k: `decay` for every parameter after the embedding table
// (its first `table` elements), and for the table's only when decay_embedding; `none` (SGD: 0,
// AdamW's factor: 1) otherwise.
ENHANCED_HOST_DEVICE inline float decay_at(int64_t k, size_t table, bool decay_embedding, float decay, float none) {
  return decay_embedding || k >= static_cast<int64_t>(table) ? decay : none;
}

// torch.nn.utils.clip_grad_norm_'s factor for a global norm (1 when clipping is off or not needed).
ENHANCED_HOST_DEVICE inline float clip_factor(double norm, float clip_norm) {
  if (clip_norm > 0 && norm > clip_norm) return static_cast<float>(clip_norm / (norm + 1e-6));
  return 1.0f;
}

// rows_only visits row_count * D elements of the touched rows, then the (total - table)
// elements after the table; otherwise 0 .. total.
struct Space {
  int64_t row_elements;
  int64_t size;
};

ENHANCED_HOST_DEVICE inline Space space_of(const StepRange& r, bool rows_only) {
  if (!rows_only) return {0, static_cast<int64_t>(r.total)};
  const int64_t row_elements = static_cast<int64_t>(*r.row_count) * r.dim;
  return {row_elements, row_elements + static_cast<int64_t>(r.total - r.table)};
}

// The buffer element of index i of the space.
ENHANCED_HOST_DEVICE inline int64_t element_of(const StepRange& r, bool rows_only, const Space& s, int64_t i) {
  if (!rows_only) return i;
  if (i < s.row_elements) return static_cast<int64_t>(r.rows[i / r.dim]) * r.dim + i % r.dim;
  return static_cast<int64_t>(r.table) + (i - s.row_elements);
}

// PyTorch SGD on element k (momentum buffer starts at g on the first step); weight_decay (this
// element's, decay_at; 0: none) is added to the clipped gradient as torch's weight_decay does.
ENHANCED_HOST_DEVICE inline void sgd_update(int64_t k, float* w, float* velocity, const float* g, float scale,
                                            float lr, float mu, float weight_decay, bool first_step) {
  float gradient = mul_rn(g[k], scale);
  if (weight_decay != 0) gradient = add_rn(gradient, mul_rn(weight_decay, w[k]));
  if (mu > 0) {
    const float v = first_step ? gradient : add_rn(mul_rn(mu, velocity[k]), gradient);
    velocity[k] = v;
    w[k] = sub_rn(w[k], mul_rn(lr, v));
  } else {
    w[k] = sub_rn(w[k], mul_rn(lr, gradient));
  }
}

// PyTorch Adam on element k: w -= step_size * m / (sqrt(v) / bias_correction2_sqrt + eps), after
// AdamW's decoupled decay w *= decay (this element's, decay_at; 1: none).
ENHANCED_HOST_DEVICE inline void adam_update(int64_t k, float* w, float* m, float* v, const float* g, float scale,
                                             float b1, float b2, float eps, float step_size,
                                             float bias_correction2_sqrt, float decay) {
  const float gradient = mul_rn(g[k], scale);
  const float m_new = add_rn(mul_rn(b1, m[k]), mul_rn(sub_rn(1.0f, b1), gradient));
  const float v_new = add_rn(mul_rn(b2, v[k]), mul_rn(mul_rn(sub_rn(1.0f, b2), gradient), gradient));
  m[k] = m_new;
  v[k] = v_new;
  const float denominator = add_rn(div_rn(sqrt_rn(v_new), bias_correction2_sqrt), eps);
  const float weight = decay != 1.0f ? mul_rn(w[k], decay) : w[k];
  w[k] = sub_rn(weight, div_rn(mul_rn(step_size, m_new), denominator));
}

}  // namespace enhanced::steps
