// What enhanced-eval and enhanced-predict share: a checkpoint's model made ready for a data set
// (with or without the engine's metadata), and the engine that runs it over the set.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "enhanced/dataset.h"
#include "enhanced/engine.h"
#include "enhanced/model.h"

namespace enhanced {

// The apps' --blend and --pool, "" when not given.
struct ModelFlags {
  std::string blend, pool;
};

// The model of `checkpoint` for `data`. A checkpoint with the engine's metadata must agree with
// the flags given; one without (load_checkpoint's bare case) takes them, mean and feature by
// default, and the data's T. Then the data must fit the model: its T and ids, and its labels
// where `labels_used`. Errors name the files and both numbers. `label_names` (optional): the
// checkpoint's label names (enhanced/label_names.h), empty when it has none.
ParameterBuffer<float> load_model_for_data(const std::string& checkpoint, const ModelFlags& flags, const Dataset& data,
                                           bool labels_used, std::vector<std::string>* label_names = nullptr);

struct InferenceEngine {
  std::unique_ptr<Engine> engine;
  int batch = 0;  // the batch it runs: --batch-size, at most the set's size
};

// The engine for inference on `data`, as the app's engine flags chose it (its CPU threads are
// configured here). A batch larger than the set is clamped, unlike in training: the figures do
// not depend on how the set is cut into batches, and the engine need hold no more than the set.
// The memory is checked first.
InferenceEngine make_inference_engine(ParameterBuffer<float>& params, const Dataset& data, int batch_size,
                                      const EngineChoice& engine);

}  // namespace enhanced
