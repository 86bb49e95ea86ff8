// CudaModel: the CPU engine's step (cpu_model.cpp: the model, optimizer_step, zero_gradients) on one device,
// pipelined: batch uploads on a copy stream, steps on the compute stream, CUDA graph replay.
#include "engine/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <vector>

#include "engine/cuda_exchange.h"
#include "enhanced/data_parallel.h"
#include "kernels/layers.h"
#include "kernels/step_totals.h"
#include "steps/softmax_xent_steps.h"

namespace enhanced {

using cuda::DeviceBuffer;
using cuda::PinnedBuffer;
using cuda::DeviceTotals;
using cuda::StepScalars;

namespace {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;  // cuBLAS's advice for Hopper

// One device allocation carved by parameter_layout, as ParameterBuffer is on the host.
struct DeviceParameters : ParameterTensors<float> {
  DeviceBuffer<float> data;

  void allocate(const ModelConfig& config, cudaStream_t stream) {
    data.resize(parameter_count(config));
    ENHANCED_CUDA_CHECK(cudaMemsetAsync(data.data(), 0, data.bytes(), stream));
    carve(data.data(), config);
  }
};

// The batch block, pinned on the host and on the device, int32 units: the step's scalars and, in
// a data-parallel run, the whole batch's denominators (at kWholeInts), then offsets (P_max + 1),
// cur words (P_max), labels (B_max), identifier ids (capacity). Fixed offsets for every batch
// size, so a graph captured for a slot finds its batch at the same addresses on every replay.
constexpr size_t kWholeInts = 8;
constexpr size_t kHeaderInts = 16;
static_assert(sizeof(StepScalars) <= kWholeInts * sizeof(int32_t), "the step scalars must fit the header");
static_assert(sizeof(cuda::WholeBatch) <= (kHeaderInts - kWholeInts) * sizeof(int32_t), "so must the denominators");

struct BatchLayout {
  size_t offsets = 0, cur = 0, labels = 0, ids = 0;  // in int32 units from the block's start
  BatchLayout() = default;
  BatchLayout(size_t max_positions, size_t max_batch)
      : offsets(kHeaderInts),
        cur(kHeaderInts + max_positions + 1),
        labels(cur + max_positions),
        ids(labels + max_batch) {}
};

// One of two staging slots: the host fills `staging` while the other slot's batch is in flight.
struct Slot {
  PinnedBuffer<int32_t> staging;
  DeviceBuffer<int32_t> block;
  cuda::UniqueEvent uploaded;  // recorded on the copy stream after the upload
  cuda::UniqueEvent consumed;  // recorded on the compute stream after the step that read it
  bool used = false;
};

// A captured training step for one (batch size, slot), valid while the buffers it names live.
struct StepGraph {
  int batch = 0;
  int slot = 0;
  int phase = 0;  // 0: the whole step; data-parallel: 1 before the collectives, 2 after them
  uint64_t generation = 0;
  int eager_runs = 0;
  cuda::UniqueGraphExec exec;
};

enum class StepKind { forward, gradients, train };

}  // namespace

struct CudaModel::Impl {
  ModelConfig config;
  OptimizerConfig optimizer;
  CudaOptions options;
  Precision precision = Precision::fp32;  // fp32 or bf16 (bf16-emulated is refused: a CPU path)
  int max_batch = 0;
  int64_t steps = 0;  // optimizer steps queued (all applied unless a collect says otherwise)
  double last_norm = 0;

  cuda::UniqueStream stream, copy_stream;
  cuda::UniqueCublas cublas;
  DeviceBuffer<unsigned char> cublas_workspace;
  cuda::UniqueCudnn cudnn;
  std::unique_ptr<cuda::CudnnBiLstm> lstm;
  cuda::EmbeddingGradWorkspace embedding_workspace;

  DeviceParameters params, grads, first_moment, second_moment;

