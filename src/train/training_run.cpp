#include "train/training_run.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "enhanced/common.h"
#include "enhanced/evaluate.h"
#include "train/class_weights.h"
#include "train/distributed.h"
#include "train/run_signals.h"
#include "train/run_validation.h"

namespace enhanced {
namespace {

// Totals of consecutive reads, in step order: a's sums first, as the engine would have added b's steps to them.
TrainTotals merged(const TrainTotals& a, const TrainTotals& b) {
  TrainTotals sum = a;
  sum.loss_sum = a.loss_sum + b.loss_sum;
  sum.samples += b.samples;
  sum.correct += b.correct;
  sum.steps += b.steps;
  if (a.halted == Halt::none) {
    sum.halted = b.halted;
    sum.halted_step = b.halted_step;
    sum.halted_value = b.halted_value;
  }
  return sum;
}

// The run's steps; 0 where an epoch's batches are unknown (a stream's passes) and no --steps is given.
int64_t run_length(const TrainOptions& o, int64_t batches) {
  if (o.steps > 0) return o.steps;
  if (batches == 0) return 0;
  if (o.epochs > std::numeric_limits<int64_t>::max() / batches)
    fail("--epochs ", o.epochs, " is too many: ", batches, " batches an epoch overflow the step count");
  return o.epochs * batches;
}

}  // namespace

TrainingRun::TrainingRun(TrainOptions options, ParameterBuffer<float> params, BatchSource& source,
                         const Dataset* train, ValidationData valid, Communicator& communicator)
    : o_(std::move(options)), params_(std::move(params)), source_(source), train_(train), valid_data_(valid),
      optimizer_(o_.optimizer, params_.config), comm_(communicator), speaks_(communicator.rank() == 0),
      narrates_(speaks_ && o_.narrate),
      batches_(source.batches_per_epoch()), total_steps_(run_length(o_, batches_)), controls_(o_, total_steps_),
      saves_(o_.out_dir, communicator, o_.label_names), progress_(o_.progress && speaks_) {
  if (valid_data_.set)  // one loader for the run's validations, each in file order at the run's batch size
    valid_loader_ = std::make_unique<BatchLoader>(*valid_data_.set, file_order(o_.batch_size));
  valid_ = valid_data_.set ? static_cast<BatchSource*>(valid_loader_.get()) : valid_data_.stream;
}

void TrainingRun::check_controls_fit_the_run() const {
  const ScheduleKind schedule = parse_schedule_kind(o_.lr_schedule);
  if (!length_known() && (schedule == ScheduleKind::cosine || schedule == ScheduleKind::linear))
    fail("--lr-schedule ", o_.lr_schedule, " needs the run's length, and a stream's passes have none: give the "
         "steps an epoch (steps_per_epoch) or --steps");
  if (!length_known()) return;  // the checks below need the run's length; an epoch end validates
  if (o_.warmup_steps >= total_steps_ && o_.warmup_steps > 0)
    fail("--warmup-steps ", o_.warmup_steps, " is not shorter than the run (", total_steps_, " steps)");
  const bool validates = valid_ && (o_.valid_every > 0 ? o_.valid_every <= total_steps_ : total_steps_ >= batches_);
  if (!validates && (o_.early_stopping > 0 || controls_.plateau()))
    fail(o_.early_stopping > 0 ? "--early-stopping" : "--lr-schedule plateau", " would never see a validation: the run "
         "has ", total_steps_, " steps and validates ", o_.valid_every > 0 ? "every " + std::to_string(o_.valid_every) +
         " steps" : "at epoch ends (" + std::to_string(batches_) + " steps); give --valid-every");
}

void TrainingRun::use_device(int threads) {
  // A new run resolves its class weights here (unless given as values: Model.fit's class_weight);
  // a resumed one has them from its state.
  if (o_.class_weight_values.empty() && !o_.class_weights.empty()) {
    if (!train_) fail("--class-weights ", o_.class_weights, " counts the labels of the whole set, which a stream of "
                      "batches does not hold: give the weights as values");
    o_.class_weight_values = class_weights_for(o_.class_weights, *train_, params_.config.num_labels);
  }
  if (!o_.class_weight_values.empty() && o_.class_weight_values.size() != static_cast<size_t>(params_.config.num_labels))
    fail("class weights: ", o_.class_weight_values.size(), " values, but the model has ", params_.config.num_labels,
         " labels");
  // A validation stream's batches may be larger than the training's: the engine takes either.
  const int max_batch = std::max(o_.batch_size, valid_data_.stream ? valid_data_.stream->max_batch() : 0);
  EngineOptions options = engine_options(o_.engine, max_batch, threads);
  options.class_weights = o_.class_weight_values;
  options.class_weight_mean = o_.class_weight_mean;
  options.communicator = &comm_;
  engine_ = make_engine(o_.engine.device, params_, &optimizer_, options);
  o_.engine.cuda.rnn_algorithm = engine_->rnn_algorithm();  // recorded, so a resume keeps the arithmetic
  if (narrates_) std::fprintf(stderr, "engine: %s\n", engine_->summary().c_str());
}

void TrainingRun::resume(const SafetensorsReader& state) {
  read_optimizer_state(optimizer_, state);
  position_ = read_run_position(state);
  // Steps are counted twice, by the run and by the optimizer (the halt report and Adam's bias
  // correction use the latter): a file where they disagree was not written by this trainer.
  if (optimizer_.steps != position_.step)
    fail(state.path(), ": the optimizer has taken ", optimizer_.steps, " steps but the run says ", position_.step);
  // Every epoch has the same number of batches, so the position must be on that grid.
  if (position_.batch_in_epoch > batches_ || position_.epoch > position_.step ||
      position_.step != position_.epoch * batches_ + position_.batch_in_epoch)
    fail(state.path(), ": the run stopped at epoch ", position_.epoch + 1, ", batch ", position_.batch_in_epoch,
         " (step ", position_.step, "), which does not fit ", o_.data_path, " (", batches_,
         " batches an epoch at batch size ", o_.batch_size, "): the training data changed since the run started");
  controls_.replay(position_.validations);
  if (narrates_) std::fprintf(stderr, "resuming %s at step %lld (epoch %lld, batch %lld)\n", saves_.dir().c_str(),
               static_cast<long long>(position_.step), static_cast<long long>(position_.epoch + 1),
               static_cast<long long>(position_.batch_in_epoch));
}

bool TrainingRun::has_work() const {
  const bool epoch_end_pending = epoch_is_full() && position_.step > 0;
  const bool stopped = controls_.monitor().stop;
  if (!narrates_)
    return !stopped && (position_.step < total_steps_ || epoch_end_pending);
  if (stopped)
    std::fprintf(stderr, "nothing to do: early stopping ended the run in %s at step %lld (raise --early-stopping "
                 "to continue it)\n", saves_.dir().c_str(), static_cast<long long>(position_.step));
  else if (position_.step >= total_steps_ && !epoch_end_pending)
    std::fprintf(stderr, "nothing to do: the run in %s has done %lld steps, and its length is %lld steps (give a "
                 "larger --epochs or --steps to train longer)\n", saves_.dir().c_str(),
                 static_cast<long long>(position_.step), static_cast<long long>(total_steps_));
  else
    return true;
  return false;
}

int TrainingRun::refresh_last_checkpoint() {
  if (comm_.size() == 1 && o_.handle_signals) stop_at_a_step_boundary_on_signals();
  raise_signals_if_asked(position_.step);  // the test hook: a signal as the rewrite starts
  saves_.refresh_last(params_, position_);
  if (stop_signal() == 0) return 0;
  if (speaks_) std::fprintf(stderr, "interrupted: last.safetensors is whole, the run is complete\n");
  return 128 + stop_signal();
}

// The observer holds the run's TrainingAccess for the run's length, however it ends.
int TrainingRun::run() {
  if (!observer_) return run_steps();
  observer_->set_access(this);
  int code = 0;
  try {
    code = run_steps();
  } catch (...) {
    observer_->set_access(nullptr);
    throw;
  }
  observer_->set_access(nullptr);
  return code;
}

int TrainingRun::run_steps() {
  metrics_.open(saves_.dir(), o_.resume, speaks_, position_);
  first_step_ = position_.step;
  print_model();
  note_steps_after_the_last_validation();
  // Several ranks would have to agree on the step to stop at: there a signal ends the job.
  if (comm_.size() == 1 && o_.handle_signals) stop_at_a_step_boundary_on_signals();
  progress_.restart();  // rates and times count the training loop only
  if (observer_) observer_->on_train_begin();
  // A run saved after its epoch's last step but before the epoch's end finishes that first.
  if (epoch_is_full())
    if (const int code = end_epoch_and_poll()) return code;
  while (!run_is_over() && !controls_.monitor().stop && !stopped_by_caller_) {
    bool epoch_done = false;
    if (const int code = train_epoch(epoch_done)) return code;
    if (const int code = collect()) return code;
    if (epoch_done)
      if (const int code = end_epoch_and_poll()) return code;
    if (source_.ran_out()) {
      say_input_ran_out();
      break;
    }
  }
  if (saves_.saved_at_step() != position_.step) save();  // an epoch's end may have saved this step already
  if (stopped_by_caller_ && position_.batch_in_epoch > 0) end_cut_epoch();
  progress_.finish();
  if (controls_.monitor().stop && narrates_)
    std::fprintf(stderr, "%s\n", controls_.early_stop_text(o_.monitor, o_.min_delta).c_str());
  if (stopped_by_caller_ && narrates_)
    std::fprintf(stderr, "stopped at step %lld by the caller: saved, a resume continues\n",
                 static_cast<long long>(position_.step));
  print_done();
  if (observer_) observer_->on_train_end(last_epoch_logs_.empty() ? batch_logs() : last_epoch_logs_);
  return 0;
}

void TrainingRun::observe(TrainingObserver* observer) {
  if (observer && comm_.size() > 1)
    fail("training hooks run in one process: a data-parallel run (", comm_.size(), " ranks) takes no observer");
  observer_ = observer;
  batch_logs_ = observer && observer->wants_batch_logs();
}

void TrainingRun::read_parameters(std::vector<float>& out) {
  engine_->sync_to_host();  // a GPU engine's weights are on the device
  out.assign(params_.data.begin(), params_.data.end());
}

void TrainingRun::write_parameters(const std::vector<float>& values) {
  if (values.size() != params_.size())
    fail("parameters: ", values.size(), " values given, the model has ", params_.size());
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i])) fail("parameters: value ", i, " is not finite (", values[i], ")");
  std::copy(values.begin(), values.end(), params_.data.begin());
  engine_->sync_to_device();
}

