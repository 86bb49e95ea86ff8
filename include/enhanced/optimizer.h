// SGD (optional momentum, PyTorch semantics) and Adam over the whole parameter buffer in one
// loop. The embedding gradient is sparse: with lazy embedding updates only the rows named in
// the batch are visited, so a step's cost does not grow with V.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enhanced/model.h"
#include "enhanced/safetensors.h"

namespace enhanced {

enum class OptimizerKind { sgd, adam };
OptimizerKind parse_optimizer_kind(const std::string& text);
const char* to_string(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adam;
  float learning_rate = 1e-3f;
  float momentum = 0.0f;  // SGD
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-7f;  // Adam (Keras defaults)
  bool lazy_embedding = false;
  float clip_norm = 0.0f;  // global gradient-norm clipping when > 0
};

class Optimizer {
 public:
  Optimizer(const OptimizerConfig& config, const ModelConfig& model);

  // params -= update(grads). `touched_rows` are the sorted embedding rows named in the batch
  // (every other row's gradient is zero). Returns the global gradient norm before clipping.
  double step(ParameterBuffer<float>& params, const ParameterBuffer<float>& grads,
              const std::vector<int32_t>& touched_rows);

  const OptimizerConfig& config() const { return config_; }
  int64_t steps() const { return steps_; }

  // The moments (null when this optimizer keeps none), so a device model can load and return them.
  ParameterBuffer<float>* first_moment() { return first_moment_.data.empty() ? nullptr : &first_moment_; }
  ParameterBuffer<float>* second_moment() { return second_moment_.data.empty() ? nullptr : &second_moment_; }
  void set_steps(int64_t steps) { steps_ = steps; }

  // State for resuming: moments and step count as tensors "optimizer.<moment>.<param name>".
  void save_state(SafetensorsWriter& writer) const;
  void load_state(const SafetensorsReader& reader);

 private:
  // Whether the embedding's untouched rows can be skipped without changing the result.
  bool embedding_rows_only() const;

  OptimizerConfig config_;
  int64_t steps_ = 0;
  ParameterBuffer<float> first_moment_;   // SGD velocity or Adam m
  ParameterBuffer<float> second_moment_;  // Adam v (empty for SGD)
};

// Sets grads to zero where a step may have written: everything but the embedding, and the
// embedding's touched rows.
void zero_gradients(ParameterBuffer<float>& grads, const std::vector<int32_t>& touched_rows);

}  // namespace enhanced
