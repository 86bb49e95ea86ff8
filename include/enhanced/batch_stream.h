// A run's batches handed over one at a time by a host (Model.fit on a generator or a
// tf.data.Dataset): each batch an .ebin image, viewed where the host holds it and copied into
// the step's Batch, so the run holds one batch of the data at a time, never the whole set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "enhanced/batch_source.h"
#include "enhanced/dataset.h"

namespace enhanced {

// What the host implements: the data's batches in its own order and sizes.
class BatchImages {
 public:
  virtual ~BatchImages() = default;
  // The next batch as the bytes of an .ebin file (8-byte aligned), or an empty span at the end
  // of the data. new_pass: start the data again first (Python's iter(x) again). The bytes stay
  // valid and unchanged until the next call.
  virtual std::span<const uint8_t> next_image(bool new_pass) = 0;
  // Whether the empty span just returned means an interrupt (Ctrl-C, SIGTERM) while the host
  // made the batch, rather than the data's end.
  virtual bool interrupted() const { return false; }
};

// What every batch must fit: the model's T, vocabulary and labels, and the engine's batch
// capacity (the first batch's size: the stream's batch size).
struct StreamShape {
  int seq_len = 0;
  int64_t vocab_size = 0;
  int num_labels = 0;
  int max_batch = 0;
};

// The batches of `images` as a BatchSource. steps_per_epoch > 0: an epoch is that many batches
// of one pass that goes on across epochs (an endless stream works); 0: an epoch is one whole
// pass, begun anew each epoch. Each batch is checked against the shape, its errors naming
// "<name>: batch <i>" (i counted from the run's start). A stream cannot start mid-run: a resume
// is refused. pass_per_epoch: every epoch is a pass begun anew, of at most steps_per_epoch
// batches (0: all): a run's validation data, each validation the same batches (Keras's
// validation_steps); a pass that gives none is an error.
class StreamedBatches final : public BatchSource {
 public:
  StreamedBatches(BatchImages& images, StreamShape shape, int64_t steps_per_epoch, std::string name,
                  bool pass_per_epoch = false);

  // The first batch, read at construction: the run's T and batch size before any step.
  const Dataset& first() const { return first_; }
  const std::string& name() const { return name_; }
  // The first batch's size: the largest any later one may have.
  int max_batch() const { return shape_.max_batch; }
  int64_t batches_per_epoch() const override { return steps_per_epoch_; }
  void start_epoch(int64_t epoch, int64_t first_batch = 0) override;
  const Batch* next() override;
  bool ran_out() const override { return ran_out_; }
  bool interrupted() const override { return images_.interrupted(); }

 private:
  Dataset checked(std::span<const uint8_t> image) const;

  BatchImages& images_;
  StreamShape shape_;
  int64_t steps_per_epoch_;
  std::string name_;
  bool pass_per_epoch_;
  Dataset first_;             // the first batch, until its step takes it
  bool first_pending_ = true;
  bool new_pass_ = false;     // the next image starts a new pass
  bool ran_out_ = false;
  int64_t batches_ = 0;       // read since the run's start: the next one's index
  int64_t in_epoch_ = 0;      // batches of this epoch so far
  int64_t epochs_started_ = 0;
  Batch batch_;
  std::vector<int64_t> rows_;  // 0 .. B-1: a batch's samples in their order
};

// What a run validates on: a set (in memory or a file), read in file order at the run's batch
// size, or a host's stream of batches made with pass_per_epoch, a pass each validation, never
// held whole; or nothing (both null).
struct ValidationData {
  ValidationData() = default;
  ValidationData(std::nullptr_t) {}
  ValidationData(const Dataset* set_) : set(set_) {}
  // recorded_as: the name the run records (its errors name the stream's own: "validation_data: batch 3").
  ValidationData(StreamedBatches* stream_, std::string recorded_as) : stream(stream_), recorded(std::move(recorded_as)) {}
  explicit operator bool() const { return set || stream; }
  // What the run records as its validation data (--valid).
  std::string name() const { return set ? set->path() : recorded; }

  const Dataset* set = nullptr;
  StreamedBatches* stream = nullptr;
  std::string recorded;
};

}  // namespace enhanced
