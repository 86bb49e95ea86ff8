// The CUDA engine (cuda_engine.h): the CPU engine's step (cpu_engine.cpp: the model, optimizer_step,
// zero_gradients) on one device, pipelined: batch uploads on a copy stream, steps on the compute
// stream, CUDA graph replay. This file holds its Engine members; the step pipeline is
// cuda_engine_step.cu, the class and its state cuda_engine_state.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "engine/cuda_engine_state.h"
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

// A data-parallel run's rank: its GPU made current (its local rank modulo the host's devices);
// "GPU 1 of 8 (local rank 1), 16 ranks; " for the summary. "" alone.
std::string select_device(const Communicator* ranks) {
  if (!ranks) return "";
  if (!built_with_nccl()) fail(no_nccl_reason(ranks->size()));
  int count = 0;
  const int device = select_rank_device(*ranks, &count);
  return cat("GPU ", device, " of ", count, " (local rank ", ranks->local_rank(), "), ", ranks->size(), " ranks; ");
}

// Inference needs no optimizer state: plain SGD keeps no moments on the device.
OptimizerConfig optimizer_of(const OptimizerState* optimizer) {
  if (optimizer) return optimizer->config;
  OptimizerConfig none;
  none.kind = OptimizerKind::sgd;
  return none;
}

// This rank's LSTM, built by `make` with the algorithm asked; nullptr and *error where it failed.
template <class Make>
std::unique_ptr<cuda::CudnnBiLstm> try_lstm(const Make& make, RnnAlgorithm algorithm, std::string* error) {
  try {
    return make(algorithm);
  } catch (const Error& e) {
    *error = e.what();
    return nullptr;
  }
}

// The LSTM of a pass, by `make(algorithm)`. Every rank of a data-parallel run must run the same
// algorithm (it is the step's arithmetic, and the run records one): rank 0 selects as asked and
// the others use its choice. Where a rank cannot run an automatic choice (cuDNN refuses it at its
// shard's shape, or it disagrees there), every rank falls back to standard, as auto would have
// alone; an algorithm the user named, or standard, that a rank cannot run fails every rank with
// that rank's reason, instead of failing it alone while the others wait in a collective.
template <class Make>
std::unique_ptr<cuda::CudnnBiLstm> make_rank_lstm(Communicator* ranks, RnnAlgorithm asked, const Make& make) {
  if (!ranks || ranks->size() == 1) return make(asked);
  std::string error;
  std::unique_ptr<cuda::CudnnBiLstm> lstm;
  if (ranks->rank() == 0) lstm = try_lstm(make, asked, &error);
  // Rank 0's choice as 1 + its RnnAlgorithm, or 0 where it failed.
  const uint64_t mine = lstm ? 1 + static_cast<uint64_t>(lstm->algorithm()) : 0;
  std::vector<uint64_t> all(static_cast<size_t>(ranks->size()));
  ranks->gather(all.data(), &mine, 1);
  if (all[0] == 0) ranks->fail_as(0, error);
  RnnAlgorithm chosen = static_cast<RnnAlgorithm>(all[0] - 1);
  for (;;) {
    if (ranks->rank() != 0 || !lstm) lstm = try_lstm(make, chosen, &error);
    const uint64_t failed = lstm ? 0 : 1;
    ranks->gather(all.data(), &failed, 1);
    const auto first = std::find(all.begin(), all.end(), uint64_t{1});
    if (first == all.end()) return lstm;
    if (asked != RnnAlgorithm::automatic || chosen == RnnAlgorithm::standard)
      ranks->fail_as(static_cast<int>(first - all.begin()),
                     cat("cannot run the LSTM algorithm ", to_string(chosen),
                         asked == RnnAlgorithm::automatic ? " (rank 0's automatic choice)" : "", ": ", error));
    chosen = RnnAlgorithm::standard;  // auto: every rank again, with the algorithm cuDNN runs for any shape
    lstm.reset();
  }
}

