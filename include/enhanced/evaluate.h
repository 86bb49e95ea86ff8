// Evaluation of a model over a whole dataset: loss, accuracy, per-label precision/recall/F1,
// the confusion matrix and, on request, every prediction.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "enhanced/batch.h"
#include "enhanced/batch_source.h"
#include "enhanced/dataset.h"
#include "enhanced/loader.h"
#include "enhanced/model.h"

namespace enhanced {

struct Prediction {
  int64_t sample = 0;
  int32_t label = 0;
  int32_t predicted = 0;
  float probability = 0;  // of the predicted label
};

struct EvalResult {
  int num_labels = 0;
  int64_t samples = 0;
  double loss = 0;                  // mean over samples
  std::vector<int64_t> confusion;   // (L, L): [true][predicted]
  std::vector<Prediction> predictions;

  int64_t correct() const;
  double accuracy() const;
  double precision(int label) const;
  double recall(int label) const;
  double f1(int label) const;
  double macro_f1() const;  // over labels present in the data or predicted
};

class Engine;
class Communicator;

// What run_inference hands on for each batch: the batch, its mean loss (meaningless on an
// unlabeled set), logits (B, L) and softmax probabilities (B, L), both on the host.
using InferenceBatchFn = std::function<void(const Batch& batch, double mean_loss, const float* logits,
                                            const float* probabilities)>;

// Runs the engine's model over the dataset in file order (batches of up to batch_size, at most
// the engine's max batch, filled by the prefetching loader): the one forward pass of
// enhanced-eval, enhanced-predict and validation. communicator (nullable) of several ranks: each
// rank runs its part of every batch (shard_of) and sees only that part. `labels_used` false: the
// set's labels never reach the engine (its loss is then meaningless), so any label is harmless.
// before_batch (nullable): called with each batch's index before its forward pass.
// How every evaluation reads a set: in file order, batch_size at a time (labels_used false: every
// label 0, as in inference that ignores them).
LoaderOptions file_order(int batch_size, bool labels_used = true);

void run_inference(Engine& engine, const Dataset& dataset, int batch_size, const InferenceBatchFn& on_batch,
                   Communicator* communicator = nullptr, bool labels_used = true,
                   const std::function<void(int64_t batch)>& before_batch = nullptr);
// The same over the batches of an epoch the caller has begun (batch_source.h: a loader, or a
// host's stream of batches, each at most the engine's max batch).
void run_inference(Engine& engine, BatchSource& batches, const InferenceBatchFn& on_batch, Communicator* communicator,
                   const std::function<void(int64_t batch)>& before_batch);

// What an evaluation tells its caller around each batch (Keras's on_test_batch_begin and
// on_test_batch_end): the batch's index, and after it the result so far (its loss the mean so
// far). One process only: a sharded evaluation takes no hooks.
struct EvalHooks {
  std::function<void(int64_t batch)> batch_begin;
  std::function<void(int64_t batch, const EvalResult& so_far)> batch_end;
};

// run_inference, scored against the set's labels. With a communicator of several ranks the sums
// are reduced, so every rank gets the whole set's result (without predictions: keep_predictions
// must be false).
EvalResult evaluate(Engine& engine, const Dataset& dataset, int batch_size, bool keep_predictions,
                    Communicator* communicator = nullptr, const EvalHooks* hooks = nullptr);
// The same over the batches of an epoch the caller has begun (a run's validation).
EvalResult evaluate(Engine& engine, BatchSource& batches, bool keep_predictions, Communicator* communicator = nullptr,
                    const EvalHooks* hooks = nullptr);

// Refuses a set with no samples, naming the file and the flag that gave it: its loss and
// accuracy would be 0 / 0, and a validation set that scores nothing could never pick a best
// checkpoint. Checked when the set is opened (enhanced-eval's --data, enhanced-train's --valid).
void check_has_samples(const Dataset& dataset, const std::string& flag);

// Refuses an unlabeled set where labels are needed (training, validation, evaluation), in one
// line naming the file and the flag; `instead` says what to run instead ("" for nothing).
void check_has_labels(const Dataset& dataset, const std::string& flag, const std::string& instead = "");

}  // namespace enhanced
