#include "train/run_state.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "enhanced/checkpoint.h"
#include "enhanced/common.h"
#include "train/run_options.h"

namespace enhanced {

void RunningTotals::add(const TrainTotals& t) {
  loss += t.loss_sum;
  correct += t.correct;
  samples += t.samples;
}

double RunningTotals::mean_loss() const { return loss / static_cast<double>(std::max<int64_t>(samples, 1)); }

double RunningTotals::accuracy() const {
  return static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(samples, 1));
}

namespace {

using nlohmann::json;

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

json totals_json(const RunningTotals& t) { return json::array({exact_text(t.loss), t.correct, t.samples}); }

json validations_json(const std::vector<Validation>& validations) {
  json out = json::array();
  for (const Validation& v : validations)
    out.push_back(json::array({v.step, exact_text(v.loss), exact_text(v.accuracy), exact_text(v.f1)}));
  return out;
}

// A double written by exact_text; `finite`: it must be (validations may record a NaN loss).
double exact_number(const json& text, const std::string& what, bool finite = true) {
  const std::string value = text.get<std::string>();
  char* end = nullptr;
  const double number = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || (finite && !std::isfinite(number)))
    fail(what, " is not a", finite ? " finite" : "", " number: '", value, "'");
  return number;
}

int64_t count(const json& value, const std::string& what) {
  const int64_t number = value.get<int64_t>();
  if (number < 0) fail(what, " is negative: ", number);
  return number;
}

// The metadata the state file's reader needs as JSON, or `fallback` when a run written before
// the field existed lacks it.
json metadata_json(const SafetensorsReader& state, const std::string& key, const json& fallback) {
  if (!state.metadata().count(key)) return fallback;
  try {
    return json::parse(state.metadata_value(key));
  } catch (const json::exception& e) {
    fail(state.path(), ": metadata '", key, "' is not JSON (", e.what(), ")");
  }
}

RunningTotals read_totals(const SafetensorsReader& state, const std::string& key) {
  const json j = metadata_json(state, key, json::array({exact_text(0), 0, 0}));
  const std::string what = cat(state.path(), ": metadata '", key, "'");
  if (!j.is_array() || j.size() != 3) fail(what, " must hold [loss, correct, samples]");
  RunningTotals t{exact_number(j[0], what + " loss"), count(j[1], what + " correct"), count(j[2], what + " samples")};
  if (t.correct > t.samples || t.loss < 0) fail(what, " is inconsistent: ", j.dump());
  return t;
}

std::vector<Validation> read_validations(const SafetensorsReader& state, int64_t step) {
  const json j = metadata_json(state, "validations", json::array());
  const std::string what = cat(state.path(), ": metadata 'validations'");
  if (!j.is_array()) fail(what, " must be a list");
  std::vector<Validation> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string item = cat(what, " item ", i);
    if (!j[i].is_array() || j[i].size() != 4) fail(item, " must hold [step, loss, accuracy, f1]");
    const Validation v{count(j[i][0], item + " step"), exact_number(j[i][1], item + " loss", false),
                       exact_number(j[i][2], item + " accuracy"), exact_number(j[i][3], item + " f1")};
    if (v.step > step || (!out.empty() && v.step < out.back().step))
      fail(item, ": step ", v.step, " is out of order (the run is at step ", step, ")");
    out.push_back(v);
  }
  return out;
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
  writer.set_metadata("interval_totals", totals_json(position.interval).dump());
  writer.set_metadata("epoch_totals", totals_json(position.epoch_totals).dump());
  writer.set_metadata("validations", validations_json(position.validations).dump());
  writer.set_metadata("metrics_lines", std::to_string(position.metrics_lines));
  writer.write(path);
}

std::string recorded_options(const SafetensorsReader& state) { return state.metadata_value("run_options"); }

RunPosition read_run_position(const SafetensorsReader& state) {
  RunPosition position;
  try {
    for (const auto& [key, field] : {std::pair<const char*, int64_t*>{"epoch", &position.epoch},
                                     {"batch_in_epoch", &position.batch_in_epoch},
                                     {"step", &position.step}}) {
      *field = metadata_integer(state, key);
      if (*field < 0) fail(state.path(), ": metadata '", key, "' is negative: ", *field);
    }
    if (state.metadata().count("metrics_lines")) {
      position.metrics_lines = metadata_integer(state, "metrics_lines");
      if (position.metrics_lines < 0) fail(state.path(), ": metadata 'metrics_lines' is negative: ", position.metrics_lines);
    }
    position.interval = read_totals(state, "interval_totals");
    position.epoch_totals = read_totals(state, "epoch_totals");
    position.validations = read_validations(state, position.step);
  } catch (const json::exception& e) {
    fail(state.path(), ": the run's position is malformed (", e.what(), ")");
  }
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
    const bool second_moment = std::strcmp(names[i], "v") == 0;
    for (const TensorSlot& slot : parameter_layout(moment.config)) {
      const std::string name = cat("optimizer.", names[i], ".", slot.name);
      const std::vector<float> values = state.floats(name, slot.shape);
      for (size_t k = 0; k < values.size(); ++k)
        if (!std::isfinite(values[k]) || (second_moment && values[k] < 0))
          fail(state.path(), ": tensor '", name, "' element ", k, " is ", values[k],
               second_moment ? " (a second moment must be finite and non-negative)" : " (must be finite)");
      if (!values.empty()) std::memcpy(moment.data.data() + slot.offset, values.data(), values.size() * sizeof(float));
    }
  }
}

}  // namespace enhanced
