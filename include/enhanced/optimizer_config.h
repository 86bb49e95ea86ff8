// What an optimizer is (SGD with optional momentum, PyTorch semantics; Adam), the rules both
// devices follow (which moments it keeps, which embedding rows a step may skip) and its state:
// the moments and the step count, carved like the parameters (ParameterBuffer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enhanced/model.h"

namespace enhanced {

enum class OptimizerKind { sgd, adam };
OptimizerKind parse_optimizer_kind(const std::string& text);  // "sgd" | "adam"
const char* to_string(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adam;
  float learning_rate = 1e-3f;
  float momentum = 0.0f;  // SGD
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-7f;  // Adam (Keras defaults)
  bool lazy_embedding = false;
  float clip_norm = 0.0f;  // global gradient-norm clipping when > 0

  void validate() const;  // throws Error naming the flag
};

// A step's learning rate (a schedule's value) must be >= 0 and finite: throws Error naming the step.
void check_step_learning_rate(float learning_rate, int64_t step);

// Whether a step may visit only the embedding rows named in the batch: lazy updates, or plain
// SGD, which moves only rows with a gradient (so skipping the rest is exact, not lazy).
bool rows_only(const OptimizerConfig& config);

// The moments a step keeps, in state order: SGD with momentum its velocity "m"; Adam "m" and
// "v"; plain SGD none. The names are those of the saved state's tensors.
std::vector<const char*> moment_names(const OptimizerConfig& config);

// Moments (one ParameterBuffer each, moment_names order) and the number of steps taken.
struct OptimizerState {
  OptimizerConfig config;
  int64_t steps = 0;
  std::vector<ParameterBuffer<float>> moments;

  OptimizerState() = default;
  OptimizerState(const OptimizerConfig& optimizer, const ModelConfig& model);  // validates; zero moments
  ParameterBuffer<float>* moment(size_t index) { return index < moments.size() ? &moments[index] : nullptr; }
};

}  // namespace enhanced
