#include "enhanced/model.h"

#include <algorithm>
#include <cmath>

#include "enhanced/common.h"
#include "enhanced/random.h"

namespace enhanced {

const char* to_string(BlendMode mode) { return mode == BlendMode::mean ? "mean" : "scalar-mean"; }
const char* to_string(PoolMode mode) { return mode == PoolMode::feature ? "feature" : "time"; }

BlendMode parse_blend_mode(const std::string& text) {
  if (text == "mean") return BlendMode::mean;
  if (text == "scalar-mean") return BlendMode::scalar_mean;
  fail("unknown blend mode '", text, "' (expected mean or scalar-mean)");
}

PoolMode parse_pool_mode(const std::string& text) {
  if (text == "feature") return PoolMode::feature;
  if (text == "time") return PoolMode::time;
  fail("unknown pooling '", text, "' (expected feature or time)");
}

void ModelConfig::validate() const {
  if (vocab_size <= 0) fail("model: vocabulary size must be positive, got ", vocab_size);
  if (vocab_size > (int64_t{1} << 31)) fail("model: vocabulary size ", vocab_size, " does not fit int32 ids");
  if (embedding_dim <= 0) fail("model: embedding dim must be positive, got ", embedding_dim);
  if (hidden <= 0) fail("model: hidden size must be positive, got ", hidden);
  if (seq_len <= 0) fail("model: sequence length must be positive, got ", seq_len);
  if (num_labels <= 0) fail("model: number of labels must be positive, got ", num_labels);
}

std::vector<TensorSlot> parameter_layout(const ModelConfig& config) {
  const int64_t V = config.vocab_size, D = config.embedding_dim, H = config.hidden;
  const int64_t L = config.num_labels, F = config.pooled_features();
  std::vector<TensorSlot> slots = {
      {"embedding.weight", {V, D}},
      {"lstm.weight_ih_l0", {4 * H, D}},
      {"lstm.weight_ih_l0_reverse", {4 * H, D}},
      {"lstm.weight_hh_l0", {4 * H, H}},
      {"lstm.weight_hh_l0_reverse", {4 * H, H}},
      {"lstm.bias_ih_l0", {4 * H}},
      {"lstm.bias_ih_l0_reverse", {4 * H}},
      {"lstm.bias_hh_l0", {4 * H}},
      {"lstm.bias_hh_l0_reverse", {4 * H}},
      {"dense.weight", {L, F}},
      {"dense.bias", {L}},
  };
  size_t offset = 0;
  for (TensorSlot& slot : slots) {
    slot.numel = 1;
    for (int64_t extent : slot.shape) slot.numel *= static_cast<size_t>(extent);
    slot.offset = offset;
    offset += slot.numel;
  }
  return slots;
}

size_t parameter_count(const ModelConfig& config) {
  const std::vector<TensorSlot> slots = parameter_layout(config);
  return slots.back().offset + slots.back().numel;
}

template <class Real>
ParameterBuffer<Real>::ParameterBuffer(const ModelConfig& model_config)
    : config(model_config), data(parameter_count(model_config), Real(0)) {
  carve();
}

template <class Real>
ParameterBuffer<Real>::ParameterBuffer(const ParameterBuffer& other) : config(other.config), data(other.data) {
  carve();
}

template <class Real>
ParameterBuffer<Real>& ParameterBuffer<Real>::operator=(const ParameterBuffer& other) {
  if (this != &other) {
    config = other.config;
    data = other.data;
    carve();
  }
  return *this;
}

template <class Real>
void ParameterBuffer<Real>::carve() {
  embedding = tensor("embedding.weight");
  weight_ih = tensor("lstm.weight_ih_l0");
  weight_hh = tensor("lstm.weight_hh_l0");
  bias_ih = tensor("lstm.bias_ih_l0");
  bias_hh = tensor("lstm.bias_hh_l0");
  dense_weight = tensor("dense.weight");
  dense_bias = tensor("dense.bias");
}

template <class Real>
Real* ParameterBuffer<Real>::tensor(const std::string& name) {
  return const_cast<Real*>(static_cast<const ParameterBuffer&>(*this).tensor(name));
}

template <class Real>
const Real* ParameterBuffer<Real>::tensor(const std::string& name) const {
  for (const TensorSlot& slot : parameter_layout(config))
    if (slot.name == name) return data.data() + slot.offset;
  fail("no parameter named '", name, "'");
}

template struct ParameterBuffer<float>;
template struct ParameterBuffer<double>;

namespace {

void fill_uniform(float* out, size_t count, double limit, Random& random) {
  for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(random.uniform(-limit, limit));
}

// Keras Orthogonal on the (H, 4H) kernel = a (4H, H) matrix with orthonormal columns: QR of a
// normal matrix by modified Gram-Schmidt, columns signed by diag(R).
void fill_orthogonal(float* out, int rows, int cols, Random& random) {
  std::vector<double> a(static_cast<size_t>(rows) * cols);
  for (double& v : a) v = random.normal();
  for (int j = 0; j < cols; ++j) {
    for (int i = 0; i < j; ++i) {
      double dot = 0;
      for (int r = 0; r < rows; ++r) dot += a[r * cols + i] * a[r * cols + j];
      for (int r = 0; r < rows; ++r) a[r * cols + j] -= dot * a[r * cols + i];
    }
    double norm = 0;
    for (int r = 0; r < rows; ++r) norm += a[r * cols + j] * a[r * cols + j];
    norm = std::sqrt(norm);
    for (int r = 0; r < rows; ++r) a[r * cols + j] /= norm;  // diag(R) = norm > 0: sign already +
  }
  for (size_t i = 0; i < a.size(); ++i) out[i] = static_cast<float>(a[i]);
}

}  // namespace

void initialize_parameters(ParameterBuffer<float>& params, uint64_t seed) {
  const ModelConfig& c = params.config;
  const int H = c.hidden, D = c.embedding_dim, L = c.num_labels, F = c.pooled_features();
  Random random(seed);
  std::fill(params.data.begin(), params.data.end(), 0.0f);
  fill_uniform(params.embedding, params.embedding_size(), 0.05, random);
  for (int direction = 0; direction < 2; ++direction) {
    fill_uniform(params.weight_ih + static_cast<size_t>(direction) * 4 * H * D, static_cast<size_t>(4) * H * D,
                 std::sqrt(6.0 / (D + 4.0 * H)), random);
    fill_orthogonal(params.weight_hh + static_cast<size_t>(direction) * 4 * H * H, 4 * H, H, random);
    // Keras unit_forget_bias, placed in the recurrent bias as TensorFlow's cuDNN path does.
    std::fill_n(params.bias_hh + static_cast<size_t>(direction) * 4 * H + H, H, 1.0f);
  }
  fill_uniform(params.dense_weight, static_cast<size_t>(L) * F, std::sqrt(6.0 / (F + L)), random);
}

}  // namespace enhanced
