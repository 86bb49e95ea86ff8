// Where a training run draws its steps from: the batches of one epoch after another. Two kinds:
// BatchLoader (loader.h), a Dataset in a seeded order, and StreamedBatches (batch_stream.h), the
// batches a host hands over one at a time (Model.fit on a generator or a tf.data.Dataset),
// never held whole.
#pragma once

#include <cstdint>

#include "enhanced/batch.h"

namespace enhanced {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Batches an epoch, or 0 where an epoch is a pass over a stream whose length nobody knows
  // until it ends (the run then counts epochs, not steps).
  virtual int64_t batches_per_epoch() const = 0;
  // Begins epoch `epoch` at batch `first_batch` (a resume mid-epoch).
  virtual void start_epoch(int64_t epoch, int64_t first_batch = 0) = 0;
  // The next batch of the epoch, or nullptr at its end. Valid until the next call.
  virtual const Batch* next() = 0;
  // Whether the data ended before the epoch's planned batches (or a pass gave none): the run
  // stops after this epoch, as Keras stops when its input runs out.
  virtual bool ran_out() const { return false; }
  // Whether the last next() returned nullptr because the host was interrupted while it made the
  // batch (a Ctrl-C inside the user's generator): the run saves the step reached and ends as an
  // interrupt, not as the data's end.
  virtual bool interrupted() const { return false; }
};

}  // namespace enhanced
