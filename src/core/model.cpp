#include "enhanced/model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "enhanced/batch.h"
#include "enhanced/carve.h"
#include "enhanced/common.h"
#include "enhanced/random.h"

namespace enhanced {

const EnumNames<BlendMode>& blend_modes() {
  static const EnumNames<BlendMode> table{{BlendMode::mean, "mean"}, {BlendMode::scalar_mean, "scalar-mean"}};
  return table;
}

const EnumNames<PoolMode>& pool_modes() {
  static const EnumNames<PoolMode> table{{PoolMode::feature, "feature"}, {PoolMode::time, "time"}};
  return table;
}

const char* to_string(BlendMode mode) { return name_of(blend_modes(), mode); }
const char* to_string(PoolMode mode) { return name_of(pool_modes(), mode); }

BlendMode parse_blend_mode(const std::string& text) {
  if (const EnumName<BlendMode>* row = find_name(blend_modes(), text)) return row->value;
  fail("unknown blend mode '", text, "' (expected ", names_text(blend_modes()), ")");
}

PoolMode parse_pool_mode(const std::string& text) {
  if (const EnumName<PoolMode>* row = find_name(pool_modes(), text)) return row->value;
  fail("unknown pooling '", text, "' (expected ", names_text(pool_modes()), ")");
}

void ModelConfig::validate() const {
  if (vocab_size <= 0) fail("model: vocabulary size must be positive, got ", vocab_size);
  if (vocab_size > (int64_t{1} << 31)) fail("model: vocabulary size ", vocab_size, " does not fit int32 ids");
  if (embedding_dim <= 0) fail("model: embedding dim must be positive, got ", embedding_dim);
  if (hidden <= 0) fail("model: hidden size must be positive, got ", hidden);
  if (seq_len <= 0) fail("model: sequence length must be positive, got ", seq_len);
  if (num_labels <= 0) fail("model: number of labels must be positive, got ", num_labels);
  for (const auto& [what, value] : {std::pair{"embedding dim", embedding_dim}, std::pair{"hidden size", hidden},
                                    std::pair{"number of labels", num_labels}})
    if (value > kMaxModelWidth) fail("model: ", what, " ", value, " is above the largest, ", kMaxModelWidth);
}

void check_batch(const Batch& batch, const ModelConfig& config, int max_batch) {
  if (batch.seq_len != config.seq_len)
    fail("batch has T = ", batch.seq_len, ", the model expects T = ", config.seq_len);
  if (batch.size < 1 || batch.size > max_batch) fail("batch of ", batch.size, " samples; the engine holds 1..", max_batch);
  const size_t P = static_cast<size_t>(batch.positions());
  if (batch.identifier_offsets.size() != P + 1 || batch.cur_word_ids.size() != P ||
      batch.labels.size() != static_cast<size_t>(batch.size) ||
      static_cast<size_t>(batch.identifier_offsets.back()) != batch.identifier_ids.size() ||
      batch.identifier_offsets.front() != 0 ||
      !std::is_sorted(batch.identifier_offsets.begin(), batch.identifier_offsets.end()))
    fail("internal: inconsistent batch arrays (B = ", batch.size, ", T = ", batch.seq_len, ")");
  const auto bad_id = [&](int32_t id) { return id < 0 || id >= config.vocab_size; };
  if (std::any_of(batch.identifier_ids.begin(), batch.identifier_ids.end(), bad_id) ||
      std::any_of(batch.cur_word_ids.begin(), batch.cur_word_ids.end(), bad_id))
    fail("batch has a token id outside [0, ", config.vocab_size, ")");
  if (std::any_of(batch.labels.begin(), batch.labels.end(), [&](int32_t l) { return l < 0 || l >= config.num_labels; }))
    fail("batch has a label outside [0, ", config.num_labels, ")");
}

void check_flag_matches_model(const char* flag, bool given, const std::string& value, const std::string& saved,
                              const std::string& source) {
  if (given && value != saved) fail(flag, " ", value, " conflicts with ", source, ", whose model has ", saved);
}

std::vector<TensorSlot> parameter_layout(const ModelConfig& config) {
  const int64_t V = config.vocab_size, D = config.embedding_dim, H = config.hidden;
  const int64_t L = config.num_labels, F = config.pooled_features();
  using Field = ParameterField;
  std::vector<TensorSlot> slots = {
      {"embedding.weight", {V, D}, 0, 0, Field::embedding},
      {"lstm.weight_ih_l0", {4 * H, D}, 0, 0, Field::weight_ih},
      {"lstm.weight_ih_l0_reverse", {4 * H, D}},
      {"lstm.weight_hh_l0", {4 * H, H}, 0, 0, Field::weight_hh},
      {"lstm.weight_hh_l0_reverse", {4 * H, H}},
      {"lstm.bias_ih_l0", {4 * H}, 0, 0, Field::bias_ih},
      {"lstm.bias_ih_l0_reverse", {4 * H}},
      {"lstm.bias_hh_l0", {4 * H}, 0, 0, Field::bias_hh},
      {"lstm.bias_hh_l0_reverse", {4 * H}},
      {"dense.weight", {L, F}, 0, 0, Field::dense_weight},
      {"dense.bias", {L}, 0, 0, Field::dense_bias},
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
void ParameterTensors<Real>::carve(Real* base, const ModelConfig& config) {
  for (const TensorSlot& slot : parameter_layout(config)) {
    Real* at = base + slot.offset;
    switch (slot.field) {
      case ParameterField::embedding: embedding = at; break;
      case ParameterField::weight_ih: weight_ih = at; break;
      case ParameterField::weight_hh: weight_hh = at; break;
      case ParameterField::bias_ih: bias_ih = at; break;
      case ParameterField::bias_hh: bias_hh = at; break;
      case ParameterField::dense_weight: dense_weight = at; break;
      case ParameterField::dense_bias: dense_bias = at; break;
      case ParameterField::none: break;
    }
  }
}

template <class Real>
ParameterBuffer<Real>::ParameterBuffer(const ModelConfig& model_config) : config(model_config) {
  const size_t n = parameter_count(model_config);
  allocating(cat("allocating ", n, " values (", (n * sizeof(Real) + (1 << 20) - 1) >> 20,
                 " MiB) for the model's parameters, their gradients or a moment"),
             [&] { data.assign(n, Real(0)); });
  this->carve(data.data(), config);
}

template <class Real>
ParameterBuffer<Real>::ParameterBuffer(const ParameterBuffer& other)
    : ParameterTensors<Real>(), config(other.config), data(other.data) {
  this->carve(data.data(), config);
}

template <class Real>
ParameterBuffer<Real>& ParameterBuffer<Real>::operator=(const ParameterBuffer& other) {
  if (this != &other) {
    config = other.config;
    data = other.data;
    this->carve(data.data(), config);
  }
  return *this;
}

std::vector<ActivationSlot> activation_layout(const ModelConfig& config, int batch, size_t lstm_workspace,
                                              size_t dense_workspace, LstmRows lstm_rows) {
  const size_t P = static_cast<size_t>(batch) * config.seq_len;
  const size_t D = config.embedding_dim, H = config.hidden, L = config.num_labels;
  const size_t F = static_cast<size_t>(batch) * config.pooled_features(), B = static_cast<size_t>(batch);
  // state: 1 where the gates, cells and LSTM workspace are rows here; dense: 1 where y and dy are.
  const size_t state = lstm_rows == LstmRows::fused_pool ? 1 : 0, dense = 1 - state;
  using Field = ActivationField;
  return {{Field::x, P * D},
          {Field::gates, state * P * 8 * H},
          {Field::cell, state * P * 2 * H},
          {Field::y, dense * P * 2 * H},
          {Field::pooled, F},
          {Field::logits, B * L},
          {Field::dlogits, B * L},
          {Field::sample_losses, B},
          {Field::dpooled, F},
          {Field::dy, dense * P * 2 * H},
          {Field::dx, P * D},
          {Field::lstm_workspace, state * lstm_workspace},
          {Field::dense_workspace, dense_workspace}};
}

namespace {
// Each activation starts on a carve boundary (enhanced/carve.h), as separate allocations would.
// Counted in floats: a double activation's pieces are twice as far apart, as aligned.
size_t aligned(size_t elements) { return carved_count(elements, sizeof(float)); }
}  // namespace

size_t activation_count(const std::vector<ActivationSlot>& layout) {
  size_t total = 0;
  for (const ActivationSlot& slot : layout) total += aligned(slot.numel);
  return total;
}

template <class Real>
size_t ActivationTensors<Real>::carve(Real* base, const std::vector<ActivationSlot>& layout) {
  size_t offset = 0;
  for (const ActivationSlot& slot : layout) {
    Real* at = slot.numel ? base + offset : nullptr;  // an empty slot must not alias the next one
    switch (slot.field) {
      case ActivationField::x: x = at; break;
      case ActivationField::gates: gates = at; break;
      case ActivationField::cell: cell = at; break;
      case ActivationField::y: y = at; break;
      case ActivationField::pooled: pooled = at; break;
      case ActivationField::logits: logits = at; break;
      case ActivationField::dlogits: dlogits = at; break;
      case ActivationField::sample_losses: sample_losses = at; break;
      case ActivationField::dpooled: dpooled = at; break;
      case ActivationField::dy: dy = at; break;
      case ActivationField::dx: dx = at; break;
      case ActivationField::lstm_workspace: lstm_workspace = at; break;
      case ActivationField::dense_workspace: dense_workspace = at; break;
    }
    offset += aligned(slot.numel);
  }
  return offset;
}

template struct ActivationTensors<float>;
template struct ActivationTensors<double>;
template struct ParameterTensors<float>;
template struct ParameterTensors<double>;
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
