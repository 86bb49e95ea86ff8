// Checks of a training run's inputs, made before anything large is allocated, each one line
// naming the file or flag and the numbers. Called by the run's set-up (trainer.cpp) before the
// step loop (training_run.cpp) starts.
#pragma once

#include <cstdint>
#include <string>

#include "enhanced/dataset.h"
#include "enhanced/embedding_table.h"
#include "enhanced/model.h"
#include "enhanced/train_options.h"

namespace enhanced {

// The training set against --batch-size, and --valid: a batch larger than the training set is
// refused (every step would be one partial batch, so the batch size asked for would never be
// trained with, and the learning rate tuned for it would be wrong); an empty set is refused.
void check_run_datasets(const TrainOptions& options, const Dataset& train, const Dataset* valid);

// What is known of a raw --pretrained table's shape: --embedding-dim, --vocab-size and the
// data's ids (the rule is RawTableShape's).
RawTableShape raw_table_shape(const TrainOptions& options, const Dataset& train, const Dataset* valid);

// The run's model at --batch-size fits in this machine's memory (enhanced/memory.h), on the
// run's device (options.engine.device); resident: bytes of it already allocated (weights loaded from a file).
void check_run_memory(const ModelConfig& config, const TrainOptions& options, uint64_t resident);

// With --init-from or --resume, a model flag the user gave must agree with the saved model
// (`source` names it).
void check_model_flags(const TrainOptions& options, const ModelConfig& config, const std::string& source);

// The training data's T against the saved model's (--init-from, --resume: `source` names the
// checkpoint or the run); "<source>: checkpoint has T = .., <data> has T = ..".
void check_data_seq_len(const Dataset& data, const ModelConfig& config, const std::string& source);

// The run's label names (if any) name each of the model's labels exactly once: errors name the
// --label-names file (or, resumed without one, the run's recorded names).
void check_run_label_names(const TrainOptions& options, const ModelConfig& config);

// Every flag's own rule (check_field_values), then the controls that need each other: a
// schedule's own settings, and a validation set for everything that watches one.
void check_training_controls(const TrainOptions& options);

}  // namespace enhanced