void TrainingRun::set_learning_rate(double rate) {
  if (!std::isfinite(rate) || rate < 0) fail("learning rate: must be a finite number >= 0, got ", rate);
  if (o_.lr_schedule != "constant")
    fail("the learning rate follows lr_schedule \"", o_.lr_schedule, "\" and is not settable (as Keras's with a "
         "LearningRateSchedule): give lr_schedule=\"constant\" to set it");
  if (!controls_.rate_is_constant_at(position_.step))
    fail("the learning rate is warming up (warmup_steps ", o_.warmup_steps, ", step ", position_.step,
         ") and is not settable before the warmup ends");
  rate_before_ = learning_rate(position_.step - 1);
  rate_set_at_ = position_.step;
  o_.optimizer.learning_rate = static_cast<float>(rate);  // recorded with the run's options: a resume keeps it
  controls_.set_base_rate(o_.optimizer.learning_rate);
}

// Keras's warning where its input runs out: the run ends there, saved as a normal end.
void TrainingRun::say_input_ran_out() const {
  if (!speaks_) return;
  std::fprintf(stderr, "warning: your input ran out of data at step %lld, after %lld epochs; training stopped there, saved. "
               "Make sure it can give at least steps_per_epoch * epochs batches (ds.repeat())\n",
               static_cast<long long>(position_.step), static_cast<long long>(position_.epoch));
}

