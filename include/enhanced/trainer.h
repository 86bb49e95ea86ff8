// The training loop behind enhanced-train: model set-up from data, pretrained table or
// checkpoint; batches from the loader; forward, backward, optimizer; metrics, progress,
// validation, atomic checkpoints and exact resumption; in-process hooks for a host (the Python
// extension) in training_observer.h.
#pragma once

#include "enhanced/batch_stream.h"
#include "enhanced/train_options.h"

namespace enhanced {

class Communicator;
class TrainingObserver;

// Runs the whole training; throws Error on bad input. Returns the process exit code.
// communicator: the ranks of a data-parallel run (every rank calls this with the same options);
// without one, this process alone. The data: options.data_path and valid_path.
int run_training(TrainOptions options);
int run_training(TrainOptions options, Communicator& communicator);

// The same run on datasets the caller holds (Dataset::open or Dataset::from_bytes; valid may be
// null, a set, or a stream of batches read a pass each validation), in the caller's process, with its hooks (observer, training_observer.h; may be null).
// options.data_path and valid_path are replaced by the datasets' names (path()), which the run
// state records; a resume (options.resume) trains on the datasets given again, and its checks
// (the data's batches an epoch, T, ids and labels against the model) hold them to the run's.
// Set options.handle_signals = false where the host owns SIGINT (the Python extension). One
// process only: a communicator of several ranks is an Error. Returns as run_training above, or
// kInterruptedExit after the observer's interrupt.
int run_training(TrainOptions options, const Dataset& train, ValidationData valid, TrainingObserver* observer);
int run_training(TrainOptions options, const Dataset& train, ValidationData valid, TrainingObserver* observer,
                 Communicator& communicator);

// The same run on a stream of batches (batch_stream.h: Model.fit on a generator or a
// tf.data.Dataset), read batch by batch as the steps take them. The model's shape comes from the
// options (--vocab-size and --num-labels are required) and the stream's first batch (T); the run
// records the stream's name as its data. What needs the whole set is refused: --class-weights
// balanced, and a resume (a stream cannot be replayed to the step reached). Epochs of whole
// passes have no known length: the run counts epochs, and a schedule over its length is refused.
int run_training(TrainOptions options, StreamedBatches& train, ValidationData valid, TrainingObserver* observer);

}  // namespace enhanced
