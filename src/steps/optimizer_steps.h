// The optimizer's arithmetic, written once for the CPU layer (layers/optimizer.cpp) and its CUDA
// twin (kernels/optimizer.cu): the step's scalars, the clipping factor, and the SGD / Adam update
// of one element with round-to-nearest operations, never contracted into FMA. Each optimizer's
// update is one struct (SgdUpdate, AdamUpdate: the arithmetic half of its row of optimizers() in
// enhanced/optimizer_config.h), listed in Updates; with_update picks the config's, and both
// devices' loops are written once over any of them. So their bits agree by construction;
// tests/test_optimizer_steps.cpp also runs the device's index space (StepRange) on the host
// against the CPU step.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "enhanced/common.h"
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

// The moments of one step, as its row of optimizers() orders them (nullptr where it keeps fewer).
constexpr size_t kMaxMoments = 2;
struct Moments {
  float* at[kMaxMoments] = {};
};

// An optimizer's update. `kind`: its row; set_scalars(config, out): its part of step t's
// StepScalars (double arithmetic, rounded to float), from out.step and out.learning_rate;
// of(config, scalars): the update of one step, built on the host or in a kernel; decay(): the
// step's weight decay where it applies and `no_decay` where it does not (decay_at's two values);
// update(k, w, moments, g, scale, decay): element k at that decay.
struct SgdUpdate {
  static constexpr OptimizerKind kind = OptimizerKind::sgd;
  static constexpr float no_decay = 0.0f;
  float learning_rate, momentum, weight_decay;
  bool first_step;

  static void set_scalars(const OptimizerConfig&, StepScalars&) {}
  ENHANCED_HOST_DEVICE static SgdUpdate of(const OptimizerConfig& c, const StepScalars& s) {
    return {s.learning_rate, c.momentum, c.weight_decay, s.first_step != 0};
  }
  ENHANCED_HOST_DEVICE float decay() const { return weight_decay; }
  ENHANCED_HOST_DEVICE void operator()(int64_t k, float* w, const Moments& m, const float* g, float scale,
                                       float decay) const {
    sgd_update(k, w, m.at[0], g, scale, learning_rate, momentum, decay, first_step);
  }
};

struct AdamUpdate {
  static constexpr OptimizerKind kind = OptimizerKind::adam;
  static constexpr float no_decay = 1.0f;
  float beta1, beta2, epsilon, step_size, bias_correction2_sqrt, adamw_decay;

  static void set_scalars(const OptimizerConfig& optimizer, StepScalars& out) {
    const double t = static_cast<double>(out.step);
    const float learning_rate = out.learning_rate;
    out.adam_step_size = static_cast<float>(static_cast<double>(learning_rate) /
                                            (1.0 - std::pow(static_cast<double>(optimizer.beta1), t)));
    out.adam_bias_correction2_sqrt =
        static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(optimizer.beta2), t)));
    if (optimizer.weight_decay > 0)
      out.adamw_decay = static_cast<float>(1.0 - static_cast<double>(learning_rate) * optimizer.weight_decay);
  }
  ENHANCED_HOST_DEVICE static AdamUpdate of(const OptimizerConfig& c, const StepScalars& s) {
    return {c.beta1, c.beta2, c.epsilon, s.adam_step_size, s.adam_bias_correction2_sqrt, s.adamw_decay};
  }
  ENHANCED_HOST_DEVICE float decay() const { return adamw_decay; }
  ENHANCED_HOST_DEVICE void operator()(int64_t k, float* w, const Moments& m, const float* g, float scale,
                                       float decay) const {
    adam_update(k, w, m.at[0], m.at[1], g, scale, beta1, beta2, epsilon, step_size, bias_correction2_sqrt, decay);
  }
};

// One update a row of optimizers(), in its order.
template <class... Update>
struct UpdateList {};
using Updates = UpdateList<SgdUpdate, AdamUpdate>;

// Calls visit(Update{}) with the update of `kind`: the one place an optimizer's kind is dispatched.
template <class Visit, class First, class... Rest>
void with_update(OptimizerKind kind, Visit&& visit, UpdateList<First, Rest...>) {
  if (kind == First::kind) return visit(First{});
  if constexpr (sizeof...(Rest) > 0) return with_update(kind, visit, UpdateList<Rest...>{});
  else fail("internal: optimizer ", to_string(kind), " has no update in steps::Updates");
}
template <class Visit>
void with_update(OptimizerKind kind, Visit&& visit) {
  with_update(kind, visit, Updates{});
}

// Step t's scalars for the rate lr_t: double arithmetic, then rounded to float.
inline StepScalars step_scalars(const OptimizerConfig& optimizer, int64_t step, float learning_rate) {
  StepScalars out;
  out.step = step;
  out.first_step = step == 1 ? 1 : 0;
  out.learning_rate = learning_rate;
  with_update(optimizer.kind, [&](auto update) { decltype(update)::set_scalars(optimizer, out); });
  return out;
}

}  // namespace enhanced::steps
