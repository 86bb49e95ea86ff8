// The training loop behind enhanced-train: model set-up from data, pretrained table or
// checkpoint; batches from the loader; forward, backward, optimizer; metrics, progress,
// validation, atomic checkpoints and exact resumption.
#pragma once

#include "enhanced/train_options.h"

namespace enhanced {

class Communicator;

// Runs the whole training; throws Error on bad input. Returns the process exit code.
// communicator: the ranks of a data-parallel run (every rank calls this with the same options);
// without one, this process alone.
int run_training(TrainOptions options);
int run_training(TrainOptions options, Communicator& communicator);

}  // namespace enhanced
