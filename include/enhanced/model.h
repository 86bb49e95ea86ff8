// The model's shape, its parameters (one allocation carved into the checkpoint's named tensors) and
// the activations a training step keeps (caller-owned, sized once for the largest batch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enhanced/enum_names.h"
#include "enhanced/huge_pages.h"

namespace enhanced {

enum class BlendMode { mean, scalar_mean };  // docs/model.md: "mean" (per dimension) / "scalar-mean"
enum class PoolMode { feature, time };       // max over the 2H features (default) / over T

// Their names, one table each (enhanced/enum_names.h): "mean", "scalar-mean"; "feature", "time".
const EnumNames<BlendMode>& blend_modes();
const EnumNames<PoolMode>& pool_modes();
const char* to_string(BlendMode mode);
const char* to_string(PoolMode mode);
BlendMode parse_blend_mode(const std::string& text);  // Error "unknown blend mode ..." otherwise
PoolMode parse_pool_mode(const std::string& text);    // Error "unknown pooling ..." otherwise

// The largest D, H and L: the layers size a row (8H gates, D + H operands, L logits, panels
// rounded up) in int, which stays far from overflow below this; a model this wide would not fit
// any machine's memory anyway (a [4H, H] matrix alone is 2^50 floats), so nothing real is lost.
constexpr int kMaxModelWidth = 1 << 24;

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
  void validate() const;  // throws Error on a non-positive size or a width above kMaxModelWidth
};

struct Batch;

// The one check of a batch both engines make where a call hands them one (forward,
// compute_gradients, a training step), the whole batch before a data-parallel step takes its
// shard: its T is the model's, its size in 1..max_batch, its arrays consistent, every token id in
// [0, V) and every label in [0, L). A bad id would fault on a GPU and read out of bounds on the
// CPU. Throws Error naming what is wrong.
void check_batch(const Batch& batch, const ModelConfig& config, int max_batch);

// "This flag conflicts with the checkpoint": a model flag the user gave (given) must name what the
// saved model (`source`: a checkpoint, or the run being resumed) holds. Used by training
// (--init-from, --resume) and inference (enhanced-predict, enhanced-eval); throws Error
// "<flag> <value> conflicts with <source>, whose model has <saved>".
void check_flag_matches_model(const char* flag, bool given, const std::string& value, const std::string& saved,
                              const std::string& source);

// The pointers a carved parameter buffer gives the layers. Each direction pair's reverse tensor
// directly follows the forward one, so weight_ih (2, 4H, D) covers both directions.
enum class ParameterField { embedding, weight_ih, weight_hh, bias_ih, bias_hh, dense_weight, dense_bias, none };

// One named tensor inside the flat parameter buffer, and the pointer it starts (if any).
struct TensorSlot {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;  // in elements
  size_t numel = 0;
  ParameterField field = ParameterField::none;
};

// The checkpoint's named tensors in buffer order. Direction pairs are adjacent, so the two directions'
// input weights form one (8H, D) matrix and their biases one (8H) vector. Parameters, their
// gradients and the optimizer moments are all carved from this one table, on either device.
std::vector<TensorSlot> parameter_layout(const ModelConfig& config);
size_t parameter_count(const ModelConfig& config);

// Pointers into one buffer laid out by parameter_layout (host or device memory).
template <class Real>
struct ParameterTensors {
  Real* embedding = nullptr;     // (V, D)
  Real* weight_ih = nullptr;     // (2, 4H, D) forward then reverse
  Real* weight_hh = nullptr;     // (2, 4H, H)
  Real* bias_ih = nullptr;       // (2, 4H)
  Real* bias_hh = nullptr;       // (2, 4H)
  Real* dense_weight = nullptr;  // (L, F)
  Real* dense_bias = nullptr;    // (L)

  // Points each field at its slot of `base`, a buffer of parameter_count(config) elements.
  void carve(Real* base, const ModelConfig& config);
};

// Parameters, their gradients and optimizer moments all use this type: one host allocation with
// the layers' pointers into it.
template <class Real>
struct ParameterBuffer : ParameterTensors<Real> {
  ModelConfig config;
  std::vector<Real, HugePageAllocator<Real>> data;

  ParameterBuffer() = default;
  explicit ParameterBuffer(const ModelConfig& model_config);  // zero-filled
  ParameterBuffer(const ParameterBuffer& other);
  ParameterBuffer& operator=(const ParameterBuffer& other);
  ParameterBuffer(ParameterBuffer&&) noexcept = default;
  ParameterBuffer& operator=(ParameterBuffer&&) noexcept = default;

  size_t size() const { return data.size(); }
  size_t embedding_size() const { return static_cast<size_t>(config.vocab_size) * config.embedding_dim; }
};

// Keras-default initialisation (docs/model.md, "Initialisation"); the embedding is uniform(-0.05, 0.05)
// unless a pretrained table is copied in afterwards.
void initialize_parameters(ParameterBuffer<float>& params, uint64_t seed);

// The activations one training step keeps, sized for a batch of B: one allocation carved by
// activation_layout on either device. P = B * T positions, F = pooled_features().
enum class ActivationField {
  x, gates, cell, y, pooled, logits, dlogits, sample_losses, dpooled, dy, dx, lstm_workspace, dense_workspace
};

struct ActivationSlot {
  ActivationField field;
  size_t numel;
};

// Which of the LSTM's rows a device's step keeps. dense_output (cuDNN): the LSTM writes y and
// its backward reads a dense dy, and it keeps its own state for the backward (its reserve
// space), so there are no gates, cell or LSTM workspace rows. fused_pool (the CPU's): the LSTM
// keeps its gates, cells and workspace here and pools each h as it is produced, so there are no
// y or dy rows (B, T, 2H) each.
enum class LstmRows { dense_output, fused_pool };

// lstm_workspace, dense_workspace: elements the layers use beside their tensors (CPU:
// bilstm_workspace_size, dense_workspace_size; 0 where the device's layers keep their own).
std::vector<ActivationSlot> activation_layout(const ModelConfig& config, int batch, size_t lstm_workspace,
                                              size_t dense_workspace, LstmRows lstm_rows);

template <class Real>
struct ActivationTensors {
  Real* x = nullptr;              // (B, T, D) blended embeddings
  Real* gates = nullptr;          // (B, T, 8H) LSTM gates; overwritten by their gradients in backward
  Real* cell = nullptr;           // (B, T, 2H)
  Real* y = nullptr;              // (B, T, 2H) BiLSTM output (LstmRows::dense_output only)
  Real* pooled = nullptr;         // (B, F)
  Real* logits = nullptr;         // (B, L)
  Real* dlogits = nullptr;        // (B, L)
  Real* sample_losses = nullptr;  // (B)
  Real* dpooled = nullptr;        // (B, F)
  Real* dy = nullptr;             // (B, T, 2H) (LstmRows::dense_output only)
  Real* dx = nullptr;             // (B, T, D)
  Real* lstm_workspace = nullptr;   // bilstm_workspace_size
  Real* dense_workspace = nullptr;  // dense_workspace_size
  int32_t* argmax = nullptr;      // (B, F), its own int32 buffer

  // Points each field at its slot of `base` (activation_count(layout) elements, each slot
  // 256-byte aligned when base is: enhanced/carve.h); returns that count.
  size_t carve(Real* base, const std::vector<ActivationSlot>& layout);
};

size_t activation_count(const std::vector<ActivationSlot>& layout);

}  // namespace enhanced
