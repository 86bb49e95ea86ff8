// One validation of a training run: the validation set evaluated (unweighted, every rank its
// shard) after a step, its result into that step's metrics line and onto the progress line.
// `valid`: its batches, the epoch begun (a set's loader, or a pass of a stream).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "enhanced/communicator.h"
#include "enhanced/batch_source.h"
#include "enhanced/engine.h"
#include "enhanced/progress.h"
#include "enhanced/training_observer.h"
#include "train/schedule.h"

namespace enhanced {

// line gains valid_loss, valid_accuracy and valid_f1. observer (nullable): told Keras's
// on_test_begin, on_test_batch_begin/end and on_test_end around the evaluation.
Validation validate_step(Engine& engine, BatchSource& valid, Communicator& communicator,
                         int64_t step, nlohmann::json& line, ProgressLine& progress,
                         TrainingObserver* observer = nullptr);

}  // namespace enhanced
