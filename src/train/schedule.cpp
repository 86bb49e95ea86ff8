#include "train/schedule.h"

#include <algorithm>
#include <cmath>

#include "enhanced/common.h"
#include "enhanced/train_options.h"

namespace enhanced {

const EnumNames<ScheduleKind>& schedule_kinds() {
  static const EnumNames<ScheduleKind> table{{ScheduleKind::constant, "constant"},
                                             {ScheduleKind::step, "step"},
                                             {ScheduleKind::cosine, "cosine"},
                                             {ScheduleKind::linear, "linear"},
                                             {ScheduleKind::plateau, "plateau"}};
  return table;
}

ScheduleKind parse_schedule_kind(const std::string& text) {
  return parse_flag_value(schedule_kinds(), text, "--lr-schedule");
}

const char* to_string(ScheduleKind kind) { return name_of(schedule_kinds(), kind); }

std::vector<std::string> lr_schedule_names() { return names_of(schedule_kinds()); }

// torch ReduceLROnPlateau's eps: a reduction smaller than this is not made.
constexpr double kPlateauEpsilon = 1e-8;

// Warm-up first (step s of W runs at lr * (s + 1) / W, so no step is wasted at 0), then the
// schedule on the steps after it: torch's StepLR, CosineAnnealingLR (T_max the steps left),
// LinearLR down to min_lr, and ReduceLROnPlateau's lr * factor^reductions floored at min_lr.
double learning_rate_at(const ScheduleOptions& schedule, double base_lr, int64_t step, int64_t total_steps,
                        int64_t plateau_reductions) {
  if (step < schedule.warmup_steps)
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(schedule.warmup_steps);
  const int64_t after = step - schedule.warmup_steps;
  const double span = static_cast<double>(std::max<int64_t>(total_steps - schedule.warmup_steps, 1));
  const double progress = std::min(static_cast<double>(after), span) / span;
  switch (schedule.kind) {
    case ScheduleKind::constant: return base_lr;
    case ScheduleKind::step:
      return std::max(base_lr * std::pow(schedule.factor, static_cast<double>(after / schedule.step_size)),
                      schedule.min_lr);
    case ScheduleKind::cosine:
      return schedule.min_lr + (base_lr - schedule.min_lr) * (1 + std::cos(M_PI * progress)) / 2;
    case ScheduleKind::linear: return base_lr + (schedule.min_lr - base_lr) * progress;
    case ScheduleKind::plateau: {
      double lr = base_lr;
      for (int64_t k = 0; k < plateau_reductions; ++k) {
        const double reduced = std::max(lr * schedule.factor, schedule.min_lr);
        if (lr - reduced > kPlateauEpsilon) lr = reduced;
      }
      return lr;
    }
  }
  return base_lr;
}

const EnumNames<MonitorMetric>& monitor_metrics() {
  static const EnumNames<MonitorMetric> table{{MonitorMetric::valid_loss, "valid_loss"},
                                              {MonitorMetric::valid_accuracy, "valid_accuracy"},
                                              {MonitorMetric::valid_f1, "valid_f1"}};
  return table;
}

MonitorMetric parse_monitor_metric(const std::string& text) {
  return parse_flag_value(monitor_metrics(), text, "--monitor");
}

const char* to_string(MonitorMetric metric) { return name_of(monitor_metrics(), metric); }

std::vector<std::string> monitor_names() { return names_of(monitor_metrics()); }

// Monitored values are compared as "lower is better": accuracy and F1 are negated.
double monitored_value(const Validation& validation, MonitorMetric metric) {
  switch (metric) {
    case MonitorMetric::valid_loss: return validation.loss;
    case MonitorMetric::valid_accuracy: return -validation.accuracy;
    case MonitorMetric::valid_f1: return -validation.f1;
  }
  return validation.loss;
}

MonitorState replay(const std::vector<Validation>& history, const MonitorOptions& options) {
  MonitorState s;
  for (const Validation& validation : history) {
    const double value = monitored_value(validation, options.metric);
    const bool first = !s.has_best;
    s.last_is_best = first || value < s.best;
    if (s.last_is_best) {
      s.best = value;
      s.best_step = validation.step;
    }
    // Keras EarlyStopping and torch ReduceLROnPlateau (threshold_mode "abs"): better by more
    // than min_delta, else one more bad validation.
    if (first || value < s.improvement_reference - options.min_delta) {
      s.improvement_reference = value;
      s.wait = 0;
      s.plateau_bad_validations = 0;
    } else {
      ++s.wait;
      if (options.plateau && ++s.plateau_bad_validations > options.plateau_patience) {
        ++s.plateau_reductions;
        s.plateau_bad_validations = 0;
      }
    }
    s.has_best = true;
  }
  s.stop = options.early_stopping > 0 && s.wait >= options.early_stopping;
  return s;
}

}  // namespace enhanced