// The run's training time so far: the processes before a resume (metrics.jsonl's last time)
// and this one.
double TrainingRun::run_seconds() const { return metrics_.earlier_seconds() + progress_.elapsed_seconds(); }

std::string TrainingRun::time_text() const {
  const std::string here = duration_text(progress_.elapsed_seconds());
  if (first_step_ == 0) return here;
  if (metrics_.earlier_seconds() < 0) return here + " in this process (metrics.jsonl has no time of the run before it)";
  return duration_text(run_seconds()) + " (" + here + " in this process)";
}

void TrainingRun::print_model() const {
  if (!narrates_) return;
  const ModelConfig& c = params_.config;
  const std::string steps = length_known() ? cat(total_steps_, " steps of ", o_.batch_size)
                                           : cat(o_.epochs, " epochs of a stream's batches of up to ", o_.batch_size);
  std::fprintf(stderr, "model: V=%lld D=%d H=%d T=%d L=%d blend=%s pool=%s, %zu parameters; %s\n",
               static_cast<long long>(c.vocab_size), c.embedding_dim, c.hidden, c.seq_len, c.num_labels,
               to_string(c.blend), to_string(c.pool), params_.size(), steps.c_str());
}

// A run that ends between validations says so: its last steps are in last.safetensors only.
void TrainingRun::note_steps_after_the_last_validation() const {
  if (!valid_ || !narrates_ || batches_ == 0) return;  // a stream's passes validate at each epoch's end
  int64_t last = total_steps_ / batches_ * batches_;
  if (o_.valid_every > 0) last = std::max(last, total_steps_ / o_.valid_every * o_.valid_every);
  if (last == total_steps_) return;
  std::fprintf(stderr, "note: %s; best.safetensors never sees the steps after it (--valid-every N validates every N "
               "steps)\n", last == 0 ? cat("this run of ", total_steps_, " steps never validates").c_str()
                                     : cat("the last ", total_steps_ - last, " of this run's ", total_steps_,
                                           " steps come after its last validation, at step ", last).c_str());
}

