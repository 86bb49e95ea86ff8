// The training state file (DIR/optimizer.safetensors): the weights, the optimizer's moments and
// step count, the run's options and where it stands, written atomically in one file, so that
// --resume continues bit for bit and no crash can leave half of one step and half of another.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "enhanced/model.h"
#include "enhanced/optimizer_config.h"
#include "enhanced/safetensors.h"
#include "enhanced/trainer.h"

namespace enhanced {

// Where the run stands.
struct RunPosition {
  int64_t epoch = 0;           // epochs completed
  int64_t batch_in_epoch = 0;  // batches of the current epoch done
  int64_t step = 0;            // optimizer steps done
  double best_valid_loss = std::numeric_limits<double>::infinity();
};

void write_run_state(const std::string& path, const ParameterBuffer<float>& params, const OptimizerState& optimizer,
                     const TrainOptions& options, const RunPosition& position);

// Reading back, each checked against the file (errors name it).
std::string recorded_options(const SafetensorsReader& state);
RunPosition read_run_position(const SafetensorsReader& state);
// Moments and steps into `optimizer` (made for the recorded options).
void read_optimizer_state(OptimizerState& optimizer, const SafetensorsReader& state);

}  // namespace enhanced