  // Activations (device), sized for max_batch: one allocation carved by activation_layout
  // (cuDNN keeps the LSTM's own state in its reserve space), and argmax's int32 buffer.
  DeviceBuffer<float> activation_data;
  DeviceBuffer<int32_t> argmax_data;
  ActivationTensors<float> act;
  // bf16: the dense GEMMs' bfloat16 operands (dense_bf16_scratch_size for max_batch); empty in fp32.
  DeviceBuffer<uint16_t> dense_bf16;
  DeviceBuffer<double> scalars;  // [0] mean loss, [1] gradient norm, [2..258) norm partials
  DeviceBuffer<float> class_weights;  // L, the training loss's (empty: unweighted)
  DeviceBuffer<float> clip_scale;
  DeviceBuffer<DeviceTotals> totals;
  PinnedBuffer<DeviceTotals> totals_host;
  PinnedBuffer<double> scalars_host;  // loss, norm
  PinnedBuffer<float> logits_host;

  BatchLayout layout;
  size_t id_capacity = 0;
  uint64_t batch_generation = 0;
  Slot slots[2];
  int next_slot = 0;

  std::vector<StepGraph> graphs;
  std::string graphs_off;
  int64_t replays = 0;
  std::string device_name;

  // Data-parallel (null alone): the exchange over the ranks, this rank's shard of the step's
  // batch, the training loss's class weights on the host (the whole batch's denominator), and
  // the step's loss share and correct count, summed over the ranks.
  std::unique_ptr<CudaGradientExchange> exchange;
  Batch shard;
  std::vector<float> class_weights_host;
  DeviceBuffer<double> shard_sums;

  struct BatchView {
    int size = 0, positions = 0;
    const StepScalars* scalars = nullptr;
    const cuda::WholeBatch* whole = nullptr;  // a shard of a data-parallel step (null: the whole batch)
    const int32_t *offsets = nullptr, *cur = nullptr, *labels = nullptr, *identifiers = nullptr;
  };

  cudaStream_t s() const { return stream.get(); }
  uint16_t* dense_scratch() { return dense_bf16.size() ? dense_bf16.data() : nullptr; }  // null: FP32 GEMMs
  int F() const { return config.pooled_features(); }
  uint64_t generation() const {
    return batch_generation + embedding_workspace.generation() + lstm->generation() +
           (exchange ? exchange->generation() : 0);
  }

  // The gradient's touched rows: this backward's, or in a data-parallel run the union of the
  // ranks' (which the exchange leaves non-zero).
  cuda::StepRange range(bool rows_only) const {
    cuda::StepRange r;
    r.total = parameter_count(config);
    r.table = static_cast<size_t>(config.vocab_size) * config.embedding_dim;
    r.dim = config.embedding_dim;
    r.rows_only = rows_only;
    r.rows = exchange ? exchange->rows() : embedding_workspace.touched_rows();
    r.row_count = exchange ? exchange->row_count() : embedding_workspace.touched_count();
    r.max_rows = exchange ? exchange->max_rows() : embedding_workspace.entry_capacity();
    return r;
  }

