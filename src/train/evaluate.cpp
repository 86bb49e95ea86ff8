#include "enhanced/evaluate.h"

#include <algorithm>

#include "enhanced/common.h"
#include "enhanced/communicator.h"
#include "enhanced/cpu.h"
#include "enhanced/data_parallel.h"
#include "enhanced/engine.h"
#include "enhanced/loader.h"

namespace enhanced {

int64_t EvalResult::correct() const {
  int64_t total = 0;
  for (int l = 0; l < num_labels; ++l) total += confusion[static_cast<size_t>(l) * num_labels + l];
  return total;
}

double EvalResult::accuracy() const { return samples ? static_cast<double>(correct()) / static_cast<double>(samples) : 0.0; }

double EvalResult::precision(int label) const {
  int64_t predicted = 0;
  for (int t = 0; t < num_labels; ++t) predicted += confusion[static_cast<size_t>(t) * num_labels + label];
  return predicted ? static_cast<double>(confusion[static_cast<size_t>(label) * num_labels + label]) / static_cast<double>(predicted) : 0.0;
}

double EvalResult::recall(int label) const {
  int64_t actual = 0;
  for (int p = 0; p < num_labels; ++p) actual += confusion[static_cast<size_t>(label) * num_labels + p];
  return actual ? static_cast<double>(confusion[static_cast<size_t>(label) * num_labels + label]) / static_cast<double>(actual) : 0.0;
}

double EvalResult::f1(int label) const {
  const double p = precision(label), r = recall(label);
  return p + r > 0 ? 2 * p * r / (p + r) : 0.0;
}

double EvalResult::macro_f1() const {
  double total = 0;
  int counted = 0;
  for (int l = 0; l < num_labels; ++l) {
    int64_t seen = 0;
    for (int o = 0; o < num_labels; ++o)
      seen += confusion[static_cast<size_t>(l) * num_labels + o] + confusion[static_cast<size_t>(o) * num_labels + l];
    if (seen == 0) continue;
    total += f1(l);
    ++counted;
  }
  return counted ? total / counted : 0.0;
}

void check_has_samples(const Dataset& dataset, const std::string& flag) {
  if (dataset.num_samples() == 0) fail(dataset.path(), ": no samples (", flag, " needs at least one)");
}

void check_has_labels(const Dataset& dataset, const std::string& flag, const std::string& instead) {
  if (!dataset.has_labels())
    fail(dataset.path(), ": unlabeled data (no labels), but ", flag, " needs labels", instead.empty() ? "" : "; ",
         instead);
}

namespace {

// The sums of every rank's result (loss sum in `loss`), the same on every rank.
void reduce_over_ranks(EvalResult& result, Communicator& communicator) {
  std::vector<double> sums(result.confusion.begin(), result.confusion.end());  // counts are exact in double
  sums.push_back(result.loss);
  sums.push_back(static_cast<double>(result.samples));
  communicator.sum(sums.data(), sums.size());
  for (size_t i = 0; i < result.confusion.size(); ++i) result.confusion[i] = static_cast<int64_t>(sums[i]);
  result.loss = sums[result.confusion.size()];
  result.samples = static_cast<int64_t>(sums.back());
}

}  // namespace

LoaderOptions file_order(int batch_size, bool labels_used) {
  LoaderOptions options;
  options.batch_size = batch_size;
  options.shuffle = false;
  options.labels = labels_used;
  return options;
}

void run_inference(Engine& engine, const Dataset& dataset, int batch_size, const InferenceBatchFn& on_batch,
                   Communicator* communicator, bool labels_used, const std::function<void(int64_t)>& before_batch) {
  BatchLoader loader(dataset, file_order(batch_size, labels_used));
  loader.start_epoch(0);
  run_inference(engine, loader, on_batch, communicator, before_batch);
}

void run_inference(Engine& engine, BatchSource& batches, const InferenceBatchFn& on_batch, Communicator* communicator,
                   const std::function<void(int64_t)>& before_batch) {
  const bool sharded = communicator && communicator->size() > 1;
  const int L = engine.config().num_labels;
  std::vector<float> logits, probabilities;  // grown to the largest batch: no allocation after it
  Batch shard_batch;
  for (int64_t index = 0; const Batch* whole = batches.next(); ++index) {
    if (const size_t size = static_cast<size_t>(whole->size) * L; logits.size() < size) {
      logits.resize(size);
      probabilities.resize(size);
    }
    if (before_batch) before_batch(index);
    const Batch* batch = whole;
    if (sharded) {
      if (take_shard(shard_batch, *whole, communicator->rank(), communicator->size()).count == 0) continue;
      batch = &shard_batch;
    }
    const double loss = engine.forward(*batch, logits.data());
    softmax_probabilities(probabilities.data(), logits.data(), batch->size, L);
    on_batch(*batch, loss, logits.data(), probabilities.data());
  }
}

EvalResult evaluate(Engine& engine, const Dataset& dataset, int batch_size, bool keep_predictions,
                    Communicator* communicator, const EvalHooks* hooks) {
  BatchLoader loader(dataset, file_order(batch_size, true));
  loader.start_epoch(0);
  return evaluate(engine, loader, keep_predictions, communicator, hooks);
}

EvalResult evaluate(Engine& engine, BatchSource& batches, bool keep_predictions, Communicator* communicator,
                    const EvalHooks* hooks) {
  const bool sharded = communicator && communicator->size() > 1;
  if (sharded && keep_predictions) fail("internal: a sharded evaluation keeps no predictions");
  if (sharded && hooks) fail("internal: a sharded evaluation takes no hooks");
  const int L = engine.config().num_labels;
  EvalResult result;
  result.num_labels = L;
  result.confusion.assign(static_cast<size_t>(L) * L, 0);
  double loss_sum = 0;
  int64_t batch_index = 0;
  const auto score = [&](const Batch& batch, double loss, const float*, const float* probabilities) {
    loss_sum += loss * batch.size;
    for (int b = 0; b < batch.size; ++b) {
      const float* row = probabilities + static_cast<size_t>(b) * L;
      const int predicted = static_cast<int>(std::max_element(row, row + L) - row);
      ++result.confusion[static_cast<size_t>(batch.labels[b]) * L + predicted];
      if (keep_predictions)
        result.predictions.push_back({batch.sample_indices[b], batch.labels[b], predicted, row[predicted]});
    }
    result.samples += batch.size;
    if (hooks && hooks->batch_end) {
      const EvalResult so_far{L, result.samples, loss_sum / static_cast<double>(result.samples), result.confusion, {}};
      hooks->batch_end(batch_index, so_far);
    }
  };
  const auto begin = [&](int64_t index) {
    batch_index = index;
    if (hooks && hooks->batch_begin) hooks->batch_begin(index);
  };
  run_inference(engine, batches, score, communicator, begin);
  result.loss = loss_sum;
  if (sharded) reduce_over_ranks(result, *communicator);
  result.loss = result.samples ? result.loss / static_cast<double>(result.samples) : 0.0;
  return result;
}

}  // namespace enhanced
