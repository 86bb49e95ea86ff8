// The schedule and the monitor of one run: the learning rate of each step and the decisions the
// validations imply (best, plateau reductions, early stopping), both from schedule.h's pure
// functions of the run's options, the step and the recorded validations, so a resume recomputes
// them exactly. Apart from the step loop (training_run.h) so that the loop stays the loop.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enhanced/train_options.h"
#include "train/schedule.h"

namespace enhanced {

class RunControls {
 public:
  RunControls(const TrainOptions& options, int64_t total_steps);

  // The learning rate of the step with 0-based index `step`: a function of the step and of the
  // validations recorded before it (plateau), nothing else. Every rate asked for is that of the
  // next step or of the last one taken, and validations come after a step's metrics line: the
  // validations replayed so far are those before it.
  float learning_rate(int64_t step) const;

  // Whether the rate is the base rate alone at `step` (a constant schedule past its warmup), and
  // so can be set (TrainingAccess::set_learning_rate); base: the new base rate.
  bool rate_is_constant_at(int64_t step) const {
    return schedule_.kind == ScheduleKind::constant && step >= schedule_.warmup_steps;
  }
  void set_base_rate(double base) { base_lr_ = base; }

  // The decisions of this history of validations (all of the run's so far, in order).
  void replay(const std::vector<Validation>& validations);
  const MonitorState& monitor() const { return monitor_; }
  bool plateau() const { return schedule_.kind == ScheduleKind::plateau; }

  // "early stopping: valid_loss did not improve ...", for the end of a run the monitor stopped.
  std::string early_stop_text(const std::string& monitor, double min_delta) const;

 private:
  ScheduleOptions schedule_;
  MonitorOptions monitor_options_;
  MonitorState monitor_;
  double base_lr_ = 0;
  int64_t total_steps_ = 0;
};

}  // namespace enhanced
