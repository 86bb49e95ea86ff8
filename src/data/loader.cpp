// Epoch ordering, batch filling and the (optionally prefetching) batch loader.
#include "enhanced/loader.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "enhanced/common.h"
#include "enhanced/random.h"

namespace enhanced {
namespace {

// Uniform in [0, bound) by rejection (no modulo bias). Pinned: the orders of resumed runs depend
// on it, so it stays this definition rather than Random::below's multiply-shift.
uint64_t uniform_below(Random& random, uint64_t bound) {
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % bound;
  for (;;) {
    const uint64_t r = random.next_u64();
    if (r < limit) return r % bound;
  }
}

}  // namespace

std::vector<int64_t> epoch_order(int64_t num_samples, bool shuffle, uint64_t seed, int64_t epoch) {
  if (num_samples < 0) fail("epoch_order: negative sample count ", num_samples);
  std::vector<int64_t> order(static_cast<size_t>(num_samples));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  // Key the stream by (seed, epoch): mix the seed once, then fold the epoch in.
  Random key(seed);
  Random rng(key.next_u64() ^ (static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ull));
  rng.next_u64();
  for (int64_t i = num_samples - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

void fill_batch(Batch& batch, const Dataset& dataset, const int64_t* sample_indices, int count) {
  const int T = dataset.seq_len();
  batch.size = count;
  batch.seq_len = T;
  batch.identifier_offsets.clear();
  batch.identifier_ids.clear();
  batch.cur_word_ids.clear();
  batch.labels.clear();
  batch.sample_indices.clear();
  batch.identifier_offsets.push_back(0);
  int64_t total = 0;
  for (int b = 0; b < count; ++b) {
    const int64_t s = sample_indices[b];
    if (s < 0 || s >= dataset.num_samples())
      fail(dataset.path(), ": sample index ", s, " out of range (", dataset.num_samples(), " samples)");
    batch.sample_indices.push_back(s);
    // An unlabeled set's rows carry label 0: only their logits are used (enhanced-predict).
    batch.labels.push_back(dataset.has_labels() ? dataset.label(s) : 0);
    for (int t = 0; t < T; ++t) {
      auto ids = dataset.identifier(s, t);
      total += static_cast<int64_t>(ids.size());
      if (total > std::numeric_limits<int32_t>::max())
        fail(dataset.path(), ": sample ", s, ": a batch of ", count,
             " samples holds more than 2^31-1 identifier ids; use a smaller batch");
      batch.identifier_ids.insert(batch.identifier_ids.end(), ids.begin(), ids.end());
      batch.identifier_offsets.push_back(static_cast<int32_t>(total));
      batch.cur_word_ids.push_back(dataset.cur_word(s, t));
    }
  }
}

BatchLoader::BatchLoader(const Dataset& dataset, LoaderOptions options) : dataset_(dataset), options_(options) {
  if (options_.batch_size <= 0) fail("batch size must be positive, got ", options_.batch_size);
  if (options_.prefetch) worker_ = std::thread([this] { worker_loop(); });
}

BatchLoader::~BatchLoader() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
}

int64_t BatchLoader::batches_per_epoch() const {
  const int64_t n = dataset_.num_samples();
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void BatchLoader::fill(int buffer, int64_t batch_index) {
  const int64_t n = static_cast<int64_t>(order_.size());
  const int64_t first = batch_index * options_.batch_size;
  const auto count = static_cast<int>(std::min<int64_t>(options_.batch_size, n - first));
  fill_batch(buffers_[buffer], dataset_, order_.data() + first, count);
  if (!options_.labels) std::fill(buffers_[buffer].labels.begin(), buffers_[buffer].labels.end(), 0);
}

void BatchLoader::post_request(int64_t batch_index, int buffer) {
  request_batch_ = batch_index;
  request_buffer_ = buffer;
  ready_ = false;
  request_pending_ = true;
}

void BatchLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || (request_pending_ && !ready_); });
    if (stop_) return;
    const int64_t batch_index = request_batch_;
    const int buffer = request_buffer_;
    lock.unlock();
    std::exception_ptr error;
    try {
      fill(buffer, batch_index);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    worker_error_ = error;
    request_pending_ = false;
    ready_ = true;
    cv_.notify_all();
  }
}

void BatchLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  const int64_t total = batches_per_epoch();
  if (first_batch < 0 || first_batch > total)
    fail("start_epoch: batch ", first_batch, " is outside the epoch's ", total, " batches");
  std::unique_lock<std::mutex> lock(mutex_);
  // Let a fill in flight finish before the order it reads changes.
  cv_.wait(lock, [this] { return !request_pending_; });
  order_ = epoch_order(dataset_.num_samples(), options_.shuffle, options_.seed, epoch);
  next_batch_ = first_batch;
  ready_ = false;
  worker_error_ = nullptr;
  started_ = true;
  if (options_.prefetch && next_batch_ < total) {
    post_request(next_batch_, 1 - consumer_buffer_);
    lock.unlock();
    cv_.notify_all();
  }
}

const Batch* BatchLoader::next() {
  if (!started_) start_epoch(0);
  if (next_batch_ >= batches_per_epoch()) return nullptr;
  if (!options_.prefetch) {
    fill(consumer_buffer_, next_batch_);
    ++next_batch_;
    return &buffers_[consumer_buffer_];
  }
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return ready_; });
  ready_ = false;
  if (worker_error_) {
    std::exception_ptr error = worker_error_;
    worker_error_ = nullptr;
    post_request(next_batch_, request_buffer_);  // a retry fails (or succeeds) the same way
    lock.unlock();
    cv_.notify_all();
    std::rethrow_exception(error);
  }
  consumer_buffer_ = request_buffer_;
  ++next_batch_;
  if (next_batch_ < batches_per_epoch()) {
    post_request(next_batch_, 1 - consumer_buffer_);
    lock.unlock();
    cv_.notify_all();
  }
  return &buffers_[consumer_buffer_];
}

}  // namespace enhanced
