// CudaModel: the CPU model step (network.cpp + Optimizer::step + zero_gradients) on one device.
#include "enhanced/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/layers.h"

namespace enhanced {

using cuda::DeviceBuffer;
using cuda::PinnedBuffer;

// Pointers into one device allocation, carved as ParameterBuffer is (parameter_layout offsets).
struct DeviceParameters {
  DeviceBuffer<float> data;
  float* embedding = nullptr;
  float* weight_ih = nullptr;
  float* weight_hh = nullptr;
  float* bias_ih = nullptr;
  float* bias_hh = nullptr;
  float* dense_weight = nullptr;
  float* dense_bias = nullptr;

  void allocate(const ModelConfig& config, cudaStream_t stream) {
    data.resize(parameter_count(config));
    ENHANCED_CUDA_CHECK(cudaMemsetAsync(data.data(), 0, data.bytes(), stream));
    for (const TensorSlot& slot : parameter_layout(config)) {
      float* at = data.data() + slot.offset;
      if (slot.name == "embedding.weight") embedding = at;
      else if (slot.name == "lstm.weight_ih_l0") weight_ih = at;
      else if (slot.name == "lstm.weight_hh_l0") weight_hh = at;
      else if (slot.name == "lstm.bias_ih_l0") bias_ih = at;
      else if (slot.name == "lstm.bias_hh_l0") bias_hh = at;
      else if (slot.name == "dense.weight") dense_weight = at;
      else if (slot.name == "dense.bias") dense_bias = at;
    }
  }
};

struct CudaModel::Impl {
  ModelConfig config;
  OptimizerConfig optimizer;
  int max_batch = 0;
  int64_t steps = 0;
  bool grads_dirty = false;  // grads hold a backward's values (zero them before the next)
  bool have_norm = false;
  double last_norm = 0;

  cuda::UniqueStream stream;
  cuda::UniqueCublas cublas;
  cuda::UniqueCudnn cudnn;
  std::unique_ptr<cuda::CudnnBiLstm> lstm;
  cuda::EmbeddingGradWorkspace embedding_workspace;

  DeviceParameters params, grads, first_moment, second_moment;

  // Activations (device), sized for max_batch.
  DeviceBuffer<float> x, y, pooled, logits, dlogits, sample_losses, dpooled, dy, dx;
  DeviceBuffer<int32_t> argmax;
  DeviceBuffer<double> scalars;  // [0] mean loss, [1] gradient norm, [2..258) norm partials
  DeviceBuffer<float> clip_scale;

  // The batch: one int32 block [offsets (P+1) | cur (P) | labels (B) | ids], pinned and device.
  PinnedBuffer<int32_t> staging;
  DeviceBuffer<int32_t> batch_ints;
  size_t id_capacity = 0;
  PinnedBuffer<double> scalars_host;  // loss, norm
  PinnedBuffer<float> logits_host;

  struct BatchView {
    int size = 0, positions = 0;
    int64_t ids = 0;
    const int32_t *offsets = nullptr, *cur = nullptr, *labels = nullptr, *identifiers = nullptr;
  };

  cudaStream_t s() const { return stream.get(); }
  int F() const { return config.pooled_features(); }
  size_t fixed_ints() const {
    const size_t P = static_cast<size_t>(max_batch) * config.seq_len;
    return 2 * P + 1 + static_cast<size_t>(max_batch);
  }

  cuda::StepRange range(bool rows_only) const {
    cuda::StepRange r;
    r.total = parameter_count(config);
    r.table = static_cast<size_t>(config.vocab_size) * config.embedding_dim;
    r.dim = config.embedding_dim;
    r.rows_only = rows_only;
    r.rows = embedding_workspace.touched_rows();
    r.row_count = embedding_workspace.touched_count();
    r.max_rows = embedding_workspace.entry_capacity();
    return r;
  }