std::string current_device_name() {
  int device = 0;
  cudaDeviceProp properties{};
  ENHANCED_CUDA_CHECK(cudaGetDevice(&device));
  ENHANCED_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.name;
}

void check_same_model(const ModelConfig& model, const ParameterBuffer<float>& buffer, const char* what) {
  if (buffer.size() != parameter_count(model) || buffer.config.vocab_size != model.vocab_size ||
      buffer.config.embedding_dim != model.embedding_dim || buffer.config.hidden != model.hidden ||
      buffer.config.seq_len != model.seq_len || buffer.config.num_labels != model.num_labels ||
      buffer.config.pool != model.pool)
    fail("CUDA engine: ", what, " buffer does not match the model's shape");
}
}  // namespace

CudaEngine::CudaEngine(ParameterBuffer<float>& params, OptimizerState* optimizer, const EngineOptions& options)
    : params_(params), optimizer_(optimizer), rank_device_(select_device(data_parallel_ranks(options))) {
  const ModelConfig& c = params.config;
  c.validate();
  check_class_weights(options.class_weights, c.num_labels);
  if (options.max_batch < 1) fail("CUDA engine: max batch must be positive, got ", options.max_batch);
  check_precision(options.precision);
  allocate(c, options.max_batch, options);
  cuda::copy_to_device(s_.params.data.data(), params_.data.data(), params_.size(), s_.s());
  if (optimizer_) upload_optimizer_state();
}

// Everything for batches of up to max_batch samples on the current device: parameters copied
// in by the caller, gradients and optimizer moments at zero.
void CudaEngine::allocate(const ModelConfig& c, int max_batch, const EngineOptions& options) {
  CudaEngineState& m = s_;
  Communicator* const ranks = data_parallel_ranks(options);
  m.config = c;
  m.optimizer = optimizer_of(optimizer_);
  m.options = options.cuda;
  m.precision = options.precision;
  m.max_batch = max_batch;
  m.stream = cuda::make_stream();
  m.copy_stream = cuda::make_stream();
  m.cublas = cuda::make_cublas(m.s(), m.options.tf32);
  // An explicit cuBLAS workspace: nothing for cuBLAS to allocate inside a captured step.
  m.cublas_workspace.resize(kCublasWorkspaceBytes);
  ENHANCED_CUBLAS_CHECK(cublasSetWorkspace(m.cublas, m.cublas_workspace.data(), m.cublas_workspace.bytes()));
  m.cudnn = cuda::make_cudnn(m.s());
  // A data-parallel rank computes its shard of every step: sized for it, the LSTM times and keeps
  // the algorithm that its full steps run (sized for the whole batch, every shard ran standard).
  m.pass_batch = ranks ? shard_of(max_batch, ranks->rank(), ranks->size()).count : max_batch;
  m.pass_batch = std::max(1, m.pass_batch);  // a rank whose shard is empty still allocates
  const int pass_batch = m.pass_batch;
  const size_t P = static_cast<size_t>(pass_batch) * c.seq_len;
  const size_t L = c.num_labels;
  const size_t F = static_cast<size_t>(pass_batch) * c.pooled_features();
  const bool bf16 = m.precision == Precision::bf16;
  m.lstm = make_rank_lstm(ranks, m.options.rnn_algorithm, [&](RnnAlgorithm algorithm) {
    return std::make_unique<cuda::CudnnBiLstm>(pass_batch, c.seq_len, c.embedding_dim, c.hidden, m.options.tf32,
                                               algorithm, bf16, m.cudnn.get());
  });
  if (bf16) m.dense_bf16.resize(cuda::dense_bf16_scratch_size(pass_batch, c.pooled_features(), c.num_labels));
  m.params.allocate(c, m.s());
  m.grads.allocate(c, m.s());
  const size_t moments = moment_names(m.optimizer).size();
  if (moments > 0) m.first_moment.allocate(c, m.s());
  if (moments > 1) m.second_moment.allocate(c, m.s());
  const std::vector<ActivationSlot> activations = activation_layout(c, pass_batch, 0, 0, LstmRows::dense_output);
  m.activation_data.resize(activation_count(activations));
  m.act.carve(m.activation_data.data(), activations);
  m.argmax_data.resize(F);
  m.act.argmax = m.argmax_data.data();
  m.scalars.resize(2 + 256);
  // Cleared once: a pass writes only the scalars it computes, and none may be read unwritten.
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(m.scalars.data(), 0, m.scalars.bytes(), m.s()));
  m.clip_scale.resize(1);
  m.totals.resize(1);
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(m.totals.data(), 0, sizeof(DeviceTotals), m.s()));
  m.totals_host.resize(1);
  if (!options.class_weights.empty()) {
    m.class_weights.resize(options.class_weights.size());
    cuda::copy_to_device(m.class_weights.data(), options.class_weights.data(), options.class_weights.size(), m.s());
  }
  m.class_weight_mean = options.class_weight_mean;
  allocate_batch_slots(P);
  m.scalars_host.resize(1);
  m.logits_host.resize(pass_batch * L);
  if (!m.options.graphs) m.graphs_off = "turned off (--cuda-graphs off)";
  m.device_name = current_device_name();
  if (ranks) allocate_exchange(*ranks, max_batch, options.class_weights);
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(m.s()));
}

