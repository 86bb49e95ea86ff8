#include "enhanced/optimizer_config.h"

#include <cmath>

#include "enhanced/common.h"

namespace enhanced {

OptimizerKind parse_optimizer_kind(const std::string& text) {
  if (text == "sgd") return OptimizerKind::sgd;
  if (text == "adam") return OptimizerKind::adam;
  fail("unknown optimizer '", text, "' (expected sgd or adam)");
}

const char* to_string(OptimizerKind kind) { return kind == OptimizerKind::sgd ? "sgd" : "adam"; }

void OptimizerConfig::validate() const {
  if (!(learning_rate > 0) || !std::isfinite(learning_rate))
    fail("learning rate must be positive and finite, got ", learning_rate);
  if (!(momentum >= 0 && momentum < 1)) fail("momentum must be in [0, 1), got ", momentum);
  if (!(beta1 >= 0 && beta1 < 1)) fail("Adam beta1 must be in [0, 1), got ", beta1);
  if (!(beta2 >= 0 && beta2 < 1)) fail("Adam beta2 must be in [0, 1), got ", beta2);
  if (!(epsilon > 0) || !std::isfinite(epsilon)) fail("Adam epsilon must be positive and finite, got ", epsilon);
  if (!(clip_norm >= 0)) fail("--clip-norm must be >= 0 (0: off), got ", clip_norm);
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay))
    fail("--weight-decay must be >= 0 and finite (0: off), got ", weight_decay);
}

void check_step_learning_rate(float learning_rate, int64_t step) {
  if (!(learning_rate >= 0) || !std::isfinite(learning_rate))
    fail("learning rate of step ", step, " must be >= 0 and finite, got ", learning_rate);
}

bool rows_only(const OptimizerConfig& config) {
  if (config.lazy_embedding) return true;
  const bool table_decays = config.weight_decay > 0 && config.weight_decay_embedding;
  return config.kind == OptimizerKind::sgd && config.momentum == 0 && !table_decays;
}

std::vector<const char*> moment_names(const OptimizerConfig& config) {
  if (config.kind == OptimizerKind::adam) return {"m", "v"};
  if (config.momentum > 0) return {"m"};
  return {};
}

OptimizerState::OptimizerState(const OptimizerConfig& optimizer, const ModelConfig& model) : config(optimizer) {
  config.validate();
  for (size_t i = 0; i < moment_names(config).size(); ++i) moments.emplace_back(model);
}

}  // namespace enhanced