  BatchView upload(const Batch& batch);
  void forward_pass(const BatchView& b, bool with_gradient);
  void clear_gradients();
  void backward_pass(const BatchView& b);
  void step();
  void finish(const BatchView& b, float* logits_out);
};

CudaModel::Impl::BatchView CudaModel::Impl::upload(const Batch& batch) {
  const ModelConfig& c = config;
  if (batch.seq_len != c.seq_len) fail("batch has T = ", batch.seq_len, ", the model expects T = ", c.seq_len);
  if (batch.size < 1 || batch.size > max_batch)
    fail("batch of ", batch.size, " samples; the CUDA model holds 1..", max_batch);
  const size_t P = static_cast<size_t>(batch.positions());
  if (batch.identifier_offsets.size() != P + 1 || batch.cur_word_ids.size() != P ||
      batch.labels.size() != static_cast<size_t>(batch.size) ||
      static_cast<size_t>(batch.identifier_offsets.back()) != batch.identifier_ids.size() ||
      batch.identifier_offsets.front() != 0)
    fail("internal: inconsistent batch arrays (B = ", batch.size, ", T = ", batch.seq_len, ")");
  // Out-of-range ids would fault on the device (and poison the context): check them here.
  const auto bad_id = [&](int32_t id) { return id < 0 || id >= c.vocab_size; };
  if (std::any_of(batch.identifier_ids.begin(), batch.identifier_ids.end(), bad_id) ||
      std::any_of(batch.cur_word_ids.begin(), batch.cur_word_ids.end(), bad_id))
    fail("batch has a token id outside [0, ", c.vocab_size, ")");
  if (std::any_of(batch.labels.begin(), batch.labels.end(), [&](int32_t l) { return l < 0 || l >= c.num_labels; }))
    fail("batch has a label outside [0, ", c.num_labels, ")");

  const size_t ids = batch.identifier_ids.size();
  if (ids > id_capacity) {  // rare: more identifier ids than any batch before
    ENHANCED_CUDA_CHECK(cudaStreamSynchronize(s()));
    id_capacity = ids + ids / 2;
    staging.resize(fixed_ints() + id_capacity);
    batch_ints.resize(fixed_ints() + id_capacity);
  }
  if (static_cast<int64_t>(P + ids) > embedding_workspace.entry_capacity()) {
    // Growing the workspace loses the previous batch's touched rows: clear their gradients first.
    clear_gradients();
    ENHANCED_CUDA_CHECK(cudaStreamSynchronize(s()));
  }
  embedding_workspace.reserve(static_cast<int>(P), static_cast<int64_t>(ids), c.vocab_size);
  // The staging buffer is free: every public call ends with a stream synchronisation.
  int32_t* at = staging.data();
  std::memcpy(at, batch.identifier_offsets.data(), (P + 1) * sizeof(int32_t));
  std::memcpy(at + P + 1, batch.cur_word_ids.data(), P * sizeof(int32_t));
  std::memcpy(at + 2 * P + 1, batch.labels.data(), batch.labels.size() * sizeof(int32_t));
  const size_t used = 2 * P + 1 + batch.labels.size();
  if (ids) std::memcpy(at + used, batch.identifier_ids.data(), ids * sizeof(int32_t));
  ENHANCED_CUDA_CHECK(cudaMemcpyAsync(batch_ints.data(), staging.data(), (used + ids) * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, s()));
  BatchView view;
  view.size = batch.size;
  view.positions = static_cast<int>(P);
  view.ids = static_cast<int64_t>(ids);
  view.offsets = batch_ints.data();
  view.cur = batch_ints.data() + P + 1;
  view.labels = batch_ints.data() + 2 * P + 1;
  view.identifiers = batch_ints.data() + used;
  return view;
}

void CudaModel::Impl::clear_gradients() {
  // Zeroes what the previous backward wrote: its touched rows (still in the workspace) and
  // everything after the embedding table.
  if (grads_dirty) cuda::zero_gradients(grads.data.data(), range(true), s());
  grads_dirty = false;
}

void CudaModel::Impl::forward_pass(const BatchView& b, bool with_gradient) {
  const ModelConfig& c = config;
  const int B = b.size, T = c.seq_len, D = c.embedding_dim, H = c.hidden;
  cuda::embedding_blend_forward(x.data(), b.offsets, b.identifiers, b.cur, params.embedding, b.positions, D, c.blend,
                                s());
  cuda::bilstm_forward(y.data(), *lstm, x.data(), params.weight_ih, params.weight_hh, params.bias_ih, params.bias_hh,
                       B, T, D, H, s());
  cuda::maxpool_forward(pooled.data(), argmax.data(), y.data(), B, T, 2 * H, c.pool, s());
  cuda::dense_forward(logits.data(), pooled.data(), params.dense_weight, params.dense_bias, B, F(), c.num_labels,
                      cublas, s());
  cuda::softmax_cross_entropy(with_gradient ? dlogits.data() : nullptr, sample_losses.data(), scalars.data(),
                              logits.data(), b.labels, B, c.num_labels, s());
}

void CudaModel::Impl::backward_pass(const BatchView& b) {
  const ModelConfig& c = config;
  const int B = b.size, T = c.seq_len, D = c.embedding_dim, H = c.hidden;
  // grads must start at zero; the new batch's sort below replaces the previous touched rows.
  clear_gradients();
  cuda::dense_backward(dpooled.data(), grads.dense_weight, grads.dense_bias, dlogits.data(), pooled.data(),
                       params.dense_weight, B, F(), c.num_labels, cublas, s());
  cuda::maxpool_backward(dy.data(), argmax.data(), dpooled.data(), B, T, 2 * H, c.pool, s());
  cuda::bilstm_backward(dx.data(), grads.weight_ih, grads.weight_hh, grads.bias_ih, grads.bias_hh, *lstm, y.data(),
                        dy.data(), x.data(), B, T, D, H, s());
  cuda::embedding_blend_backward(grads.embedding, embedding_workspace, dx.data(), b.offsets, b.identifiers, b.cur,
                                 b.positions, b.ids, D, c.blend, s());
  grads_dirty = true;
}

void CudaModel::Impl::step() {
  const OptimizerConfig& o = optimizer;
  double* loss = scalars.data();
  double* norm = scalars.data() + 1;
  double* partials = scalars.data() + 2;
  cuda::gradient_norm(norm, clip_scale.data(), partials, grads.data.data(), loss, range(true), o.clip_norm, s());
  ++steps;
  const float lr = o.learning_rate;
  if (o.kind == OptimizerKind::sgd) {
    // Plain SGD moves only rows with a gradient: skipping the rest is exact (as on the CPU).
    const bool rows_only = o.lazy_embedding || o.momentum == 0;
    cuda::sgd_step(params.data.data(), o.momentum > 0 ? first_moment.data.data() : nullptr, grads.data.data(),
                   clip_scale.data(), norm, range(rows_only), lr, o.momentum, steps == 1, s());
  } else {
    // optimizer.cpp's host arithmetic, bit for bit.
    const double t = static_cast<double>(steps);
    const float step_size = static_cast<float>(lr / (1.0 - std::pow(static_cast<double>(o.beta1), t)));
    const float bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(o.beta2), t)));
    cuda::adam_step(params.data.data(), first_moment.data.data(), second_moment.data.data(), grads.data.data(),
                    clip_scale.data(), norm, range(o.lazy_embedding), o.beta1, o.beta2, o.epsilon, step_size,
                    bias_correction2_sqrt, s());
  }
}

