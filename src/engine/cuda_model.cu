// CudaModel: the CPU engine's step (cpu_model.cpp: the model, optimizer_step, zero_gradients) on one device,
// pipelined: batch uploads on a copy stream, steps on the compute stream, CUDA graph replay. This
// file holds its public members; the step pipeline is cuda_model_step.cu, the state cuda_model_impl.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <vector>

#include "engine/cuda_model_impl.h"
#include "enhanced/data_parallel.h"
#include "steps/softmax_xent_steps.h"

namespace enhanced {

namespace {
// --precision on this GPU: fp32 always; bf16 needs compute capability 8.0 (cuDNN 9 refuses
// bfloat16 RNN data with FP32 math below it, and cuBLAS's bfloat16 GEMMs need it too);
// bf16-emulated is the CPU's reference path.
void check_precision(Precision precision) {
  if (precision == Precision::bf16_emulated)
    fail("--precision bf16-emulated is the CPU's reference path (--device cpu); on CUDA use --precision bf16 "
         "(bfloat16 cuDNN and cuBLAS) or fp32");
  if (precision != Precision::bf16) return;
  int device = 0, major = 0, minor = 0;
  ENHANCED_CUDA_CHECK(cudaGetDevice(&device));
  ENHANCED_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  ENHANCED_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major < 8)
    fail("--precision bf16 on CUDA needs a GPU of compute capability 8.0 or later (Ampere); this one is ", major, ".",
         minor, ": use --precision fp32");
}
}  // namespace

CudaModel::CudaModel(const ModelConfig& config, const OptimizerConfig& optimizer, int max_batch,
                     const CudaOptions& options, const std::vector<float>& class_weights, Precision precision,
                     Communicator* data_parallel)
    : impl_(std::make_unique<Impl>()) {
  config.validate();
  check_class_weights(class_weights, config.num_labels);
  if (max_batch < 1) fail("CUDA model: max batch must be positive, got ", max_batch);
  check_precision(precision);
  Impl& m = *impl_;
  m.config = config;
  m.optimizer = optimizer;
  m.options = options;
  m.precision = precision;
  m.max_batch = max_batch;
  m.stream = cuda::make_stream();
  m.copy_stream = cuda::make_stream();
  m.cublas = cuda::make_cublas(m.s(), options.tf32);
  // An explicit cuBLAS workspace: nothing for cuBLAS to allocate inside a captured step.
  m.cublas_workspace.resize(kCublasWorkspaceBytes);
  ENHANCED_CUBLAS_CHECK(cublasSetWorkspace(m.cublas, m.cublas_workspace.data(), m.cublas_workspace.bytes()));
  m.cudnn = cuda::make_cudnn(m.s());
  const ModelConfig& c = config;
  // A data-parallel rank computes its shard of every step: sized for it, the LSTM times and keeps
  // the algorithm that its full steps run (sized for the whole batch, every shard ran standard).
  m.pass_batch = data_parallel ? shard_of(max_batch, data_parallel->rank(), data_parallel->size()).count : max_batch;
  m.pass_batch = std::max(1, m.pass_batch);  // a rank whose shard is empty still allocates
  const int pass_batch = m.pass_batch;
  const size_t P = static_cast<size_t>(pass_batch) * c.seq_len;
  const size_t L = c.num_labels;
  const size_t F = static_cast<size_t>(pass_batch) * c.pooled_features();
  m.lstm = std::make_unique<cuda::CudnnBiLstm>(m.cudnn.get(), pass_batch, c.seq_len, c.embedding_dim, c.hidden,
                                               options.tf32, options.rnn_algorithm, precision == Precision::bf16);
  if (precision == Precision::bf16)
    m.dense_bf16.resize(cuda::dense_bf16_scratch_size(pass_batch, c.pooled_features(), c.num_labels));
  m.params.allocate(c, m.s());
  m.grads.allocate(c, m.s());
  const size_t moments = moment_names(optimizer).size();
  if (moments > 0) m.first_moment.allocate(c, m.s());
  if (moments > 1) m.second_moment.allocate(c, m.s());
  const std::vector<ActivationSlot> activations = activation_layout(c, pass_batch, 0, 0, true);
  m.activation_data.resize(activation_count(activations));
  m.act.carve(m.activation_data.data(), activations);
  m.argmax_data.resize(F);
  m.act.argmax = m.argmax_data.data();
  m.scalars.resize(2 + 256);
  m.clip_scale.resize(1);
  m.totals.resize(1);
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(m.totals.data(), 0, sizeof(DeviceTotals), m.s()));
  m.totals_host.resize(1);
  if (!class_weights.empty()) {
    m.class_weights.resize(class_weights.size());
    cuda::copy_to_device(m.class_weights.data(), class_weights.data(), class_weights.size(), m.s());
  }
  // Identifier ids: start with room for 4 per position; a batch with more grows the buffers once.
  m.layout = BatchLayout(P, static_cast<size_t>(pass_batch));
  m.id_capacity = 4 * P;
  for (Slot& slot : m.slots) {
    slot.uploaded = cuda::make_event();
    slot.consumed = cuda::make_event();
  }
  m.allocate_batch_blocks();
  m.embedding_workspace.reserve(static_cast<int>(P), static_cast<int64_t>(m.id_capacity), c.vocab_size,
                                c.embedding_dim, m.s());
  m.scalars_host.resize(2);
  m.logits_host.resize(pass_batch * L);
  if (!options.graphs) m.graphs_off = "turned off (--cuda-graphs off)";
  int device = 0;
  cudaDeviceProp properties{};
  ENHANCED_CUDA_CHECK(cudaGetDevice(&device));
  ENHANCED_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  m.device_name = properties.name;
  if (data_parallel) {
    m.exchange = std::make_unique<CudaGradientExchange>(*data_parallel, c.vocab_size, c.embedding_dim, m.s());
    const int64_t shard_positions = static_cast<int64_t>(std::max(1, shard_of(max_batch, 0, data_parallel->size()).count)) *
                                    c.seq_len;
    m.exchange->reserve(std::min<int64_t>(c.vocab_size, 5 * shard_positions), m.s());  // 4 ids a position + its word
    m.shard_sums.resize(2);
    ENHANCED_CUDA_CHECK(cudaMemsetAsync(m.shard_sums.data(), 0, m.shard_sums.bytes(), m.s()));
    m.class_weights_host = class_weights;
  }
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(m.s()));
}

