// The training loop behind enhanced-train: one loop over an Engine (either device), the run's
// state file, metrics, the progress line, validation and checkpoints.
#include "enhanced/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "enhanced/atomic_file.h"
#include "enhanced/checkpoint.h"
#include "enhanced/embedding_table.h"
#include "enhanced/common.h"
#include "enhanced/device.h"
#include "enhanced/engine.h"
#include "enhanced/evaluate.h"
#include "enhanced/loader.h"
#include "enhanced/progress.h"
#include "train/run_options.h"
#include "train/run_state.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;

void check_writable_dir(const fs::path& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) fail(dir.string(), ": cannot create the output directory (", error.message(), ")");
  const fs::path probe = dir / (".write-test." + std::to_string(::getpid()));
  std::ofstream out(probe);
  if (!out) fail(dir.string(), ": output directory is not writable");
  out.close();
  fs::remove(probe, error);
}

// Sets up the model: from a checkpoint, or from the data (and a pretrained table).
ParameterBuffer<float> build_model(const TrainOptions& o, const Dataset& train, const Dataset* valid) {
  if (!o.init_from.empty()) {
    ParameterBuffer<float> params = load_checkpoint(o.init_from);
    if (params.config.seq_len != train.seq_len())
      fail(o.init_from, ": checkpoint has T = ", params.config.seq_len, ", ", train.path(), " has T = ", train.seq_len());
    return params;
  }
  EmbeddingTable table;
  if (!o.pretrained_path.empty()) {
    table = load_embedding_table(o.pretrained_path, o.embedding_dim ? o.embedding_dim : 32);
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
  c.num_labels = o.num_labels ? o.num_labels : std::max(train.num_labels(), valid ? valid->num_labels() : 0);
  c.blend = parse_blend_mode(o.blend);
  c.pool = parse_pool_mode(o.pool);
  c.validate();
  ParameterBuffer<float> params(c);
  initialize_parameters(params, o.seed);
  if (table.rows) std::copy(table.values.begin(), table.values.end(), params.embedding);
  return params;
}

// Running totals of loss, accuracy and samples (an interval's or an epoch's).
struct Totals {
  double loss = 0;
  int64_t correct = 0, samples = 0;

  void add(const TrainTotals& t) {
    loss += t.loss_sum;
    correct += t.correct;
    samples += t.samples;
  }
  double mean_loss() const { return loss / static_cast<double>(std::max<int64_t>(samples, 1)); }
  double accuracy() const { return static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(samples, 1)); }
};

class TrainingRun {
 public:
  TrainingRun(TrainOptions options, ParameterBuffer<float> params, const Dataset& train, const Dataset* valid)
      : o_(std::move(options)), params_(std::move(params)), train_(train), valid_(valid),
        optimizer_(o_.optimizer, params_.config), dir_(o_.out_dir), progress_(o_.progress) {}
  // The engine holds references to params_ and optimizer_: a run stays where it was made.
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // The engine the steps run on. On a GPU it holds the parameters and moments, and the host
  // copies are refreshed before each checkpoint; its steps are queued without waiting, and their
  // loss and accuracy read back at each logging point, checkpoint and epoch end (collect).
  // Called after resume(): the device starts from the restored optimizer state.
  void use_device(Device device, int threads) {
    engine_ = make_engine(device, params_, &optimizer_, EngineOptions{o_.batch_size, threads, o_.cuda});
    o_.cuda.rnn_algorithm = engine_->rnn_algorithm();  // recorded, so a resume keeps the arithmetic
    std::fprintf(stderr, "engine: %s\n", engine_->summary().c_str());
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
    std::fprintf(stderr, "resuming %s at step %lld (epoch %lld, batch %lld)\n", dir_.c_str(),
                 static_cast<long long>(position_.step), static_cast<long long>(position_.epoch + 1),
                 static_cast<long long>(position_.batch_in_epoch));
  }