void CudaModel::Impl::finish(const BatchView& b, float* logits_out) {
  ENHANCED_CUDA_CHECK(cudaMemcpyAsync(scalars_host.data(), scalars.data(), 2 * sizeof(double), cudaMemcpyDeviceToHost,
                                      s()));
  const size_t logit_count = static_cast<size_t>(b.size) * config.num_labels;
  if (logits_out)
    ENHANCED_CUDA_CHECK(cudaMemcpyAsync(logits_host.data(), logits.data(), logit_count * sizeof(float),
                                        cudaMemcpyDeviceToHost, s()));
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(s()));
  if (logits_out) std::memcpy(logits_out, logits_host.data(), logit_count * sizeof(float));
}

CudaModel::CudaModel(const ModelConfig& config, const OptimizerConfig& optimizer, int max_batch, bool tf32)
    : impl_(std::make_unique<Impl>()) {
  config.validate();
  if (max_batch < 1) fail("CUDA model: max batch must be positive, got ", max_batch);
  Impl& m = *impl_;
  m.config = config;
  m.optimizer = optimizer;
  m.max_batch = max_batch;
  m.stream = cuda::make_stream();
  m.cublas = cuda::make_cublas(m.s(), tf32);
  m.cudnn = cuda::make_cudnn(m.s());
  const ModelConfig& c = config;
  const size_t P = static_cast<size_t>(max_batch) * c.seq_len;
  const size_t D = c.embedding_dim, H = c.hidden, L = c.num_labels;
  const size_t F = static_cast<size_t>(max_batch) * c.pooled_features();
  m.lstm = std::make_unique<cuda::CudnnBiLstm>(m.cudnn.get(), max_batch, c.seq_len, c.embedding_dim, c.hidden, tf32);
  m.params.allocate(c, m.s());
  m.grads.allocate(c, m.s());
  if (optimizer.kind == OptimizerKind::adam || optimizer.momentum > 0) m.first_moment.allocate(c, m.s());
  if (optimizer.kind == OptimizerKind::adam) m.second_moment.allocate(c, m.s());
  m.x.resize(P * D);
  m.y.resize(P * 2 * H);
  m.pooled.resize(F);
  m.argmax.resize(F);
  m.logits.resize(max_batch * L);
  m.dlogits.resize(max_batch * L);
  m.sample_losses.resize(max_batch);
  m.dpooled.resize(F);
  m.dy.resize(P * 2 * H);
  m.dx.resize(P * D);
  m.scalars.resize(2 + 256);
  m.clip_scale.resize(1);
  // Identifier ids: start with room for 4 per position; a batch with more grows the buffers once.
  m.id_capacity = 4 * P;
  m.staging.resize(m.fixed_ints() + m.id_capacity);
  m.batch_ints.resize(m.fixed_ints() + m.id_capacity);
  m.embedding_workspace.reserve(static_cast<int>(P), static_cast<int64_t>(m.id_capacity), c.vocab_size);
  m.scalars_host.resize(2);
  m.logits_host.resize(max_batch * L);
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(m.s()));
}

