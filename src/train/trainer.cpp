// The training loop behind enhanced-train: one loop over an Engine (either device), the run's
// state file, metrics, the progress line, validation and checkpoints.
#include "enhanced/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "enhanced/atomic_file.h"
#include "enhanced/checkpoint.h"
#include "enhanced/embedding_table.h"
#include "enhanced/common.h"
#include "enhanced/communicator.h"
#include "enhanced/cpu.h"
#include "enhanced/engine.h"
#include "enhanced/evaluate.h"
#include "enhanced/label_names.h"
#include "enhanced/loader.h"
#include "enhanced/progress.h"
#include "train/run_checks.h"
#include "train/run_files.h"
#include "train/class_weights.h"
#include "train/distributed.h"
#include "train/run_options.h"
#include "train/run_signals.h"
#include "train/run_state.h"
#include "train/schedule.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;



// Sets up the model: from a checkpoint, or from the data (and a pretrained table).
ParameterBuffer<float> build_model(const TrainOptions& o, const Dataset& train, const Dataset* valid) {
  if (!o.init_from.empty()) {
    if (!o.pretrained_path.empty())
      fail("--pretrained and --init-from both give the embedding table: ", o.init_from, " already holds one");
    // A bare checkpoint (no engine metadata) takes --blend, --pool and the data's T.
    const BareModelChoice bare{parse_blend_mode(o.blend), parse_pool_mode(o.pool), train.seq_len()};
    ParameterBuffer<float> params = load_checkpoint(o.init_from, bare);
    check_model_flags(o, params.config, o.init_from);
    check_data_seq_len(train, params.config, o.init_from);
    return params;
  }
  EmbeddingTable table;
  if (!o.pretrained_path.empty()) {
    table = load_embedding_table(o.pretrained_path, raw_table_shape(o, train, valid));
    if (o.embedding_dim && table.dim != o.embedding_dim)
      fail(o.pretrained_path, ": embedding dim is ", table.dim, ", --embedding-dim says ", o.embedding_dim);
    if (o.vocab_size && table.rows != o.vocab_size)
      fail(o.pretrained_path, ": has ", table.rows, " rows, --vocab-size says ", o.vocab_size);
  }
  ModelConfig c;
  c.embedding_dim = table.dim ? table.dim : (o.embedding_dim ? o.embedding_dim : 32);
  const int64_t data_vocab =
      std::max<int64_t>(train.max_model_token_id(), valid ? valid->max_model_token_id() : -1) + 1;
  c.vocab_size = o.vocab_size ? o.vocab_size : (table.rows ? table.rows : data_vocab);
  c.hidden = o.hidden;
  c.seq_len = train.seq_len();
  // L comes from the training set: a validation label outside it is an error (check_fits_model).
  c.num_labels = o.num_labels ? o.num_labels : train.num_labels();
  c.blend = parse_blend_mode(o.blend);
  c.pool = parse_pool_mode(o.pool);
  c.validate();
  check_run_memory(c, o, 0);
  ParameterBuffer<float> params(c);
  initialize_parameters(params, o.seed);
  if (table.rows) std::copy(table.values.begin(), table.values.end(), params.embedding);
  return params;
}

class TrainingRun {
 public:
  TrainingRun(TrainOptions options, ParameterBuffer<float> params, const Dataset& train, const Dataset* valid,
              Communicator& communicator)
      : o_(std::move(options)), params_(std::move(params)), train_(train), valid_(valid),
        optimizer_(o_.optimizer, params_.config), dir_(o_.out_dir), comm_(communicator),
        speaks_(communicator.rank() == 0), progress_(o_.progress && speaks_) {
    schedule_.kind = parse_schedule_kind(o_.lr_schedule);
    schedule_.warmup_steps = o_.warmup_steps;
    schedule_.min_lr = o_.min_lr;
    schedule_.step_size = o_.lr_step_size;
    schedule_.factor = o_.lr_factor;
    schedule_.patience = o_.lr_patience;
    monitor_options_.metric = parse_monitor_metric(o_.monitor);
    monitor_options_.min_delta = o_.min_delta;
    monitor_options_.early_stopping = o_.early_stopping;
    monitor_options_.plateau = schedule_.kind == ScheduleKind::plateau;
    monitor_options_.plateau_patience = o_.lr_patience;
    batches_ = BatchLoader(train_, loader_options()).batches_per_epoch();
    if (batches_ == 0)
      fail(train_.path(), ": no batch to train on (", train_.num_samples(), " samples, batch size ", o_.batch_size,
           o_.drop_last ? ", drop-last on)" : ")");
    if (o_.steps == 0 && o_.epochs > std::numeric_limits<int64_t>::max() / batches_)
      fail("--epochs ", o_.epochs, " is too many: ", batches_, " batches an epoch overflow the step count");
    total_steps_ = o_.steps > 0 ? o_.steps : o_.epochs * batches_;
  }