  void validate(const Batch& batch) const;
  void allocate_batch_blocks();
  void grow_ids(size_t ids);
  const Batch& shard_of_step(const Batch& batch, cuda::WholeBatch& whole);
  BatchView enqueue(const Batch& batch, StepKind kind, float learning_rate);
  void run_step(const BatchView& b, StepKind kind, int slot);
  template <class Body>
  void run_graph(const BatchView& b, int slot, int phase, const Body& body);
  void shard_pass(const BatchView& b);
  void merge_pass(const BatchView& b, StepKind kind);
  void run_eager(const BatchView& b, StepKind kind);
  void forward_pass(const BatchView& b, bool with_gradient);
  void backward_pass(const BatchView& b);
  void step(const BatchView& b);
  void wait_and_read(const BatchView& b, float* logits_out);
  void drain() const {
    ENHANCED_CUDA_CHECK(cudaStreamSynchronize(copy_stream.get()));
    ENHANCED_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  }
};

void CudaModel::Impl::validate(const Batch& batch) const {
  const ModelConfig& c = config;
  if (batch.seq_len != c.seq_len) fail("batch has T = ", batch.seq_len, ", the model expects T = ", c.seq_len);
  if (batch.size < 1 || batch.size > max_batch)
    fail("batch of ", batch.size, " samples; the CUDA model holds 1..", max_batch);
  const size_t P = static_cast<size_t>(batch.positions());
  if (batch.identifier_offsets.size() != P + 1 || batch.cur_word_ids.size() != P ||
      batch.labels.size() != static_cast<size_t>(batch.size) ||
      static_cast<size_t>(batch.identifier_offsets.back()) != batch.identifier_ids.size() ||
      batch.identifier_offsets.front() != 0 ||
      !std::is_sorted(batch.identifier_offsets.begin(), batch.identifier_offsets.end()))
    fail("internal: inconsistent batch arrays (B = ", batch.size, ", T = ", batch.seq_len, ")");
  // Out-of-range ids would fault on the device (and poison the context): check them here.
  const auto bad_id = [&](int32_t id) { return id < 0 || id >= c.vocab_size; };
  if (std::any_of(batch.identifier_ids.begin(), batch.identifier_ids.end(), bad_id) ||
      std::any_of(batch.cur_word_ids.begin(), batch.cur_word_ids.end(), bad_id))
    fail("batch has a token id outside [0, ", c.vocab_size, ")");
  if (std::any_of(batch.labels.begin(), batch.labels.end(), [&](int32_t l) { return l < 0 || l >= c.num_labels; }))
    fail("batch has a label outside [0, ", c.num_labels, ")");
}

void CudaModel::Impl::allocate_batch_blocks() {
  for (Slot& slot : slots) {
    slot.staging.resize(layout.ids + id_capacity);
    slot.block.resize(layout.ids + id_capacity);
    slot.used = false;
  }
  ++batch_generation;
}

// Rare: a batch with more identifier ids than the buffers hold. Everything in flight finishes,
// the previous backward's gradients are cleared (growing the workspace forgets its touched
// rows), and the buffers grow with headroom; captured graphs become stale and are recaptured.
void CudaModel::Impl::grow_ids(size_t ids) {
  drain();
  cuda::zero_gradients(grads.data.data(), range(true), s());
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(s()));
  id_capacity = ids + ids / 2;
  allocate_batch_blocks();
  const int max_positions = max_batch * config.seq_len;
  embedding_workspace.reserve(max_positions, static_cast<int64_t>(id_capacity), config.vocab_size,
                              config.embedding_dim, s());
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(s()));
}