  int run(bool append_metrics) {
    metrics_.open(dir_ / "metrics.jsonl", append_metrics ? std::ios::app : std::ios::trunc);
    if (!metrics_) fail((dir_ / "metrics.jsonl").string(), ": cannot write");
    BatchLoader loader(train_, LoaderOptions{o_.batch_size, o_.shuffle, o_.seed, o_.drop_last, true});
    batches_ = loader.batches_per_epoch();
    if (batches_ == 0)
      fail(train_.path(), ": no batch to train on (", train_.num_samples(), " samples, batch size ", o_.batch_size,
           o_.drop_last ? ", drop-last on)" : ")");
    total_steps_ = o_.steps > 0 ? o_.steps : o_.epochs * batches_;
    first_step_ = position_.step;
    print_model();
    progress_.restart();  // rates and times count the training loop only
    while (position_.step < total_steps_) {
      bool epoch_done = false;
      if (const int code = train_epoch(loader, epoch_done)) return code;
      if (const int code = collect()) return code;
      if (epoch_done) end_epoch();
    }
    save();
    progress_.finish();
    std::fprintf(stderr, "done: %lld steps in %s; checkpoints in %s\n", static_cast<long long>(position_.step),
                 duration_text(progress_.elapsed_seconds()).c_str(), dir_.c_str());
    if (const std::string note = engine_->closing_note(); !note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
    return 0;
  }

 private:
  void print_model() const {
    const ModelConfig& c = params_.config;
    std::fprintf(stderr, "model: V=%lld D=%d H=%d T=%d L=%d blend=%s pool=%s, %zu parameters; %lld steps of %d\n",
                 static_cast<long long>(c.vocab_size), c.embedding_dim, c.hidden, c.seq_len, c.num_labels,
                 to_string(c.blend), to_string(c.pool), params_.size(), static_cast<long long>(total_steps_),
                 o_.batch_size);
  }

  // Queues the rest of the current epoch's steps (up to the run's last step), logging and
  // checkpointing on the way. epoch_done: the epoch's last batch was queued.
  int train_epoch(BatchLoader& loader, bool& epoch_done) {
    loader.start_epoch(position_.epoch, position_.batch_in_epoch);
    epoch_done = true;
    while (const Batch* batch = loader.next()) {
      engine_->enqueue_train_step(*batch);
      ++position_.step;
      ++position_.batch_in_epoch;
      const bool log_now = position_.step % o_.log_every == 0 || position_.step == total_steps_;
      const bool checkpoint_now = o_.checkpoint_every > 0 && position_.step % o_.checkpoint_every == 0;
      if (log_now || checkpoint_now)
        if (const int code = collect()) return code;
      if (log_now) log_interval();
      if (checkpoint_now) save();
      if (position_.step == total_steps_) {
        epoch_done = position_.batch_in_epoch == batches_;
        break;
      }
    }
    return 0;
  }

  // Waits for the queued steps and adds their loss and accuracy to the interval and the epoch. A
  // step that met a non-finite loss or gradient stopped the run there (it and every later step
  // left the weights unchanged): report it and stop.
  int collect() {
    const TrainTotals totals = engine_->collect();
    interval_.add(totals);
    epoch_.add(totals);
    if (totals.halted == Halt::none) return 0;
    // The halted step's index in this epoch: every collect happens within one epoch.
    const int64_t batch_index = position_.batch_in_epoch - (position_.step - totals.halted_step) - 1;
    if (totals.halted == Halt::loss) return stop_non_finite(totals.halted_value, totals.halted_step, batch_index);
    fail("non-finite gradient (norm ", totals.halted_value, ") at step ", totals.halted_step,
         "; weights left unchanged");
  }

  void log_interval() {
    const double elapsed = progress_.elapsed_seconds();
    const double steps_done = static_cast<double>(position_.step - first_step_);
    const double rate = steps_done * o_.batch_size / elapsed;
    const double eta = elapsed / steps_done * static_cast<double>(total_steps_ - position_.step);
    metrics_ << nlohmann::json{{"kind", "train"}, {"step", position_.step}, {"epoch", position_.epoch + 1},
                               {"loss", interval_.mean_loss()}, {"accuracy", interval_.accuracy()},
                               {"lr", o_.optimizer.learning_rate}, {"samples_per_s", rate}, {"seconds", elapsed}}
                    .dump()
             << '\n' << std::flush;
    char text[160];
    std::snprintf(text, sizeof text, "epoch %lld/%lld  step %lld/%lld  loss %.4f  acc %.3f  %.0f samples/s  ETA %s",
                  static_cast<long long>(position_.epoch + 1),
                  static_cast<long long>((total_steps_ + batches_ - 1) / batches_),
                  static_cast<long long>(position_.step), static_cast<long long>(total_steps_), interval_.mean_loss(),
                  interval_.accuracy(), rate, duration_text(eta).c_str());
    progress_.show(text, true);
    interval_ = Totals{};
  }

  void end_epoch() {
    nlohmann::json line{{"kind", "epoch"}, {"step", position_.step}, {"epoch", position_.epoch + 1},
                        {"loss", epoch_.mean_loss()}, {"accuracy", epoch_.accuracy()},
                        {"lr", o_.optimizer.learning_rate}};
    epoch_ = Totals{};
    ++position_.epoch;
    position_.batch_in_epoch = 0;
    if (valid_) validate(line);
    metrics_ << line.dump() << '\n' << std::flush;
    save();
  }

  // Validation at an epoch's end: into the epoch's metrics line, and best.safetensors when the
  // loss is the lowest yet.
  void validate(nlohmann::json& line) {
    const EvalResult result = evaluate(*engine_, *valid_, o_.batch_size, false);
    line["valid_loss"] = result.loss;
    line["valid_accuracy"] = result.accuracy();
    char text[96];
    std::snprintf(text, sizeof text, "epoch %lld: valid loss %.4f  acc %.3f", static_cast<long long>(position_.epoch),
                  result.loss, result.accuracy());
    progress_.note(text);
    if (result.loss < position_.best_valid_loss) {
      position_.best_valid_loss = result.loss;
      engine_->sync_to_host();
      save_checkpoint((dir_ / "best.safetensors").string(), params_, checkpoint_metadata());
    }
  }

  std::map<std::string, std::string> checkpoint_metadata() const {
    return {{"step", std::to_string(position_.step)}, {"epoch", std::to_string(position_.epoch)}};
  }

  // optimizer.safetensors first: a crash between the two writes leaves a mismatch that resume
  // detects by step, never a silently inconsistent pair.
  void save() {
    engine_->sync_to_host();
    // Never replace a good checkpoint with a diverged one.
    for (const float value : params_.data)
      if (!std::isfinite(value))
        fail("weights became non-finite by step ", position_.step, "; training stopped without saving. The last good "
             "checkpoint is ", (dir_ / "last.safetensors").string());
    write_run_state((dir_ / "optimizer.safetensors").string(), params_, optimizer_, o_, position_);
    save_checkpoint((dir_ / "last.safetensors").string(), params_, checkpoint_metadata());
  }

  // step: the 1-based step that met the loss; batch_index: its batch's 0-based index in the epoch.
  int stop_non_finite(double loss, int64_t step, int64_t batch_index) {
    const fs::path last = dir_ / "last.safetensors";
    progress_.finish();
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
  RunPosition position_;
  ProgressLine progress_;
  std::ofstream metrics_;
  std::unique_ptr<Engine> engine_;
  int64_t batches_ = 0, total_steps_ = 0, first_step_ = 0;
  Totals interval_, epoch_;
};

}  // namespace

int run_training(TrainOptions options) {
  if (options.out_dir.empty()) fail("--out is required");
  std::unique_ptr<SafetensorsReader> saved_state;  // optimizer.safetensors of the run resumed
  if (options.resume) {
    saved_state = std::make_unique<SafetensorsReader>((fs::path(options.out_dir) / "optimizer.safetensors").string());
    options = resumed_options(options, recorded_options(*saved_state), saved_state->path());
  }
  if (options.epochs == 0) options.epochs = 1;
  if (options.batch_size <= 0) fail("--batch-size must be positive, got ", options.batch_size);
  if (options.log_every <= 0) fail("--log-every must be positive, got ", options.log_every);
  const int threads = configure_cpu_threads(options.threads);
  const Device device = resolve_device(options.device);
  check_writable_dir(options.out_dir);
  remove_stale_temp_files(options.out_dir);  // left by a run killed with SIGKILL

  const Dataset train = Dataset::open(options.data_path);
  Dataset valid;
  if (!options.valid_path.empty()) {
    valid = Dataset::open(options.valid_path);
    if (valid.seq_len() != train.seq_len())
      fail(options.valid_path, ": T = ", valid.seq_len(), " but ", options.data_path, " has T = ", train.seq_len());
  }
  const Dataset* valid_ptr = options.valid_path.empty() ? nullptr : &valid;
  ParameterBuffer<float> params = options.resume ? read_model(*saved_state, "model.") : build_model(options, train, valid_ptr);
  train.check_fits_model(params.config.vocab_size, params.config.num_labels);
  if (valid_ptr) valid.check_fits_model(params.config.vocab_size, params.config.num_labels);

  TrainingRun run(options, std::move(params), train, valid_ptr);
  if (options.resume) {
    run.resume(*saved_state);
    saved_state.reset();  // its moments now live in the optimizer state: do not hold two copies
  }
  run.use_device(device, threads);
  return run.run(options.resume);
}

}  // namespace enhanced
