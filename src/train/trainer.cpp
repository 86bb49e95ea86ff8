// enhanced-train's run from its options: the output directory, the run state to resume, the
// datasets and the model, each checked, then the step loop (training_run.h).
#include "enhanced/trainer.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>

#include "enhanced/atomic_file.h"
#include "enhanced/batch_stream.h"
#include "enhanced/checkpoint.h"
#include "enhanced/common.h"
#include "enhanced/communicator.h"
#include "enhanced/cpu.h"
#include "enhanced/embedding_table.h"
#include "enhanced/evaluate.h"
#include "enhanced/loader.h"
#include "train/distributed.h"
#include "train/run_checks.h"
#include "train/run_files.h"
#include "train/run_options.h"
#include "enhanced/training_observer.h"
#include "train/training_run.h"

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

// A run between its options and its datasets: the options resolved (on --resume the recorded
// run's, with the caller's changes), the state file to resume from and the locked --out.
struct PreparedRun {
  TrainOptions options;
  TrainOptions given;                              // the caller's, before the recorded options
  std::unique_ptr<SafetensorsReader> saved_state;  // optimizer.safetensors of the run resumed
  std::optional<OutputDirectory> out;              // rank 0's
  int threads = 0;
};

void prepare_run(PreparedRun& run, TrainOptions options, Communicator& communicator) {
  const bool rank0 = communicator.rank() == 0;
  if (options.out_dir.empty()) fail("--out is required");
  if (options.resume && !fs::is_directory(options.out_dir)) fail(no_run_to_resume(options.out_dir));
  // Rank 0 alone touches --out, and locks it before it reads the state or removes anything. A
  // new run locks (and so creates) it only once the ranks agree: a job that MPI aborts at the
  // check leaves no directory behind.
  if (rank0 && options.resume) run.out.emplace(options.out_dir);
  run.given = options;
  if (options.resume) {
    const fs::path state = fs::path(options.out_dir) / "optimizer.safetensors";
    if (!fs::exists(state)) fail(no_run_to_resume(options.out_dir));
    if (options.overwrite) fail("--resume and --overwrite contradict each other: continue the run in ", options.out_dir,
                                ", or replace it");
    run.saved_state = std::make_unique<SafetensorsReader>(state.string());
    options = resumed_options(options, recorded_options(*run.saved_state), run.saved_state->path());
  }
  if (options.epochs == 0) options.epochs = 1;
  check_training_controls(options);  // every flag's rule, and the rules between flags
  check_same_run(communicator, options, run.saved_state.get());  // the first collective: the options size later ones
  if (rank0 && !run.out) run.out.emplace(options.out_dir);
  run.threads = configure_cpu_threads(threads_for_rank(options.engine.threads, communicator));
  run.options = std::move(options);
}

// A validation set for this training set (whose labels are checked already).
void check_validation_set(const Dataset& valid, const Dataset& train) {
  check_has_labels(valid, "--valid (validation)");
  if (valid.seq_len() != train.seq_len())
    fail(valid.path(), ": T = ", valid.seq_len(), " but ", train.path(), " has T = ", train.seq_len());
}

// A run's validation data for this training set (or a stream's first batch). A stream's batches
// are checked as they come against the model's T, vocabulary and labels (its StreamShape); its
// first batch's T here, before any work.
void check_validation(const ValidationData& valid, const Dataset& train) {
  if (valid.set) check_validation_set(*valid.set, train);
  if (valid.stream && valid.stream->first().seq_len() != train.seq_len())
    fail(valid.stream->name(), ": batch 0: T = ", valid.stream->first().seq_len(), " but ", train.path(),
         " has T = ", train.seq_len());
}

// The model built (or read back) and checked against the datasets.
ParameterBuffer<float> model_for_data(const PreparedRun& run, const Dataset& train, const Dataset* valid) {
  const TrainOptions& options = run.options;
  check_run_datasets(options, train, valid);
  ParameterBuffer<float> params = options.resume ? read_model(*run.saved_state, "model.") : build_model(options, train, valid);
  if (options.resume || !options.init_from.empty()) check_run_memory(params.config, options, params.size() * sizeof(float));
  if (options.resume) check_model_flags(run.given, params.config, "the run being resumed (" + run.saved_state->path() + ")");
  check_run_label_names(options, params.config);
  check_data_seq_len(train, params.config, options.resume ? run.saved_state->path() : options.init_from);
  train.check_fits_model(params.config.vocab_size, params.config.num_labels);
  if (valid) valid->check_fits_model(params.config.vocab_size, params.config.num_labels);
  return params;
}

