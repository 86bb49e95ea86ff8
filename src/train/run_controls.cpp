#include "train/run_controls.h"

#include <cstdio>

namespace enhanced {

RunControls::RunControls(const TrainOptions& o, int64_t total_steps)
    : base_lr_(o.optimizer.learning_rate), total_steps_(total_steps) {
  schedule_.kind = parse_schedule_kind(o.lr_schedule);
  schedule_.warmup_steps = o.warmup_steps;
  schedule_.min_lr = o.min_lr;
  schedule_.step_size = o.lr_step_size;
  schedule_.factor = o.lr_factor;
  schedule_.patience = o.lr_patience;
  monitor_options_.metric = parse_monitor_metric(o.monitor);
  monitor_options_.min_delta = o.min_delta;
  monitor_options_.early_stopping = o.early_stopping;
  monitor_options_.plateau = schedule_.kind == ScheduleKind::plateau;
  monitor_options_.plateau_patience = o.lr_patience;
}

float RunControls::learning_rate(int64_t step) const {
  return static_cast<float>(learning_rate_at(schedule_, base_lr_, step, total_steps_, monitor_.plateau_reductions));
}

void RunControls::replay(const std::vector<Validation>& validations) {
  monitor_ = enhanced::replay(validations, monitor_options_);
}

std::string RunControls::early_stop_text(const std::string& monitor, double min_delta) const {
  const double best = monitor_options_.metric == MonitorMetric::valid_loss ? monitor_.best : -monitor_.best;
  char text[320];
  std::snprintf(text, sizeof text, "early stopping: %s did not improve by more than %g in %lld validations; best %g at "
                "step %lld (best.safetensors)", monitor.c_str(), min_delta, static_cast<long long>(monitor_.wait), best,
                static_cast<long long>(monitor_.best_step));
  return text;
}

}  // namespace enhanced
