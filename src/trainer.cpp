#include "enhanced/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "enhanced/backend.h"
#include "enhanced/checkpoint.h"
#include "enhanced/common.h"
#include "enhanced/device.h"
#include "enhanced/evaluate.h"
#include "enhanced/loader.h"
#include "enhanced/network.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Where the run stands; saved with every checkpoint so --resume continues bit for bit.
struct RunState {
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  int64_t step = 0;
  double best_valid_loss = std::numeric_limits<double>::infinity();
};

std::string exact_text(double value) {  // hexadecimal float: round-trips exactly
  char text[64];
  std::snprintf(text, sizeof text, "%a", value);
  return text;
}

nlohmann::json options_json(const TrainOptions& o) {
  return {{"data", o.data_path}, {"valid", o.valid_path}, {"pretrained", o.pretrained_path},
          {"init_from", o.init_from}, {"epochs", o.epochs}, {"steps", o.steps}, {"batch_size", o.batch_size},
          {"hidden", o.hidden}, {"embedding_dim", o.embedding_dim}, {"vocab_size", o.vocab_size},
          {"num_labels", o.num_labels}, {"blend", o.blend}, {"pool", o.pool},
          {"optimizer", to_string(o.optimizer.kind)}, {"lr", exact_text(o.optimizer.learning_rate)},
          {"momentum", exact_text(o.optimizer.momentum)}, {"beta1", exact_text(o.optimizer.beta1)},
          {"beta2", exact_text(o.optimizer.beta2)}, {"epsilon", exact_text(o.optimizer.epsilon)},
          {"lazy_embedding", o.optimizer.lazy_embedding}, {"clip_norm", exact_text(o.optimizer.clip_norm)},
          {"seed", o.seed}, {"shuffle", o.shuffle}, {"drop_last", o.drop_last}, {"threads", o.threads},
          {"log_every", o.log_every}, {"checkpoint_every", o.checkpoint_every},
          {"tf32", o.cuda.tf32}, {"rnn_algorithm", to_string(o.cuda.rnn_algorithm)}};
}

float exact_float(const nlohmann::json& j, const char* key) {
  return static_cast<float>(std::strtod(j.at(key).get<std::string>().c_str(), nullptr));
}

// The saved run's options; the caller's epochs/steps, when given, extend it.
TrainOptions resumed_options(const TrainOptions& caller, const SafetensorsReader& state_file) {
  TrainOptions o = caller;
  try {
    const nlohmann::json j = nlohmann::json::parse(state_file.metadata_value("run_options"));
    o.data_path = j.at("data");
    o.valid_path = j.at("valid");
    o.pretrained_path = j.at("pretrained");  // recorded only: the model comes from last.safetensors
    o.init_from = j.at("init_from");
    if (caller.epochs == 0 && caller.steps == 0) {  // else the caller sets a new length
      o.epochs = j.at("epochs").get<int64_t>();
      o.steps = j.at("steps").get<int64_t>();
    }
    o.batch_size = j.at("batch_size");
    o.hidden = j.at("hidden");
    o.embedding_dim = j.at("embedding_dim");
    o.vocab_size = j.at("vocab_size");
    o.num_labels = j.at("num_labels");
    o.blend = j.at("blend");
    o.pool = j.at("pool");
    o.optimizer.kind = parse_optimizer_kind(j.at("optimizer"));
    o.optimizer.learning_rate = exact_float(j, "lr");
    o.optimizer.momentum = exact_float(j, "momentum");
    o.optimizer.beta1 = exact_float(j, "beta1");
    o.optimizer.beta2 = exact_float(j, "beta2");
    o.optimizer.epsilon = exact_float(j, "epsilon");
    o.optimizer.lazy_embedding = j.at("lazy_embedding");
    o.optimizer.clip_norm = exact_float(j, "clip_norm");
    o.seed = j.at("seed");
    o.shuffle = j.at("shuffle");
    o.drop_last = j.at("drop_last");
    o.threads = caller.threads ? caller.threads : j.at("threads").get<int>();
    o.log_every = j.at("log_every");
    o.checkpoint_every = j.at("checkpoint_every");
    // A GPU run continues with the arithmetic it started with (runs before these were recorded
    // have neither: the caller's flags stand).
    o.cuda.tf32 = caller.cuda.tf32 || j.value("tf32", false);
    if (caller.cuda.rnn_algorithm == RnnAlgorithm::automatic)
      o.cuda.rnn_algorithm = parse_rnn_algorithm(j.value("rnn_algorithm", std::string("auto")));
  } catch (const nlohmann::json::exception& e) {
    fail(state_file.path(), ": run_options metadata is malformed (", e.what(), ")");
  }
  return o;
}

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<long long>(seconds + 0.5);
  char text[32];
  if (total >= 3600) std::snprintf(text, sizeof text, "%lldh%02lldm", total / 3600, total / 60 % 60);
  else if (total >= 60) std::snprintf(text, sizeof text, "%lldm%02llds", total / 60, total % 60);
  else std::snprintf(text, sizeof text, "%llds", total);
  return text;
}

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

