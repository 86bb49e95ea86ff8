// What happens between steps, as pure functions of the run's options, the step and the recorded
// validations: the learning rate of each step (warm-up, then a schedule), and the monitor that
// decides best.safetensors, plateau reductions and early stopping. The run state records the
// validations, not the decisions, so a resume recomputes them as the uninterrupted run made them
// (and a resume with another patience or monitor makes them as if it had applied all along; early
// stopping looks only at the latest validation, so such a resume never stops a run that is
// improving).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enhanced/enum_names.h"

namespace enhanced {

enum class ScheduleKind { constant, step, cosine, linear, plateau };
const EnumNames<ScheduleKind>& schedule_kinds();           // --lr-schedule's names
ScheduleKind parse_schedule_kind(const std::string& text);  // errors name --lr-schedule
const char* to_string(ScheduleKind kind);

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::constant;
  int64_t warmup_steps = 0;  // linear warm-up from lr / warmup to lr over the first steps
  double min_lr = 0;         // floor of step/plateau; end point of cosine/linear
  int64_t step_size = 0;     // step: multiply by factor every step_size steps after warm-up
  double factor = 0.1;       // step and plateau
  int64_t patience = 10;     // plateau: validations without improvement before a reduction
};

// The learning rate of the step with 0-based index `step` of a run of `total_steps`, with
// `plateau_reductions` reductions made by validations before it (each as torch makes it: skipped
// once it would change the rate by less than 1e-8).
double learning_rate_at(const ScheduleOptions& schedule, double base_lr, int64_t step, int64_t total_steps,
                        int64_t plateau_reductions);

enum class MonitorMetric { valid_loss, valid_accuracy, valid_f1 };
const EnumNames<MonitorMetric>& monitor_metrics();             // --monitor's names
MonitorMetric parse_monitor_metric(const std::string& text);  // errors name --monitor
const char* to_string(MonitorMetric metric);

// One validation: after `step` optimizer steps.
struct Validation {
  int64_t step = 0;
  double loss = 0, accuracy = 0, f1 = 0;
};

struct MonitorOptions {
  MonitorMetric metric = MonitorMetric::valid_loss;
  double min_delta = 0;          // an improvement must beat the best by more than this
  int64_t early_stopping = 0;    // stop after this many validations without improvement (0: never)
  bool plateau = false;          // count plateau reductions (the plateau schedule)
  int64_t plateau_patience = 10;
};

// The decisions the validations so far imply (Keras EarlyStopping, torch ReduceLROnPlateau).
struct MonitorState {
  bool has_best = false;
  double best = 0;                      // best monitored value (best.safetensors: strict improvement)
  int64_t best_step = 0;                // the step of the first validation with that value
  bool last_is_best = false;            // the latest validation set a new best
  double improvement_reference = 0;     // the value to beat by more than min_delta
  int64_t wait = 0;                     // validations since improvement_reference last moved
  int64_t plateau_bad_validations = 0;  // plateau's count since its last reduction or improvement
  int64_t plateau_reductions = 0;
  bool stop = false;                    // early stopping: the latest validation exhausted the patience
};

double monitored_value(const Validation& validation, MonitorMetric metric);
MonitorState replay(const std::vector<Validation>& history, const MonitorOptions& options);

}  // namespace enhanced