  // Controls that can only be judged against the run's length: each must have an effect.
  void check_controls_fit_the_run() const {
    if (o_.warmup_steps >= total_steps_ && o_.warmup_steps > 0)
      fail("--warmup-steps ", o_.warmup_steps, " is not shorter than the run (", total_steps_, " steps)");
    const bool validates = valid_ && (o_.valid_every > 0 ? o_.valid_every <= total_steps_ : total_steps_ >= batches_);
    if (!validates && (o_.early_stopping > 0 || schedule_.kind == ScheduleKind::plateau))
      fail(o_.early_stopping > 0 ? "--early-stopping" : "--lr-schedule plateau", " would never see a validation: the run "
           "has ", total_steps_, " steps and validates ", o_.valid_every > 0 ? "every " + std::to_string(o_.valid_every) +
           " steps" : "at epoch ends (" + std::to_string(batches_) + " steps); give --valid-every");
  }
  // The engine holds references to params_ and optimizer_: a run stays where it was made.
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // The engine the steps run on. On a GPU it holds the parameters and moments, and the host
  // copies are refreshed before each checkpoint; its steps are queued without waiting, and their
  // loss and accuracy read back at each logging point, checkpoint and epoch end (collect).
  // Called after resume(): the device starts from the restored optimizer state.
  void use_device(Device device, int threads) {
    // A new run resolves its class weights here; a resumed one has them from its state.
    if (!o_.resume || (o_.class_weight_values.empty() && !o_.class_weights.empty()))
      o_.class_weight_values = class_weights_for(o_.class_weights, train_, params_.config.num_labels);
    EngineOptions options{o_.batch_size, threads, o_.cuda, o_.class_weight_values};
    options.precision = o_.precision;
    options.communicator = &comm_;
    engine_ = make_engine(device, params_, &optimizer_, options);
    o_.cuda.rnn_algorithm = engine_->rnn_algorithm();  // recorded, so a resume keeps the arithmetic
    if (speaks_) std::fprintf(stderr, "engine: %s\n", engine_->summary().c_str());
  }