CudaModel::Impl::BatchView CudaModel::Impl::enqueue(const Batch& batch, StepKind kind, float learning_rate) {
  validate(batch);  // the whole batch: in a data-parallel run every rank finds a bad one alike
  if (kind == StepKind::train) check_step_learning_rate(learning_rate, steps + 1);
  // A data-parallel step computes this rank's shard of the batch; forward (evaluation) is given
  // its shard by the caller already.
  cuda::WholeBatch whole;
  const bool sharded = exchange && kind != StepKind::forward;
  const Batch& part = sharded ? shard_of_step(batch, whole) : batch;
  const size_t P = static_cast<size_t>(part.positions());
  const size_t ids = part.identifier_ids.size();
  if (ids > id_capacity) grow_ids(ids);

  const int index = next_slot;
  next_slot ^= 1;
  Slot& slot = slots[index];
  // The staging memory is free once its previous upload finished (two steps back).
  if (slot.used) ENHANCED_CUDA_CHECK(cudaEventSynchronize(slot.uploaded));
  int32_t* at = slot.staging.data();
  const StepScalars header = cuda::step_scalars(optimizer, steps + 1, learning_rate);
  std::memcpy(at, &header, sizeof header);
  std::memcpy(at + kWholeInts, &whole, sizeof whole);
  std::memcpy(at + layout.offsets, part.identifier_offsets.data(), (P + 1) * sizeof(int32_t));
  if (P) std::memcpy(at + layout.cur, part.cur_word_ids.data(), P * sizeof(int32_t));
  if (part.size) std::memcpy(at + layout.labels, part.labels.data(), part.labels.size() * sizeof(int32_t));
  if (ids) std::memcpy(at + layout.ids, part.identifier_ids.data(), ids * sizeof(int32_t));
  // The device block is free once the step that read it finished.
  if (slot.used) ENHANCED_CUDA_CHECK(cudaStreamWaitEvent(copy_stream.get(), slot.consumed, 0));
  ENHANCED_CUDA_CHECK(cudaMemcpyAsync(slot.block.data(), at, (layout.ids + ids) * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, copy_stream.get()));
  ENHANCED_CUDA_CHECK(cudaEventRecord(slot.uploaded, copy_stream.get()));
  ENHANCED_CUDA_CHECK(cudaStreamWaitEvent(s(), slot.uploaded, 0));
  slot.used = true;  // from here the next use of the slot must wait for this one

  BatchView view;
  view.size = part.size;
  view.positions = static_cast<int>(P);
  const int32_t* block = slot.block.data();
  view.scalars = reinterpret_cast<const StepScalars*>(block);
  if (sharded) view.whole = reinterpret_cast<const cuda::WholeBatch*>(block + kWholeInts);
  view.offsets = block + layout.offsets;
  view.cur = block + layout.cur;
  view.labels = block + layout.labels;
  view.identifiers = block + layout.ids;
  try {
    run_step(view, kind, index);
  } catch (...) {
    static_cast<void>(cudaEventRecord(slot.consumed, s()));  // whatever was queued still reads the slot
    throw;
  }
  ENHANCED_CUDA_CHECK(cudaEventRecord(slot.consumed, s()));
  if (kind == StepKind::train) ++steps;
  return view;
}

// A training step replays its (batch size, slot) graph; the first run of a shape is eager (it
// also brings every kernel in, which capture must not do), the second is captured. A capture
// that fails turns graphs off for this model, with the reason, and the step runs eagerly.
//
// A data-parallel step is two graphs with the NCCL collectives between them, eager on the same
// stream: NCCL can be captured (>= 2.9), but only when every rank captures the same collectives
// alike, and here capture is each rank's own affair (a rank's shard size picks its graphs and
// its cuDNN workspace growth, a failed capture turns one rank's graphs off).
void CudaModel::Impl::run_step(const BatchView& b, StepKind kind, int slot) {
  if (!b.whole) {
    if (kind != StepKind::train) return run_eager(b, kind);
    return run_graph(b, slot, 0, [&] { run_eager(b, kind); });
  }
  const auto before = [&] { shard_pass(b); };
  const auto after = [&] { merge_pass(b, kind); };
  const size_t table = static_cast<size_t>(config.vocab_size) * config.embedding_dim;
  if (kind == StepKind::train) run_graph(b, slot, 1, before);
  else before();
  exchange->communicate(grads.data.data() + table, grads.data.size() - table, shard_sums.data(), 2, s());
  if (kind == StepKind::train) run_graph(b, slot, 2, after);
  else after();
}

