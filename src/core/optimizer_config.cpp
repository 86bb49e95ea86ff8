#include "enhanced/optimizer_config.h"

#include <cmath>

#include "enhanced/common.h"
#include "enhanced/enum_names.h"

namespace enhanced {

// One row an optimizer. A new one adds its kind (enhanced/optimizer_config.h: the enum and its
// scalars' OptimizerConfig fields, whose initialisers are the defaults), a row here, and its
// update in steps/optimizer_steps.h (a struct like SgdUpdate, listed in steps::Updates); the flags,
// the run options, validation, the moments and both devices' loops follow from these.
const std::vector<OptimizerInfo>& optimizers() {
  using Rule = OptimizerScalar::Rule;
  static const std::vector<OptimizerInfo> rows = {
      {OptimizerKind::sgd, "sgd", {"m"}, &OptimizerConfig::momentum,
       {{"momentum", "--momentum", "SGD momentum", "momentum", &OptimizerConfig::momentum, Rule::unit_interval, false}},
       0.01f},
      {OptimizerKind::adam, "adam", {"m", "v"}, nullptr,
       {{"beta1", "--beta1", "Adam beta1", "Adam beta1", &OptimizerConfig::beta1, Rule::unit_interval, false},
        {"beta2", "--beta2", "Adam beta2", "Adam beta2", &OptimizerConfig::beta2, Rule::unit_interval, false},
        {"epsilon", "--epsilon", "Adam epsilon", "Adam epsilon", &OptimizerConfig::epsilon, Rule::positive, false}},
       1e-3f},
  };
  return rows;
}

const OptimizerInfo& optimizer_info(OptimizerKind kind) {
  for (const OptimizerInfo& row : optimizers())
    if (row.kind == kind) return row;
  fail("internal: optimizer kind ", static_cast<int>(kind), " has no row in optimizers()");
}

std::vector<std::string> optimizer_names() {
  std::vector<std::string> names;
  for (const OptimizerInfo& row : optimizers()) names.emplace_back(row.name);
  return names;
}

std::string optimizer_names_text() { return names_text(optimizer_names()); }

OptimizerKind parse_optimizer_kind(const std::string& text) {
  for (const OptimizerInfo& row : optimizers())
    if (text == row.name) return row.kind;
  fail("unknown optimizer '", text, "' (expected ", optimizer_names_text(), ")");
}

const char* to_string(OptimizerKind kind) { return optimizer_info(kind).name; }

void OptimizerConfig::validate() const {
  if (!(learning_rate > 0) || !std::isfinite(learning_rate))
    fail("learning rate must be positive and finite, got ", learning_rate);
  for (const OptimizerInfo& row : optimizers())
    for (const OptimizerScalar& scalar : row.scalars) {
      const float value = this->*scalar.field;
      if (scalar.rule == OptimizerScalar::Rule::unit_interval && !(value >= 0 && value < 1))
        fail(scalar.label, " must be in [0, 1), got ", value);
      if (scalar.rule == OptimizerScalar::Rule::positive && (!(value > 0) || !std::isfinite(value)))
        fail(scalar.label, " must be positive and finite, got ", value);
    }
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
  return moment_names(config).empty() && !table_decays;
}

std::vector<const char*> moment_names(const OptimizerConfig& config) {
  const OptimizerInfo& row = optimizer_info(config.kind);
  if (row.moments_when && !(config.*row.moments_when > 0)) return {};
  return row.moments;
}

OptimizerState::OptimizerState(const OptimizerConfig& optimizer, const ModelConfig& model) : config(optimizer) {
  config.validate();
  for (size_t i = 0; i < moment_names(config).size(); ++i) moments.emplace_back(model);
}

}  // namespace enhanced