void TrainingRun::print_done() const {
  if (!narrates_) return;
  std::fprintf(stderr, "done: %lld steps in %s; checkpoints in %s\n", static_cast<long long>(position_.step),
               time_text().c_str(), saves_.dir().c_str());
  if (const std::string note = engine_->closing_note(); !note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
  if (comm_.size() > 1)
    std::fprintf(stderr, "%s\n",
                 communication_note(comm_, position_.step - first_step_, progress_.elapsed_seconds()).c_str());
}

// Queues the rest of the current epoch's steps (up to the run's last step), logging,
// validating and checkpointing on the way. epoch_done: the epoch's last batch was queued.
int TrainingRun::train_epoch(bool& epoch_done) {
  source_.start_epoch(position_.epoch, position_.batch_in_epoch);
  bool begun = false;
  while (const Batch* batch = source_.next()) {
    // The epoch begins with its first batch: a stream that has run out begins no epoch it
    // cannot end (each on_epoch_begin has its on_epoch_end).
    if (observer_ && !begun) observer_->on_epoch_begin(position_.epoch);
    begun = true;
    if (observer_) observer_->on_train_batch_begin(position_.batch_in_epoch);
    engine_->enqueue_train_step(*batch, learning_rate(position_.step));
    ++position_.step;
    raise_signals_if_asked(position_.step);
    ++position_.batch_in_epoch;
    if (const int code = after_step()) return code;
    if (observer_) observer_->on_train_batch_end(position_.batch_in_epoch - 1, batch_logs());
    if (at_last_step() || controls_.monitor().stop) {
      epoch_done = epoch_is_full();
      return 0;
    }
    if (stop_signal() != 0) return save_on_interrupt(128 + stop_signal());
    int code = 0;
    if (caller_says_stop(code)) {
      if (code) return code;
      epoch_done = epoch_is_full();
      return 0;
    }
  }
  // An interrupt while the host made the next batch: the steps taken are saved, as after a step.
  if (source_.interrupted()) return save_on_interrupt(kInterruptedExit);
  // The source's end: the epoch's, or a stream that ran out within it (Keras ends that epoch too).
  epoch_done = position_.batch_in_epoch > 0;
  return 0;
}

// The observer's poll after a step: true when the run stops there, code its exit code (0 for a
// stop, which the loop ends as a normal end; kInterruptedExit once the step is saved).
bool TrainingRun::caller_says_stop(int& code) {
  if (!observer_) return false;
  switch (observer_->poll()) {
    case TrainingDecision::carry_on: return false;
    case TrainingDecision::stop: stopped_by_caller_ = true; return true;
    case TrainingDecision::interrupt: code = save_on_interrupt(kInterruptedExit); return true;
  }
  return false;
}

// An epoch's end, then the observer's poll: a stop set in on_epoch_end ends the run at this
// epoch's end (saved already), and a Ctrl-C there, even at the run's last epoch, is an interrupt
// (kInterruptedExit, nothing more to save). Returns the exit code of an interrupt, else 0.
int TrainingRun::end_epoch_and_poll() {
  end_epoch();
  int code = 0;
  if (caller_says_stop(code) && code == 0 && run_is_over())
    stopped_by_caller_ = false;  // the run ends here anyway: a normal end
  return code;
}

// What happens at the step just queued: a metrics line, a validation between epochs, a
// checkpoint, and (several ranks) the comparison of the replicas, each at its own interval.
int TrainingRun::after_step() {
  const bool epoch_end = epoch_is_full();
  const bool log_now = position_.step % o_.log_every == 0 || at_last_step();
  const bool valid_now = valid_ && o_.valid_every > 0 && position_.step % o_.valid_every == 0 && !epoch_end;
  const bool checkpoint_now = o_.checkpoint_every > 0 && position_.step % o_.checkpoint_every == 0;
  if (log_now || valid_now || checkpoint_now) {
    if (const int code = collect()) return code;
  } else if (batch_logs_) {
    if (const int code = collect_for_batch_logs()) return code;
  }
  if (log_now) log_interval();
  if (valid_now) validate_between_epochs();
  if (checkpoint_now) save();
  else if (comm_.size() > 1 && position_.step % o_.check_every == 0) {
    engine_->sync_to_host();  // a GPU engine's weights are on the device
    check_replicas(comm_, params_, position_.step);
  }
  return 0;
}

// SIGINT or SIGTERM arrived, or the observer's interrupt: the step taken is saved as a periodic
// checkpoint would save it (a position on an epoch's last batch included: a resume does that
// epoch's end first). Returns code.
int TrainingRun::save_on_interrupt(int code) {
  if (const int halted = collect()) return halted;
  if (saves_.saved_at_step() != position_.step) save();
  progress_.finish();
  if (narrates_)
    std::fprintf(stderr, "interrupted at step %lld: saved, --resume continues\n", static_cast<long long>(position_.step));
  return code;
}

// Waits for the queued steps and adds their loss and accuracy to the interval and the epoch. A
// step that met a non-finite loss or gradient stopped the run there (it and every later step
// left the weights unchanged): report it and stop.
int TrainingRun::collect() {
  const TrainTotals totals = merged(std::exchange(pending_, TrainTotals{}), engine_->collect());
  position_.interval.add(totals);
  position_.epoch_totals.add(totals);
  if (totals.halted == Halt::none) return 0;
  // The halted step's index in this epoch: every collect happens within one epoch.
  const int64_t batch_index = position_.batch_in_epoch - (position_.step - totals.halted_step) - 1;
  if (totals.halted == Halt::loss) return stop_non_finite(totals.halted_value, totals.halted_step, batch_index);
  // Every rank's engine halted alike (the same reduced gradient): rank 0 alone reports it.
  comm_.fail_as(0, cat("non-finite gradient (norm ", totals.halted_value, ") at step ", totals.halted_step,
                       "; weights left unchanged"));
}

// The step just taken, read back for the observer's batch logs into pending_; a halt is
// handled at once, as collect() handles it.
int TrainingRun::collect_for_batch_logs() {
  pending_ = merged(pending_, engine_->collect());
  return pending_.halted == Halt::none ? 0 : collect();
}

// Keras's batch logs: the epoch's running means so far (batch logs on), and the step's rate.
TrainingLogs TrainingRun::batch_logs() const {
  TrainingLogs logs{{"lr", learning_rate(position_.step - 1)}};
  if (!batch_logs_) return logs;
  RunningTotals epoch = position_.epoch_totals;
  epoch.add(pending_);
  logs["loss"] = epoch.mean_loss();
  logs["accuracy"] = epoch.accuracy();
  return logs;
}

// Keras's epoch logs, from the epoch's metrics line.
TrainingLogs TrainingRun::epoch_logs(const nlohmann::json& line) const {
  TrainingLogs logs;
  for (const auto& [key, name] : {std::pair<const char*, const char*>{"loss", "loss"}, {"accuracy", "accuracy"},
                                  {"lr", "lr"}, {"valid_loss", "val_loss"}, {"valid_accuracy", "val_accuracy"},
                                  {"valid_f1", "val_f1"}})
    if (line.contains(key)) logs[name] = line[key].get<double>();
  return logs;
}

// step: the 1-based step that met the loss; batch_index: its batch's 0-based index in the epoch.
int TrainingRun::stop_non_finite(double loss, int64_t step, int64_t batch_index) {
  const std::filesystem::path last = saves_.dir() / "last.safetensors";
  progress_.finish();
  if (!speaks_) return 3;
  char loss_text[32];
  std::snprintf(loss_text, sizeof loss_text, "%g", loss);
  const std::string reason =
      cat("non-finite loss (", loss_text, ") at step ", step, " (epoch ", position_.epoch + 1, ", batch ", batch_index,
          "); training stopped. ", std::filesystem::exists(last) ? "The last good checkpoint is " + last.string()
                                                                 : std::string("No checkpoint had been written yet."));
  // An in-process caller raises it (Model.fit's RuntimeError); enhanced-train prints it.
  if (observer_) observer_->on_failure(reason);
  else std::fprintf(stderr, "error: %s\n", reason.c_str());
  return 3;
}

void TrainingRun::log_interval() {
  const double elapsed = progress_.elapsed_seconds();
  const double steps_done = static_cast<double>(position_.step - first_step_);
  const double rate = steps_done * o_.batch_size / elapsed;
  const RunningTotals& interval = position_.interval;
  metrics_.write({{"kind", "train"}, {"step", position_.step}, {"epoch", position_.epoch + 1},
                  {"loss", interval.mean_loss()}, {"accuracy", interval.accuracy()},
                  {"lr", learning_rate(position_.step - 1)}, {"samples_per_s", rate},
                  {"seconds", metrics_.earlier_seconds() < 0 ? elapsed : run_seconds()}});
  char text[160];
  std::snprintf(text, sizeof text, "%s  loss %.4f  acc %.3f  %.0f samples/s%s", where_text().c_str(),
                interval.mean_loss(), interval.accuracy(), rate,
                length_known() ? (
                    "  ETA " + duration_text(elapsed / steps_done * static_cast<double>(total_steps_ - position_.step)))
                    .c_str() : "");
  progress_.show(text, true);
  position_.interval = RunningTotals{};
}

// "epoch e/E  step s/S" for the progress line; a stream's passes have no step count to reach.
std::string TrainingRun::where_text() const {
  if (!length_known()) return cat("epoch ", position_.epoch + 1, "/", o_.epochs, "  step ", position_.step);
  const int64_t epochs = batches_ > 0 ? (total_steps_ + batches_ - 1) / batches_ : o_.epochs;
  return cat("epoch ", position_.epoch + 1, "/", epochs, "  step ", position_.step, "/", total_steps_);
}

// A metrics.jsonl line of `kind` at the current step: its step, epoch (from 1) and the rate the
// last step took (the keys sort: the line's bytes do not depend on the order they are added).
nlohmann::json TrainingRun::metrics_line(const char* kind) const {
  return {{"kind", kind}, {"step", position_.step}, {"epoch", position_.epoch + 1},
          {"lr", learning_rate(position_.step - 1)}};
}

void TrainingRun::end_epoch() {
  nlohmann::json line = metrics_line("epoch");
  line["loss"] = position_.epoch_totals.mean_loss();
  line["accuracy"] = position_.epoch_totals.accuracy();
  position_.epoch_totals = RunningTotals{};
  ++position_.epoch;
  position_.batch_in_epoch = 0;
  if (valid_) validate(line, observer_);
  metrics_.write(line);
  save();
  if (!observer_) return;
  last_epoch_logs_ = epoch_logs(line);
  observer_->on_epoch_end(position_.epoch - 1, last_epoch_logs_);
}

// Keras's end of an epoch that the caller's stop cut short (model.stop_training set in
// on_train_batch_end): the validation, then on_epoch_end with the part's logs, as Keras's fit
// does before it stops. It comes after the save and is none of the run's validations (neither
// best.safetensors nor early stopping nor the plateau sees it; its metrics line, written after
// the state, is one a resume cuts), so a resume continues to the bits of an uninterrupted run.
void TrainingRun::end_cut_epoch() {
  nlohmann::json line = metrics_line("valid");
  if (valid_) {
    validate_step(*engine_, begin_validation(), comm_, position_.step, line, progress_, observer_);
    metrics_.write(line);
  }
  line["loss"] = position_.epoch_totals.mean_loss();
  line["accuracy"] = position_.epoch_totals.accuracy();
  last_epoch_logs_ = epoch_logs(line);
  observer_->on_epoch_end(position_.epoch, last_epoch_logs_);
}

void TrainingRun::validate_between_epochs() {
  nlohmann::json line = metrics_line("valid");
  validate(line, nullptr);
  metrics_.write(line);
}

// A validation: into the metrics line and the run's history; best.safetensors when the
// monitored metric is the best yet; early stopping and plateau decisions follow from the history.
// observer (nullable): told Keras's on_test_* hooks (an epoch end's validation).
void TrainingRun::validate(nlohmann::json& line, TrainingObserver* observer) {
  position_.validations.push_back(
      validate_step(*engine_, begin_validation(), comm_, position_.step, line, progress_, observer));
  controls_.replay(position_.validations);
  if (controls_.monitor().last_is_best) saves_.save_best(*engine_, params_, position_);
}

// The batches of the next validation: the set from its start, or a stream's next pass.
BatchSource& TrainingRun::begin_validation() {
  valid_->start_epoch(validations_begun_++);
  return *valid_;
}

}  // namespace enhanced