// The steps' batches of a training set: its loader in the run's order; a set too small for one
// batch is refused.
BatchLoader training_loader(const TrainOptions& o, const Dataset& train) {
  return BatchLoader(train, LoaderOptions{o.batch_size, o.shuffle, o.seed, o.drop_last, true});
}

// shape: the data the model is built and checked on (the training set, or a stream's first batch);
// train: the whole set where there is one (class weights count its labels).
int train_prepared(PreparedRun& prepared, BatchSource& source, const Dataset& shape, const Dataset* train,
                   ValidationData valid, Communicator& communicator, TrainingObserver* observer) {
  const TrainOptions& options = prepared.options;
  TrainingRun run(options, model_for_data(prepared, shape, valid.set), source, train, valid, communicator);
  if (train && source.batches_per_epoch() == 0)
    fail(train->path(), ": no batch to train on (", train->num_samples(), " samples, batch size ", options.batch_size,
         options.drop_last ? ", drop-last on)" : ")");
  run.observe(observer);
  if (options.resume) {
    run.resume(*prepared.saved_state);
    prepared.saved_state.reset();  // its moments now live in the optimizer state: do not hold two copies
    if (!run.has_work()) {
      // It rewrites last.safetensors: the temporaries a killed rewrite left go first, as in a run.
      if (communicator.rank() == 0) remove_stale_temp_files(options.out_dir);
      return run.refresh_last_checkpoint();
    }
  }
  run.check_controls_fit_the_run();
  if (communicator.rank() != 0) {
    run.use_device(prepared.threads);
    return run.run();
  }
  prepare_run_files(options);
  remove_stale_temp_files(options.out_dir);  // left by a run killed with SIGKILL
  run.use_device(prepared.threads);
  const int code = run.run();
  if (code == 0 || fs::exists(fs::path(options.out_dir) / "optimizer.safetensors")) prepared.out->keep();
  return code;
}

int train_dataset(PreparedRun& prepared, const Dataset& train, ValidationData valid, Communicator& communicator,
                  TrainingObserver* observer) {
  BatchLoader loader = training_loader(prepared.options, train);
  return train_prepared(prepared, loader, train, &train, valid, communicator, observer);
}

}  // namespace

int run_training(TrainOptions options) {
  Communicator alone;
  return run_training(std::move(options), alone);
}

int run_training(TrainOptions options, Communicator& communicator) {
  PreparedRun prepared;
  prepare_run(prepared, std::move(options), communicator);
  const TrainOptions& o = prepared.options;
  const Dataset train = Dataset::open(o.data_path);
  check_has_labels(train, "--data (training)");
  Dataset valid;
  if (!o.valid_path.empty()) {
    valid = Dataset::open(o.valid_path);
    check_validation_set(valid, train);
  }
  check_same_files(communicator, o.valid_path.empty() ? std::vector<std::string>{o.data_path}
                                                      : std::vector<std::string>{o.data_path, o.valid_path});
  return train_dataset(prepared, train, o.valid_path.empty() ? nullptr : &valid, communicator, nullptr);
}

int run_training(TrainOptions options, const Dataset& train, ValidationData valid, TrainingObserver* observer) {
  Communicator alone;
  return run_training(std::move(options), train, valid, observer, alone);
}

// The run records the datasets' names (path()) as its data: a resume finds the same names, or
// says what changed, as it says of a changed --data.
int run_training(TrainOptions options, const Dataset& train, ValidationData valid, TrainingObserver* observer,
                 Communicator& communicator) {
  if (communicator.size() > 1)
    fail("datasets given in memory train in one process: a data-parallel run (", communicator.size(),
         " ranks) reads its data from files (--data, --valid)");
  options.data_path = train.path();
  options.valid_path = valid.name();
  options.given_flags.insert({"--data", "--valid"});  // the caller's data, whatever a resumed run recorded
  PreparedRun prepared;
  prepare_run(prepared, std::move(options), communicator);
  check_has_labels(train, "--data (training)");
  check_validation(valid, train);
  return train_dataset(prepared, train, valid, communicator, observer);
}

int run_training(TrainOptions options, StreamedBatches& train, ValidationData valid, TrainingObserver* observer) {
  if (options.vocab_size <= 0 || options.num_labels <= 0)
    fail("a stream of batches trains a model of a given shape: --vocab-size and --num-labels are required");
  if (options.data_path.empty()) options.data_path = train.name();  // the host may name the stream for the record
  options.valid_path = valid.name();
  options.given_flags.insert({"--data", "--valid"});
  Communicator alone;
  PreparedRun prepared;
  prepare_run(prepared, std::move(options), alone);
  check_validation(valid, train.first());
  return train_prepared(prepared, train, train.first(), nullptr, valid, alone, observer);
}

}  // namespace enhanced