  // The weights came from the state file when the run was built (run_training); this restores
  // the optimizer state and the run's position from the same file.
  void resume(const SafetensorsReader& state) {
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
           " (step ", position_.step, "), which does not fit ", train_.path(), " (", batches_,
           " batches an epoch at batch size ", o_.batch_size, "): the training data changed since the run started");
    monitor_ = replay(position_.validations, monitor_options_);
    if (speaks_) std::fprintf(stderr, "resuming %s at step %lld (epoch %lld, batch %lld)\n", dir_.c_str(),
                 static_cast<long long>(position_.step), static_cast<long long>(position_.epoch + 1),
                 static_cast<long long>(position_.batch_in_epoch));
  }

  // Whether a resumed run has anything left to do; says so when not.
  bool has_work() const {
    const bool epoch_end_pending = position_.batch_in_epoch == batches_ && position_.step > 0;
    if (!speaks_)
      return !monitor_.stop && (position_.step < total_steps_ || epoch_end_pending);
    if (monitor_.stop)
      std::fprintf(stderr, "nothing to do: early stopping ended the run in %s at step %lld (raise --early-stopping "
                   "to continue it)\n", dir_.c_str(), static_cast<long long>(position_.step));
    else if (position_.step >= total_steps_ && !epoch_end_pending)
      std::fprintf(stderr, "nothing to do: the run in %s has done %lld steps, and its length is %lld steps (give a "
                   "larger --epochs or --steps to train longer)\n", dir_.c_str(),
                   static_cast<long long>(position_.step), static_cast<long long>(total_steps_));
    else
      return true;
    return false;
  }

  // A run killed between the state file and last.safetensors of its final save has nothing left
  // to do, but its last.safetensors may be behind (a step, or the epoch of the same step):
  // rewritten from the state, always, since that is cheap and never wrong.
  void refresh_last_checkpoint() {
    if (speaks_) save_checkpoint((dir_ / "last.safetensors").string(), params_, checkpoint_metadata());
  }

  int run() {
    open_metrics();
    BatchLoader loader(train_, loader_options());
    first_step_ = position_.step;
    print_model();
    note_steps_after_the_last_validation();
    // Several ranks would have to agree on the step to stop at: there a signal ends the job.
    if (comm_.size() == 1) stop_at_a_step_boundary_on_signals();
    progress_.restart();  // rates and times count the training loop only
    // A run saved after its epoch's last step but before the epoch's end finishes that first.
    if (position_.batch_in_epoch == batches_) end_epoch();
    while (position_.step < total_steps_ && !monitor_.stop) {
      bool epoch_done = false;
      if (const int code = train_epoch(loader, epoch_done)) return code;
      if (const int code = collect()) return code;
      if (epoch_done) end_epoch();
    }
    if (saved_at_step_ != position_.step) save();  // an epoch's end may have saved this step already
    progress_.finish();
    if (monitor_.stop) report_early_stop();
    if (!speaks_) return 0;
    std::fprintf(stderr, "done: %lld steps in %s; checkpoints in %s\n", static_cast<long long>(position_.step),
                 time_text().c_str(), dir_.c_str());
    if (const std::string note = engine_->closing_note(); !note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
    if (comm_.size() > 1)
      std::fprintf(stderr, "%s\n", communication_note(comm_, position_.step - first_step_, progress_.elapsed_seconds()).c_str());
    return 0;
  }

 private:
  LoaderOptions loader_options() const { return LoaderOptions{o_.batch_size, o_.shuffle, o_.seed, o_.drop_last, true}; }

  // The run's training time so far: the processes before a resume (metrics.jsonl's last time)
  // and this one.
  double run_seconds() const { return earlier_seconds_ + progress_.elapsed_seconds(); }

  std::string time_text() const {
    const std::string here = duration_text(progress_.elapsed_seconds());
    if (first_step_ == 0) return here;
    if (earlier_seconds_ < 0) return here + " in this process (metrics.jsonl has no time of the run before it)";
    return duration_text(run_seconds()) + " (" + here + " in this process)";
  }

  // A run that ends between validations says so: its last steps are in last.safetensors only.
  void note_steps_after_the_last_validation() const {
    if (!valid_ || !speaks_) return;
    int64_t last = total_steps_ / batches_ * batches_;
    if (o_.valid_every > 0) last = std::max(last, total_steps_ / o_.valid_every * o_.valid_every);
    if (last == total_steps_) return;
    std::fprintf(stderr, "note: %s; best.safetensors never sees the steps after it (--valid-every N validates every N "
                 "steps)\n", last == 0 ? cat("this run of ", total_steps_, " steps never validates").c_str()
                                       : cat("the last ", total_steps_ - last, " of this run's ", total_steps_,
                                             " steps come after its last validation, at step ", last).c_str());
  }

  // metrics.jsonl as the state file left it: lines written after that state (by a run that was
  // then killed) are cut, so the resumed run's lines replace them and the file equals the
  // uninterrupted run's. Lines, not bytes: the times in them make the length vary.
  void open_metrics() {
    if (!speaks_) return;  // rank 0 writes the run's files
    const fs::path path = dir_ / "metrics.jsonl";
    if (o_.resume && fs::exists(path)) {
      // A state written before the count was recorded: keep every line, count them.
      if (position_.metrics_lines < 0) position_.metrics_lines = count_lines(path);
      cut_metrics(path, position_.metrics_lines);
    }
    metrics_lines_ = std::max<int64_t>(position_.metrics_lines, 0);
    if (o_.resume) earlier_seconds_ = fs::exists(path) ? last_seconds(path) : -1;
    metrics_.open(path, o_.resume ? std::ios::app : std::ios::trunc);
    if (!metrics_) fail(path.string(), ": cannot write");
  }

  static int64_t count_lines(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    int64_t lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    return lines;
  }

  // The "seconds" of the file's last line that has them (0: none does).
  static double last_seconds(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::string last;
    for (std::string line; std::getline(in, line);)
      if (line.find("\"seconds\"") != std::string::npos) last = line;
    if (last.empty()) return 0;
    const nlohmann::json j = nlohmann::json::parse(last, nullptr, false);
    return j.is_object() && j.contains("seconds") && j["seconds"].is_number() ? j["seconds"].get<double>() : 0;
  }

  static void cut_metrics(const fs::path& path, int64_t lines) {
    std::ifstream in(path, std::ios::binary);
    int64_t seen = 0;
    uintmax_t keep = 0;
    for (std::string line; seen < lines && std::getline(in, line); ++seen) keep += line.size() + 1;
    in.close();
    std::error_code error;
    if (seen < lines)
      std::fprintf(stderr, "warning: %s has %lld lines, the run's state recorded %lld; appending to it\n",
                   path.c_str(), static_cast<long long>(seen), static_cast<long long>(lines));
    else if (keep < fs::file_size(path, error))
      fs::resize_file(path, keep, error);
    if (error) fail(path.string(), ": cannot cut it back to the run's state (", error.message(), ")");
  }

  void print_model() const {
    if (!speaks_) return;
    const ModelConfig& c = params_.config;
    std::fprintf(stderr, "model: V=%lld D=%d H=%d T=%d L=%d blend=%s pool=%s, %zu parameters; %lld steps of %d\n",
                 static_cast<long long>(c.vocab_size), c.embedding_dim, c.hidden, c.seq_len, c.num_labels,
                 to_string(c.blend), to_string(c.pool), params_.size(), static_cast<long long>(total_steps_),
                 o_.batch_size);
  }

  // The learning rate of the step with 0-based index `step`: a function of the step and of the
  // validations recorded before it (plateau), nothing else, so a resume recomputes it exactly.
  // Every rate asked for is that of the next step or of the last one taken, and validations come
  // after a step's metrics line: the validations so far (monitor_) are those before it.
  float learning_rate(int64_t step) const {
    return static_cast<float>(
        learning_rate_at(schedule_, o_.optimizer.learning_rate, step, total_steps_, monitor_.plateau_reductions));
  }

  // Queues the rest of the current epoch's steps (up to the run's last step), logging,
  // validating and checkpointing on the way. epoch_done: the epoch's last batch was queued.
  int train_epoch(BatchLoader& loader, bool& epoch_done) {
    loader.start_epoch(position_.epoch, position_.batch_in_epoch);
    epoch_done = true;
    while (const Batch* batch = loader.next()) {
      engine_->enqueue_train_step(*batch, learning_rate(position_.step));
      ++position_.step;
      raise_signals_if_asked(position_.step);
      ++position_.batch_in_epoch;
      const bool epoch_end = position_.batch_in_epoch == batches_;
      const bool log_now = position_.step % o_.log_every == 0 || position_.step == total_steps_;
      const bool valid_now = valid_ && o_.valid_every > 0 && position_.step % o_.valid_every == 0 && !epoch_end;
      const bool checkpoint_now = o_.checkpoint_every > 0 && position_.step % o_.checkpoint_every == 0;
      if (log_now || valid_now || checkpoint_now)
        if (const int code = collect()) return code;
      if (log_now) log_interval();
      if (valid_now) validate_between_epochs();
      if (checkpoint_now) save();
      else if (comm_.size() > 1 && position_.step % o_.check_every == 0) {
        engine_->sync_to_host();  // a GPU engine's weights are on the device
        check_replicas(comm_, params_, position_.step);
      }
      if (position_.step == total_steps_ || monitor_.stop) {
        epoch_done = epoch_end;
        break;
      }
      if (stop_signal() != 0) return save_on_signal();
    }
    return 0;
  }

  // SIGINT or SIGTERM arrived: the step taken is saved as a periodic checkpoint would save it (a
  // position on an epoch's last batch included: a resume does that epoch's end first).
  int save_on_signal() {
    if (const int code = collect()) return code;
    if (saved_at_step_ != position_.step) save();
    progress_.finish();
    std::fprintf(stderr, "interrupted at step %lld: saved, --resume continues\n",
                 static_cast<long long>(position_.step));
    return 128 + stop_signal();
  }

  // Waits for the queued steps and adds their loss and accuracy to the interval and the epoch. A
  // step that met a non-finite loss or gradient stopped the run there (it and every later step
  // left the weights unchanged): report it and stop.
  int collect() {
    const TrainTotals totals = engine_->collect();
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

  void write_metrics(const nlohmann::json& line) {
    ++metrics_lines_;  // counted on every rank: the state file records it
    if (!speaks_) return;
    metrics_ << line.dump() << '\n' << std::flush;
    if (!metrics_) fail((dir_ / "metrics.jsonl").string(), ": cannot write (disk full?)");
  }

  void log_interval() {
    const double elapsed = progress_.elapsed_seconds();
    const double steps_done = static_cast<double>(position_.step - first_step_);
    const double rate = steps_done * o_.batch_size / elapsed;
    const double eta = elapsed / steps_done * static_cast<double>(total_steps_ - position_.step);
    const RunningTotals& interval = position_.interval;
    write_metrics({{"kind", "train"}, {"step", position_.step}, {"epoch", position_.epoch + 1},
                   {"loss", interval.mean_loss()}, {"accuracy", interval.accuracy()},
                   {"lr", learning_rate(position_.step - 1)}, {"samples_per_s", rate},
                   {"seconds", earlier_seconds_ < 0 ? elapsed : run_seconds()}});
    char text[160];
    std::snprintf(text, sizeof text, "epoch %lld/%lld  step %lld/%lld  loss %.4f  acc %.3f  %.0f samples/s  ETA %s",
                  static_cast<long long>(position_.epoch + 1),
                  static_cast<long long>((total_steps_ + batches_ - 1) / batches_),
                  static_cast<long long>(position_.step), static_cast<long long>(total_steps_), interval.mean_loss(),
                  interval.accuracy(), rate, duration_text(eta).c_str());
    progress_.show(text, true);
    position_.interval = RunningTotals{};
  }

  void end_epoch() {
    nlohmann::json line{{"kind", "epoch"}, {"step", position_.step}, {"epoch", position_.epoch + 1},
                        {"loss", position_.epoch_totals.mean_loss()}, {"accuracy", position_.epoch_totals.accuracy()},
                        {"lr", learning_rate(position_.step - 1)}};
    position_.epoch_totals = RunningTotals{};
    ++position_.epoch;
    position_.batch_in_epoch = 0;
    if (valid_) validate(line);
    write_metrics(line);
    save();
  }

  void validate_between_epochs() {
    nlohmann::json line{{"kind", "valid"}, {"step", position_.step}, {"epoch", position_.epoch + 1},
                        {"lr", learning_rate(position_.step - 1)}};
    validate(line);
    write_metrics(line);
  }

  // A validation: into the metrics line and the run's history; best.safetensors when the
  // monitored metric is the best yet; early stopping and plateau decisions follow from the history.
  void validate(nlohmann::json& line) {
    const EvalResult result = evaluate(*engine_, *valid_, o_.batch_size, false, &comm_);
    const Validation v{position_.step, result.loss, result.accuracy(), result.macro_f1()};
    line["valid_loss"] = v.loss;
    line["valid_accuracy"] = v.accuracy;
    line["valid_f1"] = v.f1;
    char text[128];
    std::snprintf(text, sizeof text, "step %lld: valid loss %.4f  acc %.3f  f1 %.3f",
                  static_cast<long long>(position_.step), v.loss, v.accuracy, v.f1);
    progress_.note(text);
    position_.validations.push_back(v);
    monitor_ = replay(position_.validations, monitor_options_);
    if (monitor_.last_is_best && speaks_) {
      engine_->sync_to_host();
      save_checkpoint((dir_ / "best.safetensors").string(), params_, checkpoint_metadata());
      exit_if_asked();
    }
  }

  void report_early_stop() const {
    if (!speaks_) return;
    const double best = monitor_options_.metric == MonitorMetric::valid_loss ? monitor_.best : -monitor_.best;
    std::fprintf(stderr, "early stopping: %s did not improve by more than %g in %lld validations; best %g at step %lld "
                 "(best.safetensors)\n", o_.monitor.c_str(), o_.min_delta, static_cast<long long>(monitor_.wait), best,
                 static_cast<long long>(monitor_.best_step));
  }

  std::map<std::string, std::string> checkpoint_metadata() const {
    return with_label_names({{"step", std::to_string(position_.step)}, {"epoch", std::to_string(position_.epoch)}},
                            o_.label_names);
  }

  // optimizer.safetensors first: a crash between the two writes leaves a mismatch that resume
  // detects by step, never a silently inconsistent pair.
  void save() {
    engine_->sync_to_host();
    check_replicas(comm_, params_, position_.step);
    // Never replace a good checkpoint with a diverged one.
    // (The ranks' weights agree, checked just above: rank 0 alone reports.)
    for (const float value : params_.data)
      if (!std::isfinite(value))
        comm_.fail_as(0, cat("weights became non-finite by step ", position_.step, "; training stopped without saving. "
                             "The last good checkpoint is ", (dir_ / "last.safetensors").string()));
    position_.metrics_lines = metrics_lines_;
    saved_at_step_ = position_.step;
    if (!speaks_) return;
    write_run_state((dir_ / "optimizer.safetensors").string(), params_, optimizer_, o_, position_);
    exit_if_asked();
    save_checkpoint((dir_ / "last.safetensors").string(), params_, checkpoint_metadata());
    exit_if_asked();
  }

  // Fault injection for the tests: ENHANCED_TEST_EXIT_AFTER_WRITE=N ends the process abruptly
  // (as kill -9 would, no clean-up) right after its N-th file write (state, last or best), so a
  // test can stop a run at every point a kill could hit between two writes.
  void exit_if_asked() {
    static const char* const after = std::getenv("ENHANCED_TEST_EXIT_AFTER_WRITE");
    if (after && ++writes_ == std::atoll(after)) std::_Exit(137);
  }

  // step: the 1-based step that met the loss; batch_index: its batch's 0-based index in the epoch.
  int stop_non_finite(double loss, int64_t step, int64_t batch_index) {
    const fs::path last = dir_ / "last.safetensors";
    progress_.finish();
    if (!speaks_) return 3;
    std::fprintf(stderr, "error: non-finite loss (%g) at step %lld (epoch %lld, batch %lld); training stopped. %s\n",
                 loss, static_cast<long long>(step), static_cast<long long>(position_.epoch + 1),
                 static_cast<long long>(batch_index),
                 fs::exists(last) ? ("The last good checkpoint is " + last.string()).c_str()
                                  : "No checkpoint had been written yet.");
    return 3;
  }

  TrainOptions o_;
  ParameterBuffer<float> params_;
  const Dataset& train_;
  const Dataset* valid_;
  OptimizerState optimizer_;
  fs::path dir_;
  Communicator& comm_;
  bool speaks_;  // rank 0: writes the files, the progress line and the notes
  RunPosition position_;
  ScheduleOptions schedule_;
  MonitorOptions monitor_options_;
  MonitorState monitor_;
  ProgressLine progress_;
  std::ofstream metrics_;
  std::unique_ptr<Engine> engine_;
  int64_t batches_ = 0, total_steps_ = 0, first_step_ = 0;
  int64_t metrics_lines_ = 0;  // lines in metrics.jsonl
  int64_t writes_ = 0;         // files written by this process
  int64_t saved_at_step_ = -1; // the step of the last save
  double earlier_seconds_ = 0;  // training time before this process (-1: not known)
};



}  // namespace