CudaModel::~CudaModel() {
  if (!impl_) return;
  // Unwinding an error in a data-parallel run: a collective may wait for a rank that will never
  // join it; aborting the NCCL communicator first lets the synchronisation below return.
  if (impl_->exchange && std::uncaught_exceptions() > 0) impl_->exchange.reset();
  if (impl_->copy_stream.get()) static_cast<void>(cudaStreamSynchronize(impl_->copy_stream.get()));
  if (impl_->stream.get()) static_cast<void>(cudaStreamSynchronize(impl_->stream.get()));
}
CudaModel::CudaModel(CudaModel&&) noexcept = default;
CudaModel& CudaModel::operator=(CudaModel&&) noexcept = default;

const ModelConfig& CudaModel::config() const { return impl_->config; }
int CudaModel::max_batch() const { return impl_->max_batch; }
int64_t CudaModel::optimizer_steps() const { return impl_->steps; }
double CudaModel::last_gradient_norm() const { return impl_->last_norm; }
RnnAlgorithm CudaModel::rnn_algorithm() const { return impl_->lstm->algorithm(); }
int64_t CudaModel::graph_replays() const { return impl_->replays; }
const std::string& CudaModel::graphs_off_reason() const { return impl_->graphs_off; }

std::string CudaModel::summary() const {
  const Impl& m = *impl_;
  return cat(m.device_name, "; LSTM algorithm ", to_string(m.lstm->algorithm()), " (", m.lstm->selection(),
             "); CUDA graphs ", m.graphs_off.empty() ? std::string("on") : "off: " + m.graphs_off,
             m.precision == Precision::bf16 ? "; precision bf16 (cuDNN LSTM bfloat16 data, FP32 math; cuBLAS bfloat16 "
                                              "dense, FP32 accumulation; FP32 master weights)"
                                            : "; precision fp32",
             m.options.tf32 && m.precision != Precision::bf16 ? "; TF32 allowed" : "",
             m.exchange ? cat("; data-parallel: rank ", m.exchange->rank(), " of ", m.exchange->size(), ", NCCL ",
                              nccl_version(), " (collectives between two graphs)")
                        : std::string());
}

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

void CudaModel::enqueue_train_step(const Batch& batch, float learning_rate) {
  impl_->enqueue(batch, StepKind::train, learning_rate);
}

TrainTotals CudaModel::collect() {
  Impl& m = *impl_;
  ENHANCED_CUDA_CHECK(cudaMemcpyAsync(m.totals_host.data(), m.totals.data(), sizeof(DeviceTotals),
                                      cudaMemcpyDeviceToHost, m.s()));
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(m.totals.data(), 0, cuda::kTotalsCountersBytes, m.s()));
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(m.s()));
  const DeviceTotals& t = *m.totals_host.data();
  TrainTotals out;
  out.loss_sum = t.loss_sum;
  out.samples = t.samples;
  out.correct = t.correct;
  out.steps = t.steps;
  out.halted = static_cast<Halt>(t.halted);
  out.halted_step = t.halted_step;
  out.halted_value = t.halted_value;
  if (t.halted) m.steps = t.halted_step - 1;  // that step and the ones queued after it were skipped
  return out;
}

double CudaModel::train_step(const Batch& batch, float* logits_host) {
  Impl& m = *impl_;
  const Impl::BatchView view = m.enqueue(batch, StepKind::train, m.optimizer.learning_rate);
  m.wait_and_read(view, logits_host);
  const double loss = m.scalars_host.data()[0];
  const double norm = m.scalars_host.data()[1];
  const DeviceTotals& t = *m.totals_host.data();
  if (t.halted) {
    // Report and clear the halt: the caller decides (the trainer stops), the model stays usable.
    m.steps = t.halted_step - 1;
    const int64_t halted_step = t.halted_step;
    ENHANCED_CUDA_CHECK(cudaMemsetAsync(reinterpret_cast<unsigned char*>(m.totals.data()) + cuda::kTotalsCountersBytes, 0,
                                        cuda::kTotalsHaltBytes, m.s()));
    ENHANCED_CUDA_CHECK(cudaStreamSynchronize(m.s()));
    if (!std::isfinite(loss)) return loss;
    fail("non-finite gradient (norm ", norm, ") at step ", halted_step, "; weights left unchanged");
  }
  m.last_norm = norm;
  return loss;
}

double CudaModel::compute_gradients(const Batch& batch, float* logits_host) {
  Impl& m = *impl_;
  const Impl::BatchView view = m.enqueue(batch, StepKind::gradients, m.optimizer.learning_rate);
  m.wait_and_read(view, logits_host);
  return m.scalars_host.data()[0];
}

double CudaModel::forward(const Batch& batch, float* logits_host) {
  Impl& m = *impl_;
  const Impl::BatchView view = m.enqueue(batch, StepKind::forward, m.optimizer.learning_rate);
  m.wait_and_read(view, logits_host);
  return m.scalars_host.data()[0];
}

}  // namespace enhanced