template <class Body>
void CudaModel::Impl::run_graph(const BatchView& b, int slot, int phase, const Body& body) {
  if (!graphs_off.empty()) return body();
  auto found = std::find_if(graphs.begin(), graphs.end(), [&](const StepGraph& g) {
    return g.batch == b.size && g.slot == slot && g.phase == phase;
  });
  if (found == graphs.end()) {
    graphs.push_back(StepGraph{b.size, slot, phase, generation(), 0, {}});
    found = graphs.end() - 1;
  }
  StepGraph& graph = *found;
  if (graph.generation != generation()) graph = StepGraph{b.size, slot, phase, generation(), 0, {}};
  if (graph.exec) {
    ENHANCED_CUDA_CHECK(cudaGraphLaunch(graph.exec, s()));
    if (phase < 2) ++replays;
    return;
  }
  if (graph.eager_runs++ == 0) return body();
  cudaGraph_t captured = nullptr;
  ENHANCED_CUDA_CHECK(cudaStreamBeginCapture(s(), cudaStreamCaptureModeThreadLocal));
  std::string failure;
  try {
    body();
  } catch (const Error& e) {
    failure = e.what();
  }
  const cudaError_t ended = cudaStreamEndCapture(s(), &captured);
  cuda::UniqueGraph owner(captured);
  if (failure.empty() && ended != cudaSuccess) failure = cat("cudaStreamEndCapture: ", cudaGetErrorString(ended));
  cudaGraphExec_t exec = nullptr;
  if (failure.empty()) {
    const cudaError_t made = cudaGraphInstantiate(&exec, captured, 0);
    if (made != cudaSuccess) failure = cat("cudaGraphInstantiate: ", cudaGetErrorString(made));
  }
  if (!failure.empty()) {
    static_cast<void>(cudaGetLastError());
    graphs_off = "capture failed: " + failure;
    graphs.clear();
    return body();
  }
  graph.exec = cuda::UniqueGraphExec(exec);
  ENHANCED_CUDA_CHECK(cudaGraphLaunch(graph.exec, s()));
  if (phase < 2) ++replays;
}

void CudaModel::Impl::run_eager(const BatchView& b, StepKind kind) {
  forward_pass(b, kind != StepKind::forward);
  if (kind == StepKind::forward) return;
  backward_pass(b);
  if (kind == StepKind::train) step(b);
}

void CudaModel::Impl::forward_pass(const BatchView& b, bool with_gradient) {
  const ModelConfig& c = config;
  const int B = b.size, T = c.seq_len, D = c.embedding_dim, H = c.hidden;
  cuda::embedding_blend_forward(act.x, b.offsets, b.identifiers, b.cur, params.embedding, b.positions, D, c.blend,
                                s());
  cuda::bilstm_forward(act.y, *lstm, act.x, params.weight_ih, params.weight_hh, params.bias_ih, params.bias_hh,
                       B, T, D, H, s());
  cuda::maxpool_forward(act.pooled, act.argmax, act.y, B, T, 2 * H, c.pool, s());
  cuda::dense_forward(act.logits, act.pooled, params.dense_weight, params.dense_bias, B, F(), c.num_labels,
                      cublas, s(), dense_scratch());
  // Training steps and compute_gradients weigh the loss by class; evaluation does not.
  const float* weights = with_gradient && class_weights.size() ? class_weights.data() : nullptr;
  cuda::softmax_cross_entropy(with_gradient ? act.dlogits : nullptr, act.sample_losses, scalars.data(),
                              act.logits, b.labels, weights, B, c.num_labels, s(), b.whole);
}

// The embedding backward sorts room for the most ids a slot holds (the batch's own count is read
// on the device): the same kernels for every batch, so a captured graph serves them all and the
// eager warm-up run before a capture has already loaded each of them.
void CudaModel::Impl::backward_pass(const BatchView& b) {
  const ModelConfig& c = config;
  const int B = b.size, T = c.seq_len, D = c.embedding_dim, H = c.hidden;
  // grads start at zero: clear what the previous backward wrote (its touched rows, still in the
  // workspace, and everything after the table); the sort below replaces the touched rows.
  cuda::zero_gradients(grads.data.data(), range(true), s());
  cuda::dense_backward(act.dpooled, grads.dense_weight, grads.dense_bias, act.dlogits, act.pooled,
                       params.dense_weight, B, F(), c.num_labels, cublas, s(), dense_scratch());
  cuda::maxpool_backward(act.dy, act.argmax, act.dpooled, B, T, 2 * H, c.pool, s());
  cuda::bilstm_backward(act.dx, grads.weight_ih, grads.weight_hh, grads.bias_ih, grads.bias_hh, *lstm, act.y,
                        act.dy, act.x, B, T, D, H, s());
  cuda::embedding_blend_backward(grads.embedding, embedding_workspace, act.dx, b.offsets, b.identifiers, b.cur,
                                 b.positions, static_cast<int64_t>(id_capacity), D, c.blend, s());
}

