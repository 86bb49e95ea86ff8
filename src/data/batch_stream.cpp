// Streamed batches: each image from the host checked as a Dataset (no copy), then copied into
// the step's Batch by fill_batch, whose buffers keep their capacity from step to step.
#include "enhanced/batch_stream.h"

#include <numeric>
#include <utility>

#include "enhanced/common.h"
#include "enhanced/loader.h"

namespace enhanced {

StreamedBatches::StreamedBatches(BatchImages& images, StreamShape shape, int64_t steps_per_epoch, std::string name,
                                 bool pass_per_epoch)
    : images_(images), shape_(shape), steps_per_epoch_(steps_per_epoch), name_(std::move(name)),
      pass_per_epoch_(pass_per_epoch) {
  if (steps_per_epoch_ < 0) fail(name_, ": steps an epoch must be positive, got ", steps_per_epoch_);
  if (shape_.max_batch < 1) fail(name_, ": the batch size must be positive, got ", shape_.max_batch);
  const std::span<const uint8_t> image = images_.next_image(true);
  if (image.empty()) fail(name_, ": the stream gave no batches");
  first_ = checked(image);
  rows_.resize(static_cast<size_t>(shape_.max_batch));
  std::iota(rows_.begin(), rows_.end(), int64_t{0});
}

// A stream is read once, in order: the run starts at its first batch and never goes back.
void StreamedBatches::start_epoch(int64_t epoch, int64_t first_batch) {
  if (first_batch != 0 || epoch != epochs_started_)
    fail(name_, ": a stream of batches cannot be replayed to epoch ", epoch + 1, ", batch ", first_batch,
         " (resume a run of an in-memory set or an .ebin file)");
  ++epochs_started_;
  in_epoch_ = 0;
  // Without steps an epoch, each epoch is a pass of its own (the first one's began at construction).
  if ((steps_per_epoch_ == 0 || pass_per_epoch_) && epoch > 0) new_pass_ = true;
}

const Batch* StreamedBatches::next() {
  if (steps_per_epoch_ > 0 && in_epoch_ == steps_per_epoch_) return nullptr;
  Dataset batch;
  if (first_pending_) {
    batch = std::move(first_);
    first_pending_ = false;
  } else {
    const std::span<const uint8_t> image = images_.next_image(std::exchange(new_pass_, false));
    // The end of a pass ends an epoch of passes; before an epoch's planned steps, or as an
    // epoch's first batch, it is the data running out.
    if (image.empty()) {
      if (images_.interrupted()) return nullptr;  // not the data's end: the run saves and stops
      if (pass_per_epoch_ && in_epoch_ == 0)
        fail(name_, ": its pass ", epochs_started_, " gave no batches (it is read again for each validation; a "
             "one-shot iterator cannot be)");
      ran_out_ = steps_per_epoch_ > 0 || in_epoch_ == 0;
      return nullptr;
    }
    batch = checked(image);
  }
  fill_batch(batch_, batch, rows_.data(), static_cast<int>(batch.num_samples()));
  ++batches_;
  ++in_epoch_;
  return &batch_;
}

// The image as a Dataset that fits the run: every error names the batch. The name is the one
// allocation a batch here; the host has just allocated the whole image, so it costs nothing that shows.
Dataset StreamedBatches::checked(std::span<const uint8_t> image) const {
  const std::string where = cat(name_, ": batch ", batches_);
  Dataset batch = Dataset::view(image, where);
  if (!batch.has_labels()) fail(where, ": has no labels (a training batch is an (x, y) pair)");
  if (batch.seq_len() != shape_.seq_len)
    fail(where, ": T = ", batch.seq_len(), " positions, but the model's seq_len is ", shape_.seq_len);
  if (batch.num_samples() < 1 || batch.num_samples() > shape_.max_batch)
    fail(where, ": ", batch.num_samples(), " samples; a stream's batches hold 1 to ", shape_.max_batch,
         " (its first batch's size)");
  batch.check_fits_model(shape_.vocab_size, shape_.num_labels);
  return batch;
}

}  // namespace enhanced