class TrainingRun {
 public:
  TrainingRun(TrainOptions options, ParameterBuffer<float> params, const Dataset& train, const Dataset* valid)
      : o_(std::move(options)), params_(std::move(params)), train_(train), valid_(valid),
        optimizer_(o_.optimizer, params_.config), dir_(o_.out_dir) {}
  // The backend holds references to params_ and optimizer_: a run stays where it was made.
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // The device the steps run on (backend.h). On a GPU it holds the parameters and moments, the
  // host copies are refreshed before each checkpoint; its steps are queued without waiting, and
  // their loss and accuracy read back at each logging point, checkpoint and epoch end (collect).
  // Called after resume(): the device starts from the restored optimizer state.
  void use_device(Device device, int threads) {
    backend_ = make_training_backend(device, params_, optimizer_, o_.batch_size, threads, o_.cuda);
  }

  // Everything a resumed run needs is in the one state file (the weights included), written
  // atomically: no crash can leave it half of one step and half of another.
  // The weights came from the same file when the run was built (run_training); this restores the
  // rest.
  void resume(const SafetensorsReader& state) {
    optimizer_.load_state(state);
    state_.epoch = metadata_integer(state, "epoch");
    state_.batch_in_epoch = metadata_integer(state, "batch_in_epoch");
    state_.step = metadata_integer(state, "step");
    // Steps are counted twice, by the run and by the optimizer (the halt report and Adam's bias
    // correction use the latter): a file where they disagree was not written by this trainer.
    if (optimizer_.steps() != state_.step)
      fail(state.path(), ": the optimizer has taken ", optimizer_.steps(), " steps but the run says ", state_.step);
    const std::string best = state.metadata_value("best_valid_loss");
    char* end = nullptr;
    state_.best_valid_loss = std::strtod(best.c_str(), &end);
    if (best.empty() || *end != '\0') fail(state.path(), ": metadata 'best_valid_loss' is not a number: '", best, "'");
    std::fprintf(stderr, "resuming %s at step %lld (epoch %lld, batch %lld)\n", dir_.c_str(),
                 static_cast<long long>(state_.step), static_cast<long long>(state_.epoch + 1),
                 static_cast<long long>(state_.batch_in_epoch));
  }

