#include "train/run_state.h"

#include <cstdlib>
#include <cstring>

#include "enhanced/checkpoint.h"
#include "enhanced/common.h"
#include "train/run_options.h"

namespace enhanced {

namespace {

// The optimizer's tensors: "optimizer.steps", then "optimizer.<moment>.<parameter>".
void add_optimizer_state(SafetensorsWriter& writer, const OptimizerState& optimizer) {
  const uint64_t steps = static_cast<uint64_t>(optimizer.steps);
  writer.add("optimizer.steps", &steps, {1});
  writer.set_metadata("optimizer", to_string(optimizer.config.kind));
  const std::vector<const char*> names = moment_names(optimizer.config);
  for (size_t i = 0; i < optimizer.moments.size(); ++i) {
    const ParameterBuffer<float>& moment = optimizer.moments[i];
    for (const TensorSlot& slot : parameter_layout(moment.config))
      writer.add(cat("optimizer.", names[i], ".", slot.name), moment.data.data() + slot.offset, slot.shape);
  }
}

}  // namespace

void write_run_state(const std::string& path, const ParameterBuffer<float>& params, const OptimizerState& optimizer,
                     const TrainOptions& options, const RunPosition& position) {
  SafetensorsWriter writer;
  add_optimizer_state(writer, optimizer);
  add_model(writer, params, "model.");
  writer.set_metadata("run_options", run_options_text(options));
  writer.set_metadata("epoch", std::to_string(position.epoch));
  writer.set_metadata("batch_in_epoch", std::to_string(position.batch_in_epoch));
  writer.set_metadata("step", std::to_string(position.step));
  writer.set_metadata("best_valid_loss", exact_text(position.best_valid_loss));
  writer.write(path);
}

std::string recorded_options(const SafetensorsReader& state) { return state.metadata_value("run_options"); }

RunPosition read_run_position(const SafetensorsReader& state) {
  RunPosition position;
  position.epoch = metadata_integer(state, "epoch");
  position.batch_in_epoch = metadata_integer(state, "batch_in_epoch");
  position.step = metadata_integer(state, "step");
  const std::string best = state.metadata_value("best_valid_loss");
  char* end = nullptr;
  position.best_valid_loss = std::strtod(best.c_str(), &end);
  if (best.empty() || *end != '\0') fail(state.path(), ": metadata 'best_valid_loss' is not a number: '", best, "'");
  return position;
}

void read_optimizer_state(OptimizerState& optimizer, const SafetensorsReader& state) {
  if (state.metadata_value("optimizer") != to_string(optimizer.config.kind))
    fail(state.path(), ": optimizer state is for ", state.metadata_value("optimizer"), ", this run uses ",
         to_string(optimizer.config.kind));
  state.check_tensor("optimizer.steps", "U64", {1});
  optimizer.steps = static_cast<int64_t>(state.uint64s("optimizer.steps")[0]);
  const std::vector<const char*> names = moment_names(optimizer.config);
  for (size_t i = 0; i < optimizer.moments.size(); ++i) {
    ParameterBuffer<float>& moment = optimizer.moments[i];
    for (const TensorSlot& slot : parameter_layout(moment.config)) {
      const std::vector<float> values = state.floats(cat("optimizer.", names[i], ".", slot.name), slot.shape);
      std::memcpy(moment.data.data() + slot.offset, values.data(), values.size() * sizeof(float));
    }
  }
}

}  // namespace enhanced