// A data-parallel run's NCCL exchange, with room for the rows the largest shard can touch.
void CudaEngine::allocate_exchange(Communicator& ranks, int max_batch, const std::vector<float>& class_weights) {
  CudaEngineState& m = s_;
  const ModelConfig& c = m.config;
  m.exchange = std::make_unique<CudaGradientExchange>(ranks, c.vocab_size, c.embedding_dim, m.s());
  const int64_t shard_positions =
      static_cast<int64_t>(std::max(1, shard_of(max_batch, 0, ranks.size()).count)) * c.seq_len;
  m.exchange->reserve(std::min<int64_t>(c.vocab_size, 5 * shard_positions), m.s());  // 4 ids a position + its word
  m.shard_sums.resize(2);
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(m.shard_sums.data(), 0, m.shard_sums.bytes(), m.s()));
  m.class_weights_host = class_weights;
}

// The two staging slots and the embedding workspace for batches of up to P positions; identifier
// ids start with room for 4 a position (a batch with more grows the buffers once).
void CudaEngine::allocate_batch_slots(size_t P) {
  CudaEngineState& m = s_;
  m.layout = BatchLayout(P, static_cast<size_t>(m.pass_batch));
  m.id_capacity = 4 * P;
  for (Slot& slot : m.slots) {
    slot.uploaded = cuda::make_event();
    slot.consumed = cuda::make_event();
  }
  m.allocate_batch_blocks();
  m.embedding_workspace.reserve(static_cast<int>(P), static_cast<int64_t>(m.id_capacity), m.config.vocab_size,
                                m.config.embedding_dim, m.s());
}

// The caller's optimizer state (OptimizerState: first = SGD velocity or Adam m, second = Adam v;
// steps taken) onto the device: a resumed run continues from it.
void CudaEngine::upload_optimizer_state() {
  CudaEngineState& m = s_;
  if (optimizer_->moments.size() != moment_names(m.optimizer).size())
    fail("internal: the optimizer state's moments do not match its optimizer");
  DeviceParameters* device[] = {&m.first_moment, &m.second_moment};
  for (size_t i = 0; i < optimizer_->moments.size(); ++i) {
    check_same_model(m.config, optimizer_->moments[i], "optimizer moment");
    cuda::copy_to_device(device[i]->data.data(), optimizer_->moments[i].data.data(), optimizer_->moments[i].size(),
                         m.s());
  }
  m.steps = optimizer_->steps;
}

CudaEngine::~CudaEngine() {
  // Unwinding an error in a data-parallel run: a collective may wait for a rank that will never
  // join it; aborting the NCCL communicator first lets the synchronisation below return.
  if (s_.exchange && std::uncaught_exceptions() > 0) s_.exchange.reset();
  if (s_.copy_stream.get()) static_cast<void>(cudaStreamSynchronize(s_.copy_stream.get()));
  if (s_.stream.get()) static_cast<void>(cudaStreamSynchronize(s_.stream.get()));
}