void CudaModel::Impl::step(const BatchView& b) {
  const OptimizerConfig& o = optimizer;
  double* loss = scalars.data();
  double* norm = scalars.data() + 1;
  double* partials = scalars.data() + 2;
  if (b.whole) cuda::account_reduced_step(totals.data(), loss, shard_sums.data(), b.whole, b.scalars, s());
  else cuda::account_step(totals.data(), loss, act.logits, b.labels, b.scalars, b.size, config.num_labels, s());
  cuda::gradient_norm(norm, clip_scale.data(), partials, grads.data.data(), &totals.data()->halted, range(true),
                      o.clip_norm, s());
  const cuda::StepRange visited = range(rows_only(o));
  if (o.kind == OptimizerKind::sgd) {
    cuda::sgd_step(params.data.data(), first_moment.data.size() ? first_moment.data.data() : nullptr, grads.data.data(),
                   clip_scale.data(), norm, b.scalars, visited, o.momentum, o.weight_decay,
                   o.weight_decay_embedding, s());
  } else {
    cuda::adam_step(params.data.data(), first_moment.data.data(), second_moment.data.data(), grads.data.data(),
                    clip_scale.data(), norm, b.scalars, visited, o.beta1, o.beta2, o.epsilon,
                    o.weight_decay_embedding, s());
  }
  cuda::finish_step(totals.data(), norm, b.scalars, s());
}

// Data-parallel: the step's batch as every rank sees it decides the row bound (the most rows any
// rank's shard can touch: its positions' current words plus its identifier ids, at most V), so
// every rank sizes its collectives alike; returns this rank's shard (shard_of, as the CPU engine)
// and, in `whole`, the whole batch's loss denominators, summed in its sample order.
const Batch& CudaModel::Impl::shard_of_step(const Batch& batch, cuda::WholeBatch& whole) {
  const int ranks = exchange->size();
  const size_t T = static_cast<size_t>(config.seq_len);
  int64_t most = 0;
  for (int r = 0; r < ranks; ++r) {
    const Shard part = shard_of(batch.size, r, ranks);
    const size_t p0 = static_cast<size_t>(part.first) * T, p1 = p0 + static_cast<size_t>(part.count) * T;
    most = std::max<int64_t>(most, static_cast<int64_t>(p1 - p0) + batch.identifier_offsets[p1] -
                                       batch.identifier_offsets[p0]);
  }
  most = std::min<int64_t>(most, config.vocab_size);
  if (most > exchange->bound()) {
    // Rare (the bound starts at 5 rows a position): the union's rows are forgotten, so clear their
    // gradients first; graphs holding the old buffers are recaptured (the generation changes).
    drain();
    cuda::zero_gradients(grads.data.data(), range(true), s());
    exchange->reserve(most + most / 2, s());
    ENHANCED_CUDA_CHECK(cudaStreamSynchronize(s()));
  }
  const Shard mine = shard_of(batch.size, exchange->rank(), ranks);
  slice_batch(shard, batch, mine.first, mine.count);
  whole.batch = batch.size;
  whole.total_weight = steps::total_class_weight(
      batch.labels.data(), class_weights_host.empty() ? nullptr : class_weights_host.data(), batch.size);
  return shard;
}