  int run(bool append_metrics) {
    const ModelConfig& c = params_.config;
    metrics_.open(dir_ / "metrics.jsonl", append_metrics ? std::ios::app : std::ios::trunc);
    if (!metrics_) fail((dir_ / "metrics.jsonl").string(), ": cannot write");
    LoaderOptions loader_options{o_.batch_size, o_.shuffle, o_.seed, o_.drop_last, true};
    BatchLoader loader(train_, loader_options);
    const int64_t batches = loader.batches_per_epoch();
    if (batches == 0)
      fail(train_.path(), ": no batch to train on (", train_.num_samples(), " samples, batch size ", o_.batch_size,
           o_.drop_last ? ", drop-last on)" : ")");
    const int64_t total_steps = o_.steps > 0 ? o_.steps : o_.epochs * batches;
    const int64_t first_step = state_.step;
    const auto start = Clock::now();
    std::fprintf(stderr, "model: V=%lld D=%d H=%d T=%d L=%d blend=%s pool=%s, %zu parameters; %lld steps of %d\n",
                 static_cast<long long>(c.vocab_size), c.embedding_dim, c.hidden, c.seq_len, c.num_labels,
                 to_string(c.blend), to_string(c.pool), params_.size(), static_cast<long long>(total_steps),
                 o_.batch_size);
    while (state_.step < total_steps) {
      loader.start_epoch(state_.epoch, state_.batch_in_epoch);
      bool epoch_done = true;
      while (const Batch* batch = loader.next()) {
        backend_->enqueue_train_step(*batch);
        ++state_.step;
        ++state_.batch_in_epoch;
        const bool log_now = state_.step % o_.log_every == 0 || state_.step == total_steps;
        const bool checkpoint_now = o_.checkpoint_every > 0 && state_.step % o_.checkpoint_every == 0;
        if (log_now || checkpoint_now)
          if (const int code = collect()) return code;
        if (log_now) log_interval(batches, total_steps, first_step, start);
        if (checkpoint_now) save();
        if (state_.step == total_steps) {
          epoch_done = state_.batch_in_epoch == batches;
          break;
        }
      }
      if (const int code = collect()) return code;
      if (epoch_done) end_epoch();
    }
    save();
    if (o_.progress) std::fprintf(stderr, "\n");
    std::fprintf(stderr, "done: %lld steps in %s; checkpoints in %s\n", static_cast<long long>(state_.step),
                 duration_text(seconds_since(start)).c_str(), dir_.c_str());
    if (const std::string note = backend_->closing_note(); !note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
    return 0;
  }

 private:
  // Waits for the queued steps and adds their loss and accuracy to the interval and the epoch. A
  // step that met a non-finite loss or gradient stopped the run there (it and every later step
  // left the weights unchanged): report it and stop.
  int collect() {
    const TrainTotals totals = backend_->collect();
    interval_loss_ += totals.loss_sum;
    epoch_loss_ += totals.loss_sum;
    interval_correct_ += totals.correct;
    epoch_correct_ += totals.correct;
    interval_samples_ += totals.samples;
    epoch_samples_ += totals.samples;
    if (totals.halted) {
      // The halted step's index in this epoch: every collect happens within one epoch.
      const int64_t batch_index = state_.batch_in_epoch - (state_.step - totals.halted_step) - 1;
      if (totals.halted == 1) return stop_non_finite(totals.halted_value, totals.halted_step, batch_index);
      fail("non-finite gradient (norm ", totals.halted_value, ") at step ", totals.halted_step,
           "; weights left unchanged");
    }
    return 0;
  }

  // Brings the host parameters and optimizer state up to date with the device's.
  void sync_to_host() { backend_->sync_to_host(); }

  EvalResult validate() { return backend_->evaluate(*valid_, o_.batch_size); }

  static double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  void log_interval(int64_t batches, int64_t total_steps, int64_t first_step, Clock::time_point start) {
    const double elapsed = seconds_since(start);
    const double rate = static_cast<double>(state_.step - first_step) * o_.batch_size / elapsed;
    const double eta = elapsed / static_cast<double>(state_.step - first_step) * static_cast<double>(total_steps - state_.step);
    const double loss = interval_loss_ / static_cast<double>(interval_samples_);
    const double accuracy = static_cast<double>(interval_correct_) / static_cast<double>(interval_samples_);
    metrics_ << nlohmann::json{{"kind", "train"}, {"step", state_.step}, {"epoch", state_.epoch + 1},
                               {"loss", loss}, {"accuracy", accuracy}, {"lr", o_.optimizer.learning_rate},
                               {"samples_per_s", rate}, {"seconds", elapsed}}.dump()
             << '\n' << std::flush;
    if (o_.progress) {
      const bool tty = ::isatty(2);
      std::fprintf(stderr, "%sepoch %lld/%lld  step %lld/%lld  loss %.4f  acc %.3f  %.0f samples/s  ETA %s%s",
                   tty ? "\r" : "", static_cast<long long>(state_.epoch + 1),
                   static_cast<long long>((total_steps + batches - 1) / batches), static_cast<long long>(state_.step),
                   static_cast<long long>(total_steps), loss, accuracy, rate, duration_text(eta).c_str(),
                   tty ? "   " : "\n");
    }
    interval_loss_ = 0;
    interval_correct_ = 0;
    interval_samples_ = 0;
  }

  void end_epoch() {
    const double samples = static_cast<double>(std::max<int64_t>(epoch_samples_, 1));
    nlohmann::json line{{"kind", "epoch"}, {"step", state_.step}, {"epoch", state_.epoch + 1},
                        {"loss", epoch_loss_ / samples}, {"accuracy", static_cast<double>(epoch_correct_) / samples},
                        {"lr", o_.optimizer.learning_rate}};
    epoch_correct_ = 0;
    epoch_loss_ = 0;
    epoch_samples_ = 0;
    ++state_.epoch;
    state_.batch_in_epoch = 0;
    if (valid_) {
      const EvalResult result = validate();
      line["valid_loss"] = result.loss;
      line["valid_accuracy"] = result.accuracy();
      if (o_.progress) std::fprintf(stderr, "%sepoch %lld: valid loss %.4f  acc %.3f\n", ::isatty(2) ? "\n" : "",
                                    static_cast<long long>(state_.epoch), result.loss, result.accuracy());
      if (result.loss < state_.best_valid_loss) {
        state_.best_valid_loss = result.loss;
        sync_to_host();
        save_checkpoint((dir_ / "best.safetensors").string(), params_, checkpoint_metadata());
      }
    }
    metrics_ << line.dump() << '\n' << std::flush;
    save();
  }

  std::map<std::string, std::string> checkpoint_metadata() const {
    return {{"step", std::to_string(state_.step)}, {"epoch", std::to_string(state_.epoch)}};
  }

  // optimizer.safetensors first: a crash between the two writes leaves a mismatch that resume
  // detects by step, never a silently inconsistent pair.
  void save() {
    sync_to_host();
    // Never replace a good checkpoint with a diverged one.
    for (const float value : params_.data)
      if (!std::isfinite(value))
        fail("weights became non-finite by step ", state_.step, "; training stopped without saving. The last good "
             "checkpoint is ", (dir_ / "last.safetensors").string());
    SafetensorsWriter writer;
    optimizer_.save_state(writer);
    add_model(writer, params_, "model.");
    writer.set_metadata("run_options", options_json(o_).dump());
    writer.set_metadata("epoch", std::to_string(state_.epoch));
    writer.set_metadata("batch_in_epoch", std::to_string(state_.batch_in_epoch));
    writer.set_metadata("step", std::to_string(state_.step));
    writer.set_metadata("best_valid_loss", exact_text(state_.best_valid_loss));
    writer.write((dir_ / "optimizer.safetensors").string());
    save_checkpoint((dir_ / "last.safetensors").string(), params_, checkpoint_metadata());
  }

  // step: the 1-based step that met the loss; batch_index: its batch's 0-based index in the epoch.
  int stop_non_finite(double loss, int64_t step, int64_t batch_index) {
    const fs::path last = dir_ / "last.safetensors";
    std::fprintf(stderr, "\nerror: non-finite loss (%g) at step %lld (epoch %lld, batch %lld); training stopped. %s\n",
                 loss, static_cast<long long>(step), static_cast<long long>(state_.epoch + 1),
                 static_cast<long long>(batch_index),
                 fs::exists(last) ? ("The last good checkpoint is " + last.string()).c_str()
                                  : "No checkpoint had been written yet.");
    return 3;
  }

  TrainOptions o_;
  ParameterBuffer<float> params_;
  const Dataset& train_;
  const Dataset* valid_;
  Optimizer optimizer_;
  fs::path dir_;
  RunState state_;
  std::ofstream metrics_;
  std::unique_ptr<TrainingBackend> backend_;
  double interval_loss_ = 0, epoch_loss_ = 0;
  int64_t interval_correct_ = 0, interval_samples_ = 0, epoch_correct_ = 0, epoch_samples_ = 0;
};

}  // namespace

int run_training(TrainOptions options) {
  if (options.out_dir.empty()) fail("--out is required");
  std::unique_ptr<SafetensorsReader> saved_state;  // optimizer.safetensors of the run resumed
  if (options.resume) {
    saved_state = std::make_unique<SafetensorsReader>((fs::path(options.out_dir) / "optimizer.safetensors").string());
    options = resumed_options(options, *saved_state);
  }
  if (options.epochs == 0) options.epochs = 1;
  if (options.batch_size <= 0) fail("--batch-size must be positive, got ", options.batch_size);
  if (options.log_every <= 0) fail("--log-every must be positive, got ", options.log_every);
  const int threads = configure_cpu_threads(options.threads);
  const Device device = resolve_device(options.device);
  check_writable_dir(options.out_dir);

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
    saved_state.reset();  // its moments now live in the optimizer: do not hold two copies
  }
  run.use_device(device, threads);
  return run.run(options.resume);
}

}  // namespace enhanced