std::string CudaEngine::summary() const {
  const CudaEngineState& m = s_;
  return cat("cuda, ", rank_device_, m.device_name, "; LSTM algorithm ", to_string(m.lstm->algorithm()), " (",
             m.lstm->selection(), "); CUDA graphs ", m.graphs_off.empty() ? std::string("on") : "off: " + m.graphs_off,
             m.precision == Precision::bf16 ? "; precision bf16 (cuDNN LSTM bfloat16 data, FP32 math; cuBLAS bfloat16 "
                                              "dense, FP32 accumulation; FP32 master weights)"
                                            : "; precision fp32",
             m.options.tf32 && m.precision != Precision::bf16 ? "; TF32 allowed" : "",
             m.exchange ? cat("; data-parallel: rank ", m.exchange->rank(), " of ", m.exchange->size(), ", NCCL ",
                              nccl_version(), " (collectives between two graphs)")
                        : std::string());
}

void CudaEngine::enqueue_train_step(const Batch& batch, float learning_rate) {
  if (!optimizer_) fail("internal: this engine was made for inference only");
  s_.enqueue(batch, StepKind::train, learning_rate);
}

TrainTotals CudaEngine::collect() {
  CudaEngineState& m = s_;
  ENHANCED_CUDA_CHECK(cudaMemcpyAsync(m.totals_host.data(), m.totals.data(), sizeof(DeviceTotals),
                                      cudaMemcpyDeviceToHost, m.s()));
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(m.totals.data(), 0, kTotalsCounterBytes, m.s()));
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(m.s()));
  const TrainTotals out = *m.totals_host.data();
  if (out.halted != Halt::none) m.steps = out.halted_step - 1;  // that step and the ones queued after it were skipped
  return out;
}

double CudaEngine::forward(const Batch& batch, float* logits) {
  const CudaEngineState::BatchView view = s_.enqueue(batch, StepKind::forward, s_.optimizer.learning_rate);
  s_.wait_and_read(view, logits);
  return s_.scalars_host.data()[0];
}

double CudaEngine::compute_gradients(const Batch& batch, float* logits) {
  const CudaEngineState::BatchView view = s_.enqueue(batch, StepKind::gradients, s_.optimizer.learning_rate);
  s_.wait_and_read(view, logits);
  return s_.scalars_host.data()[0];
}

void CudaEngine::download_gradients(ParameterBuffer<float>& grads) {
  check_same_model(s_.config, grads, "gradient");
  cuda::copy_to_host(grads.data.data(), s_.grads.data.data(), grads.size(), s_.s());
}

void CudaEngine::sync_to_host() {
  CudaEngineState& m = s_;
  cuda::copy_to_host(params_.data.data(), m.params.data.data(), params_.size(), m.s());
  if (!optimizer_) return;
  const DeviceParameters* device[] = {&m.first_moment, &m.second_moment};
  for (size_t i = 0; i < optimizer_->moments.size(); ++i)
    cuda::copy_to_host(optimizer_->moments[i].data.data(), device[i]->data.data(), optimizer_->moments[i].size(),
                       m.s());
  optimizer_->steps = m.steps;
}

// On the compute stream, after the queued steps and before the next.
void CudaEngine::sync_to_device() {
  check_same_model(s_.config, params_, "parameter");
  cuda::copy_to_device(s_.params.data.data(), params_.data.data(), params_.size(), s_.s());
}

std::string CudaEngine::closing_note() const {
  if (!s_.graphs_off.empty()) return "cuda: CUDA graphs " + s_.graphs_off;
  return cat("cuda: ", s_.replays, " steps replayed from CUDA graphs");
}

std::unique_ptr<Engine> make_cuda_engine(ParameterBuffer<float>& params, OptimizerState* optimizer,
                                         const EngineOptions& options) {
  return std::make_unique<CudaEngine>(params, optimizer, options);
}

}  // namespace enhanced