// Before the collectives: this rank's forward and backward over its shard (none when it is empty,
// but its previous rows still clear), its loss share and correct count, its rows packed.
void CudaModel::Impl::shard_pass(const BatchView& b) {
  if (b.size > 0) {
    forward_pass(b, true);
    cuda::shard_totals(shard_sums.data(), scalars.data(), act.logits, b.labels, b.size, config.num_labels, s());
    backward_pass(b);
    exchange->pack(grads.embedding, embedding_workspace.touched_rows(), embedding_workspace.touched_count(), s());
  } else {
    cuda::zero_gradients(grads.data.data(), range(true), s());
    cuda::shard_totals(shard_sums.data(), nullptr, nullptr, nullptr, 0, config.num_labels, s());
    exchange->pack(grads.embedding, nullptr, nullptr, s());
  }
}

// After the collectives: every rank's rows added in rank order, then the optimizer step on the
// whole batch's gradient (or, for compute_gradients, the whole batch's loss into scalars[0]).
void CudaModel::Impl::merge_pass(const BatchView& b, StepKind kind) {
  exchange->merge(grads.embedding, s());
  if (kind == StepKind::train) return step(b);
  ENHANCED_CUDA_CHECK(
      cudaMemcpyAsync(scalars.data(), shard_sums.data(), sizeof(double), cudaMemcpyDeviceToDevice, s()));
}

void CudaModel::Impl::wait_and_read(const BatchView& b, float* logits_out) {
  ENHANCED_CUDA_CHECK(cudaMemcpyAsync(scalars_host.data(), scalars.data(), 2 * sizeof(double), cudaMemcpyDeviceToHost,
                                      s()));
  ENHANCED_CUDA_CHECK(cudaMemcpyAsync(totals_host.data(), totals.data(), sizeof(DeviceTotals), cudaMemcpyDeviceToHost,
                                      s()));
  const size_t logit_count = static_cast<size_t>(b.size) * config.num_labels;
  if (logits_out)
    ENHANCED_CUDA_CHECK(cudaMemcpyAsync(logits_host.data(), act.logits, logit_count * sizeof(float),
                                        cudaMemcpyDeviceToHost, s()));
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(s()));
  if (logits_out) std::memcpy(logits_out, logits_host.data(), logit_count * sizeof(float));
}

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
  const size_t P = static_cast<size_t>(max_batch) * c.seq_len;
  const size_t L = c.num_labels;
  const size_t F = static_cast<size_t>(max_batch) * c.pooled_features();
  m.lstm = std::make_unique<cuda::CudnnBiLstm>(m.cudnn.get(), max_batch, c.seq_len, c.embedding_dim, c.hidden,
                                               options.tf32, options.rnn_algorithm, precision == Precision::bf16);
  if (precision == Precision::bf16)
    m.dense_bf16.resize(cuda::dense_bf16_scratch_size(max_batch, c.pooled_features(), c.num_labels));
  m.params.allocate(c, m.s());
  m.grads.allocate(c, m.s());
  const size_t moments = moment_names(optimizer).size();
  if (moments > 0) m.first_moment.allocate(c, m.s());
  if (moments > 1) m.second_moment.allocate(c, m.s());
  const std::vector<ActivationSlot> activations = activation_layout(c, max_batch, 0, true);
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
  m.layout = BatchLayout(P, static_cast<size_t>(max_batch));
  m.id_capacity = 4 * P;
  for (Slot& slot : m.slots) {
    slot.uploaded = cuda::make_event();
    slot.consumed = cuda::make_event();
  }
  m.allocate_batch_blocks();
  m.embedding_workspace.reserve(static_cast<int>(P), static_cast<int64_t>(m.id_capacity), c.vocab_size,
                                c.embedding_dim, m.s());
  m.scalars_host.resize(2);
  m.logits_host.resize(max_batch * L);
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
