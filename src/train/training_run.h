// The step loop of one training run: batches from the loader onto an Engine (either device),
// the interval's and epoch's totals into metrics.jsonl and the progress line, validations, and
// saves at their points (run_saves.h), the learning rate and the monitor from run_controls.h.
// run_training (trainer.cpp) checks the inputs and builds the model before it makes one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "enhanced/batch_source.h"
#include "enhanced/batch_stream.h"
#include "enhanced/communicator.h"
#include "enhanced/dataset.h"
#include "enhanced/device.h"
#include "enhanced/engine.h"
#include "enhanced/loader.h"
#include "enhanced/progress.h"
#include "enhanced/safetensors.h"
#include "enhanced/train_options.h"
#include "enhanced/training_observer.h"
#include "train/metrics_log.h"
#include "train/run_controls.h"
#include "train/run_saves.h"
#include "train/run_state.h"

namespace enhanced {

// Its TrainingAccess is what the observer (set_access) reads and changes between steps.
class TrainingRun final : private TrainingAccess {
 public:
  // source: the steps' batches; train: the whole training set where there is one (null for a
  // stream, whose epochs may have no known length: the run then counts epochs, not steps);
  // valid: what each validation reads (a set in file order, or a pass of a stream).
  TrainingRun(TrainOptions options, ParameterBuffer<float> params, BatchSource& source, const Dataset* train,
              ValidationData valid, Communicator& communicator);
  // The engine holds references to params_ and optimizer_: a run stays where it was made.
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // Controls that can only be judged against the run's length: each must have an effect.
  void check_controls_fit_the_run() const;

  // The weights came from the state file when the run was built (run_training); this restores
  // the optimizer state and the run's position from the same file.
  void resume(const SafetensorsReader& state);
  // Whether a resumed run has anything left to do; says so when not.
  bool has_work() const;
  // A resumed run with nothing left to do rewrites last.safetensors from its state (run_saves.h),
  // a SIGINT or SIGTERM handled as in run(): the rewrite completes (a second signal removes its
  // temporary and ends the process). Returns the exit code: 0, or 128 + the signal.
  int refresh_last_checkpoint();

  // The engine the steps run on. On a GPU it holds the parameters and moments, and the host
  // copies are refreshed before each checkpoint; its steps are queued without waiting, and their
  // loss and accuracy read back at each logging point, checkpoint and epoch end (collect).
  // Called after resume(): the device starts from the restored optimizer state. The device is the
  // options' (engine.device); threads: the count configure_cpu_threads gave for them.
  void use_device(int threads);

  // The caller's hooks (training_observer.h; null: none). Before run(); one process only.
  void observe(TrainingObserver* observer);

  // Trains to the run's end (or the observer's stop or interrupt); the process exit code.
  int run();

 private:
  double run_seconds() const;
  std::string time_text() const;
  void print_model() const;
  void note_steps_after_the_last_validation() const;
  void print_done() const;
  // A step before a set_learning_rate keeps the rate it was taken at (logs name the last step's).
  float learning_rate(int64_t step) const { return step < rate_set_at_ ? rate_before_ : controls_.learning_rate(step); }
  int run_steps();

  // TrainingAccess (training_observer.h).
  void read_parameters(std::vector<float>& out) override;
  void write_parameters(const std::vector<float>& values) override;
  double learning_rate() const override { return learning_rate(position_.step); }
  void set_learning_rate(double rate) override;
  int64_t steps() const override { return position_.step; }

  bool length_known() const { return total_steps_ > 0; }
  bool run_is_over() const { return length_known() ? position_.step >= total_steps_ : position_.epoch >= o_.epochs; }
  bool at_last_step() const { return length_known() && position_.step == total_steps_; }
  bool epoch_is_full() const { return batches_ > 0 && position_.batch_in_epoch == batches_; }
  void say_input_ran_out() const;
  std::string where_text() const;
  int train_epoch(bool& epoch_done);
  int after_step();
  bool caller_says_stop(int& code);
  int save_on_interrupt(int code);
  int collect();
  int collect_for_batch_logs();
  TrainingLogs batch_logs() const;
  TrainingLogs epoch_logs(const nlohmann::json& line) const;
  int stop_non_finite(double loss, int64_t step, int64_t batch_index);
  void log_interval();
  void end_epoch();
  int end_epoch_and_poll();
  void end_cut_epoch();
  void validate_between_epochs();
  nlohmann::json metrics_line(const char* kind) const;
  void validate(nlohmann::json& line, TrainingObserver* observer);
  BatchSource& begin_validation();
  void save() { saves_.save(*engine_, params_, optimizer_, o_, position_, metrics_.lines()); }

  TrainOptions o_;
  ParameterBuffer<float> params_;
  BatchSource& source_;
  const Dataset* train_;
  ValidationData valid_data_;
  std::unique_ptr<BatchLoader> valid_loader_;  // valid_data_.set in file order
  BatchSource* valid_ = nullptr;               // what a validation reads: valid_loader_ or the stream
  int64_t validations_begun_ = 0;
  OptimizerState optimizer_;
  Communicator& comm_;
  bool speaks_;  // rank 0: writes the files, the progress line and the errors
  bool narrates_;  // rank 0 and options.narrate: the informational lines (train_options.h)
  // batches_: an epoch's (0: unknown, a stream's pass); total_steps_: the run's (0: unknown).
  int64_t batches_ = 0, total_steps_ = 0, first_step_ = 0;
  RunPosition position_;
  RunControls controls_;
  RunSaves saves_;
  MetricsLog metrics_;
  ProgressLine progress_;
  std::unique_ptr<Engine> engine_;
  TrainingObserver* observer_ = nullptr;
  bool batch_logs_ = false;        // the observer's wants_batch_logs()
  bool stopped_by_caller_ = false; // its poll said stop
  // Steps read back for batch logs, held until the point where the pipeline would have read them
  // (collect), so the interval's and epoch's sums group as without batch logs: the same bits.
  TrainTotals pending_;
  TrainingLogs last_epoch_logs_;
  // The observer's set_learning_rate: steps before rate_set_at_ were taken at rate_before_.
  int64_t rate_set_at_ = 0;
  float rate_before_ = 0;
};

}  // namespace enhanced
