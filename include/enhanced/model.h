// The model's shape, its parameters (one allocation carved into the SPEC's named tensors) and
// the activations a training step keeps (caller-owned, sized once for the largest batch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enhanced/huge_pages.h"

namespace enhanced {

enum class BlendMode { mean, scalar_mean };  // SPEC "mean" (per dimension) / "scalar-mean"
enum class PoolMode { feature, time };       // max over the 2H features (default) / over T

const char* to_string(BlendMode mode);
const char* to_string(PoolMode mode);
BlendMode parse_blend_mode(const std::string& text);  // "mean" | "scalar-mean"
PoolMode parse_pool_mode(const std::string& text);    // "feature" | "time"

struct ModelConfig {
  int64_t vocab_size = 0;  // V
  int embedding_dim = 32;  // D
  int hidden = 128;        // H, per direction
  int seq_len = 400;       // T
  int num_labels = 0;      // L
  BlendMode blend = BlendMode::mean;
  PoolMode pool = PoolMode::feature;

  // Inputs of the dense layer: T with feature pooling, 2H with time pooling.
  int pooled_features() const { return pool == PoolMode::feature ? seq_len : 2 * hidden; }
  void validate() const;  // throws Error on a non-positive size
};

// One named tensor inside the flat parameter buffer.
struct TensorSlot {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;  // in elements
  size_t numel = 0;
};

// The SPEC's tensors in buffer order. Direction pairs are adjacent, so the two directions'
// input weights form one (8H, D) matrix and their biases one (8H) vector.
std::vector<TensorSlot> parameter_layout(const ModelConfig& config);
size_t parameter_count(const ModelConfig& config);

// Parameters, their gradients and optimizer moments all use this type: one allocation with
// pointers into it by name.
template <class Real>
struct ParameterBuffer {
  ModelConfig config;
  std::vector<Real, HugePageAllocator<Real>> data;
  Real* embedding = nullptr;     // (V, D)
  Real* weight_ih = nullptr;     // (2, 4H, D) forward then reverse
  Real* weight_hh = nullptr;     // (2, 4H, H)
  Real* bias_ih = nullptr;       // (2, 4H)
  Real* bias_hh = nullptr;       // (2, 4H)
  Real* dense_weight = nullptr;  // (L, F)
  Real* dense_bias = nullptr;    // (L)

  ParameterBuffer() = default;
  explicit ParameterBuffer(const ModelConfig& model_config);  // zero-filled
  ParameterBuffer(const ParameterBuffer& other);
  ParameterBuffer& operator=(const ParameterBuffer& other);
  ParameterBuffer(ParameterBuffer&&) noexcept = default;
  ParameterBuffer& operator=(ParameterBuffer&&) noexcept = default;

  Real* tensor(const std::string& name);
  const Real* tensor(const std::string& name) const;
  size_t size() const { return data.size(); }
  size_t embedding_size() const { return static_cast<size_t>(config.vocab_size) * config.embedding_dim; }

 private:
  void carve();
};

// Keras-default initialisation (SPEC "Initialisation"); the embedding is uniform(-0.05, 0.05)
// unless a pretrained table is copied in afterwards.
void initialize_parameters(ParameterBuffer<float>& params, uint64_t seed);

}  // namespace enhanced