int run_training(TrainOptions options) {
  Communicator alone;
  return run_training(std::move(options), alone);
}

int run_training(TrainOptions options, Communicator& communicator) {
  const bool rank0 = communicator.rank() == 0;
  if (options.out_dir.empty()) fail("--out is required");
  if (options.resume && !fs::is_directory(options.out_dir)) fail(no_run_to_resume(options.out_dir));
  // Rank 0 alone touches --out, and locks it before it reads the state or removes anything. A
  // new run locks (and so creates) it only once the ranks agree: a job that MPI aborts at the
  // check leaves no directory behind.
  std::optional<OutputDirectory> out;
  if (rank0 && options.resume) out.emplace(options.out_dir);
  std::unique_ptr<SafetensorsReader> saved_state;  // optimizer.safetensors of the run resumed
  const TrainOptions given = options;              // the command line, before the recorded options
  if (options.resume) {
    const fs::path state = fs::path(options.out_dir) / "optimizer.safetensors";
    if (!fs::exists(state)) fail(no_run_to_resume(options.out_dir));
    if (options.overwrite) fail("--resume and --overwrite contradict each other: continue the run in ", options.out_dir,
                                ", or replace it");
    saved_state = std::make_unique<SafetensorsReader>(state.string());
    options = resumed_options(options, recorded_options(*saved_state), saved_state->path());
  }
  if (options.epochs == 0) options.epochs = 1;
  if (options.batch_size <= 0) fail("--batch-size must be positive, got ", options.batch_size);
  if (options.log_every <= 0) fail("--log-every must be positive, got ", options.log_every);
  check_training_controls(options);
  if (options.check_every <= 0) fail("--check-every must be positive, got ", options.check_every);
  check_same_run(communicator, options, saved_state.get());  // the first collective: the options size later ones
  if (rank0 && !out) out.emplace(options.out_dir);
  const int threads = configure_cpu_threads(threads_for_rank(options.threads, communicator));

  const Dataset train = Dataset::open(options.data_path);
  check_has_labels(train, "--data (training)");
  Dataset valid;
  if (!options.valid_path.empty()) {
    valid = Dataset::open(options.valid_path);
    check_has_labels(valid, "--valid (validation)");
    if (valid.seq_len() != train.seq_len())
      fail(options.valid_path, ": T = ", valid.seq_len(), " but ", options.data_path, " has T = ", train.seq_len());
  }
  const Dataset* valid_ptr = options.valid_path.empty() ? nullptr : &valid;
  check_same_files(communicator, options.valid_path.empty() ? std::vector<std::string>{options.data_path}
                                                            : std::vector<std::string>{options.data_path, options.valid_path});
  check_run_datasets(options, train, valid_ptr);
  ParameterBuffer<float> params = options.resume ? read_model(*saved_state, "model.") : build_model(options, train, valid_ptr);
  if (options.resume || !options.init_from.empty()) check_run_memory(params.config, options, params.size() * sizeof(float));
  if (options.resume) check_model_flags(given, params.config, "the run being resumed (" + saved_state->path() + ")");
  check_run_label_names(options, params.config);
  check_data_seq_len(train, params.config, options.resume ? saved_state->path() : options.init_from);
  train.check_fits_model(params.config.vocab_size, params.config.num_labels);
  if (valid_ptr) valid.check_fits_model(params.config.vocab_size, params.config.num_labels);

  TrainingRun run(options, std::move(params), train, valid_ptr, communicator);
  if (options.resume) {
    run.resume(*saved_state);
    saved_state.reset();  // its moments now live in the optimizer state: do not hold two copies
    if (!run.has_work()) {
      run.refresh_last_checkpoint();
      return 0;
    }
  }
  run.check_controls_fit_the_run();
  if (!rank0) {
    run.use_device(options.device, threads);
    return run.run();
  }
  prepare_run_files(options);
  remove_stale_temp_files(options.out_dir);  // left by a run killed with SIGKILL
  run.use_device(options.device, threads);
  const int code = run.run();
  if (code == 0 || fs::exists(fs::path(options.out_dir) / "optimizer.safetensors")) out->keep();
  return code;
}

}  // namespace enhanced
