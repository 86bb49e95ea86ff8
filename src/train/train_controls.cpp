#include "enhanced/train_controls.h"

#include <limits>

#include "enhanced/common.h"

namespace enhanced {
namespace {

NumberRule whole_at_least(int64_t low) {
  NumberRule rule{static_cast<double>(low)};
  rule.integer = true;
  rule.whole_max = std::numeric_limits<int64_t>::max();
  return rule;
}

NumberRule real_at_least(double low) { return NumberRule{low}; }

}  // namespace

// A new control adds its TrainOptions field (its initialiser the default) and a row here; its
// flag, record key, resume rule (changeable) and range check follow. The code that uses it
// (schedule.cpp, run_controls.cpp) and check_training_controls' cross-flag rules are its own.
const std::vector<TrainControl>& train_controls() {
  using O = TrainOptions;
  static const std::vector<TrainControl> rows = {
      {"lr_schedule", "--lr-schedule", nullptr, nullptr, nullptr, &O::lr_schedule, {}, lr_schedule_names},
      {"warmup_steps", "--warmup-steps", "Linear warm-up to --lr over the first N steps", &O::warmup_steps, nullptr,
       nullptr, whole_at_least(0)},
      {"min_lr", "--min-lr", "Floor (step, plateau) or end point (cosine, linear) of the rate", nullptr, &O::min_lr,
       nullptr, real_at_least(0)},
      {"lr_step_size", "--lr-step-size", "step: multiply the rate by --lr-factor every N steps", &O::lr_step_size,
       nullptr, nullptr, whole_at_least(1), nullptr, false},
      // A factor that lowers the rate: 1 would never reduce it, above 1 would raise it.
      {"lr_factor", "--lr-factor", "step and plateau: the factor of each reduction (0 < factor < 1)", nullptr,
       &O::lr_factor, nullptr, NumberRule{0.0, 1.0, true, true}},
      {"lr_patience", "--lr-patience", "plateau: validations without improvement before a reduction",
       &O::lr_patience, nullptr, nullptr, whole_at_least(0)},
      {"monitor", "--monitor", "What best.safetensors, plateau and early stopping watch", nullptr, nullptr,
       &O::monitor, {}, monitor_names},
      {"min_delta", "--min-delta", "An improvement must beat the best by more than this", nullptr, &O::min_delta,
       nullptr, real_at_least(0)},
      {"early_stopping", "--early-stopping", "Stop after N validations without improvement (0: off)",
       &O::early_stopping, nullptr, nullptr, whole_at_least(0)},
  };
  return rows;
}

void check_control_values(const TrainOptions& o) {
  static const TrainOptions defaults;
  for (const TrainControl& row : train_controls()) {
    if (row.choice) continue;  // parsed where it is used (parse_schedule_kind, parse_monitor_metric)
    const double value = row.whole ? static_cast<double>(o.*row.whole) : o.*row.real;
    const double fallback = row.whole ? static_cast<double>(defaults.*row.whole) : defaults.*row.real;
    if (value == fallback) continue;
    if (const std::string problem = row.rule.check_value(value); !problem.empty()) fail(row.flag, " ", problem);
  }
}

}  // namespace enhanced
