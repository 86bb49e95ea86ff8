// Streams batches from a mapped Dataset: seeded per-epoch shuffling or sequential order,
// optional drop of the last partial batch, and an optional background thread that fills batch
// k+1 while batch k is consumed. Buffers are reused: no allocation in steady state.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "enhanced/batch.h"
#include "enhanced/batch_source.h"
#include "enhanced/dataset.h"

namespace enhanced {

struct LoaderOptions {
  int batch_size = 64;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  bool prefetch = true;
  // false: every batch's labels are 0, whatever the set holds. For inference that ignores them
  // (enhanced-predict): a label >= L would otherwise index past a row of logits in the loss.
  bool labels = true;
};

// The order of an epoch: a permutation of [0, n) that depends only on (seed, epoch), or the
// identity when not shuffling. Pure function, so a resumed run reproduces it.
std::vector<int64_t> epoch_order(int64_t num_samples, bool shuffle, uint64_t seed, int64_t epoch);

// Fills `batch` with the samples order[first .. first+count) of `dataset` (reusing capacity).
void fill_batch(Batch& batch, const Dataset& dataset, const int64_t* sample_indices, int count);

class BatchLoader final : public BatchSource {
 public:
  BatchLoader(const Dataset& dataset, LoaderOptions options);
  ~BatchLoader() override;
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  int64_t batches_per_epoch() const override;
  // Begins epoch `epoch` at batch `first_batch` (for resuming mid-epoch).
  void start_epoch(int64_t epoch, int64_t first_batch = 0) override;
  // The next batch of the epoch, or nullptr at its end. Valid until the next call.
  const Batch* next() override;

 private:
  void worker_loop();

  const Dataset& dataset_;
  LoaderOptions options_;
  std::vector<int64_t> order_;
  int64_t next_batch_ = 0;  // index of the batch the consumer gets next
  Batch buffers_[2];
  int consumer_buffer_ = 0;
  // Prefetch state.
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool request_pending_ = false;  // worker should fill request_batch_ into buffers_[request_buffer_]
  bool ready_ = false;
  int64_t request_batch_ = -1;
  int request_buffer_ = 1;
  std::exception_ptr worker_error_;  // an exception from fill_batch, rethrown by next()
  bool started_ = false;             // start_epoch has been called
  void fill(int buffer, int64_t batch_index);
  void post_request(int64_t batch_index, int buffer);  // caller holds mutex_
};

}  // namespace enhanced
