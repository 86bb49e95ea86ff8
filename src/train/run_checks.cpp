#include "train/run_checks.h"

#include <algorithm>
#include <string>

#include "enhanced/common.h"
#include "enhanced/evaluate.h"
#include "enhanced/label_names.h"
#include "enhanced/memory.h"
#include "enhanced/train_fields.h"
#include "train/schedule.h"

namespace enhanced {

void check_run_datasets(const TrainOptions& o, const Dataset& train, const Dataset* valid) {
  check_has_samples(train, "--data");
  if (train.num_samples() < o.batch_size)
    fail(train.path(), ": ", train.num_samples(), " samples, fewer than --batch-size ", o.batch_size,
         " (every step would be one partial batch); give --batch-size ", train.num_samples(), " or less");
  if (valid) check_has_samples(*valid, "--valid");
}

RawTableShape raw_table_shape(const TrainOptions& o, const Dataset& train, const Dataset* valid) {
  const int64_t largest = std::max<int64_t>(train.max_model_token_id(), valid ? valid->max_model_token_id() : -1);
  return RawTableShape{o.embedding_dim, o.vocab_size, std::max<int64_t>(largest + 1, 1)};
}

void check_run_memory(const ModelConfig& config, const TrainOptions& o, uint64_t resident) {
  check_model_fits_memory(config, &o.optimizer, o.batch_size, o.engine.device, resident);
}

void check_model_flags(const TrainOptions& o, const ModelConfig& c, const std::string& source) {
  const auto conflict = [&](const char* flag, const std::string& value, const std::string& saved) {
    check_flag_matches_model(flag, o.given_flags.count(flag) > 0, value, saved, source);
  };
  conflict("--hidden", std::to_string(o.hidden), std::to_string(c.hidden));
  conflict("--embedding-dim", std::to_string(o.embedding_dim), std::to_string(c.embedding_dim));
  conflict("--vocab-size", std::to_string(o.vocab_size), std::to_string(c.vocab_size));
  conflict("--num-labels", std::to_string(o.num_labels), std::to_string(c.num_labels));
  conflict("--blend", o.blend, to_string(c.blend));
  conflict("--pool", o.pool, to_string(c.pool));
}

void check_data_seq_len(const Dataset& data, const ModelConfig& c, const std::string& source) {
  if (c.seq_len != data.seq_len())
    fail(source, ": checkpoint has T = ", c.seq_len, ", ", data.path(), " has T = ", data.seq_len());
}

void check_run_label_names(const TrainOptions& o, const ModelConfig& c) {
  if (o.label_names.empty()) return;
  check_label_names_count(o.label_names, c.num_labels,
                          o.label_names_path.empty() ? "the run's recorded label names" : o.label_names_path);
}

void check_training_controls(const TrainOptions& o) {
  const ScheduleKind kind = parse_schedule_kind(o.lr_schedule);
  parse_monitor_metric(o.monitor);
  if (!(o.min_lr >= 0) || !(static_cast<float>(o.min_lr) <= o.optimizer.learning_rate))
    fail("--min-lr must be between 0 and --lr (", o.optimizer.learning_rate, "), got ", o.min_lr);
  if (kind == ScheduleKind::step && o.lr_step_size < 1)
    fail("--lr-schedule step needs --lr-step-size of at least 1, got ", o.lr_step_size);
  check_field_values(o);  // each flag's own range, a recorded value's too
  // A control the schedule does not use would be silently ignored.
  const auto unused_unless = [&](const char* flag, bool used, const char* where) {
    if (o.given_flags.count(flag) && !used) fail(flag, " has no effect here: it applies to ", where);
  };
  unused_unless("--lr-step-size", kind == ScheduleKind::step, "--lr-schedule step");
  unused_unless("--lr-patience", kind == ScheduleKind::plateau, "--lr-schedule plateau");
  unused_unless("--lr-factor", kind == ScheduleKind::step || kind == ScheduleKind::plateau,
                "--lr-schedule step and plateau");
  unused_unless("--min-lr", kind != ScheduleKind::constant, "a --lr-schedule other than constant");
  unused_unless("--min-delta", o.early_stopping > 0 || kind == ScheduleKind::plateau,
                "--early-stopping and --lr-schedule plateau");
  if (o.valid_path.empty()) {
    const char* needs = kind == ScheduleKind::plateau ? "--lr-schedule plateau"
                        : o.early_stopping > 0        ? "--early-stopping"
                        : o.valid_every > 0           ? "--valid-every"
                        : o.given_flags.count("--monitor") ? "--monitor"
                                                           : nullptr;
    if (needs) fail(needs, " needs a validation set (--valid)");
  }
}

}  // namespace enhanced