CudaModel::~CudaModel() {
  if (impl_ && impl_->stream.get()) static_cast<void>(cudaStreamSynchronize(impl_->stream.get()));
}
CudaModel::CudaModel(CudaModel&&) noexcept = default;
CudaModel& CudaModel::operator=(CudaModel&&) noexcept = default;

const ModelConfig& CudaModel::config() const { return impl_->config; }
int CudaModel::max_batch() const { return impl_->max_batch; }
int64_t CudaModel::optimizer_steps() const { return impl_->steps; }
double CudaModel::last_gradient_norm() const { return impl_->last_norm; }

namespace {
void check_same_model(const ModelConfig& model, const ParameterBuffer<float>& buffer, const char* what) {
  if (buffer.size() != parameter_count(model) || buffer.config.vocab_size != model.vocab_size ||
      buffer.config.embedding_dim != model.embedding_dim || buffer.config.hidden != model.hidden ||
      buffer.config.seq_len != model.seq_len || buffer.config.num_labels != model.num_labels ||
      buffer.config.pool != model.pool)
    fail("CUDA model: ", what, " buffer does not match the model's shape");
}
}  // namespace

void CudaModel::upload_parameters(const ParameterBuffer<float>& params) {
  check_same_model(impl_->config, params, "parameter");
  cuda::copy_to_device(impl_->params.data.data(), params.data.data(), params.size(), impl_->s());
}

void CudaModel::download_parameters(ParameterBuffer<float>& params) const {
  check_same_model(impl_->config, params, "parameter");
  cuda::copy_to_host(params.data.data(), impl_->params.data.data(), params.size(), impl_->s());
}

void CudaModel::download_gradients(ParameterBuffer<float>& grads) const {
  check_same_model(impl_->config, grads, "gradient");
  cuda::copy_to_host(grads.data.data(), impl_->grads.data.data(), grads.size(), impl_->s());
}

void CudaModel::upload_optimizer_state(const ParameterBuffer<float>* first, const ParameterBuffer<float>* second,
                                       int64_t steps) {
  Impl& m = *impl_;
  if (first) {
    if (!m.first_moment.data.size()) fail("CUDA model: this optimizer keeps no first moment / velocity");
    check_same_model(m.config, *first, "first moment");
    cuda::copy_to_device(m.first_moment.data.data(), first->data.data(), first->size(), m.s());
  }
  if (second) {
    if (!m.second_moment.data.size()) fail("CUDA model: this optimizer keeps no second moment");
    check_same_model(m.config, *second, "second moment");
    cuda::copy_to_device(m.second_moment.data.data(), second->data.data(), second->size(), m.s());
  }
  m.steps = steps;
}

void CudaModel::download_optimizer_state(ParameterBuffer<float>* first, ParameterBuffer<float>* second) const {
  const Impl& m = *impl_;
  if (first && m.first_moment.data.size()) {
    check_same_model(m.config, *first, "first moment");
    cuda::copy_to_host(first->data.data(), m.first_moment.data.data(), first->size(), m.s());
  }
  if (second && m.second_moment.data.size()) {
    check_same_model(m.config, *second, "second moment");
    cuda::copy_to_host(second->data.data(), m.second_moment.data.data(), second->size(), m.s());
  }
}

double CudaModel::train_step(const Batch& batch, float* logits_host) {
  Impl& m = *impl_;
  const Impl::BatchView view = m.upload(batch);
  m.forward_pass(view, true);
  m.backward_pass(view);
  m.step();
  m.finish(view, logits_host);
  const double loss = m.scalars_host.data()[0];
  const double norm = m.scalars_host.data()[1];
  if (!std::isfinite(loss) || !std::isfinite(norm)) --m.steps;  // the device skipped the update
  if (!std::isfinite(loss)) return loss;
  m.last_norm = norm;
  if (!std::isfinite(norm))
    fail("non-finite gradient (norm ", norm, ") at step ", m.steps + 1, "; weights left unchanged");
  return loss;
}

double CudaModel::compute_gradients(const Batch& batch, float* logits_host) {
  Impl& m = *impl_;
  const Impl::BatchView view = m.upload(batch);
  m.forward_pass(view, true);
  m.backward_pass(view);
  m.finish(view, logits_host);
  return m.scalars_host.data()[0];
}

double CudaModel::forward(const Batch& batch, float* logits_host) {
  Impl& m = *impl_;
  const Impl::BatchView view = m.upload(batch);
  m.forward_pass(view, false);
  m.finish(view, logits_host);
  return m.scalars_host.data()[0];
}

}  // namespace enhanced
