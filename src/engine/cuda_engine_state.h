// The CUDA engine (cuda_engine.h): its class, its device state and the device-side types that
// state is built from, shared by cuda_engine.cu (the Engine members: construction, transfers, the
// step calls) and cuda_engine_step.cu (the step pipeline: batch uploads, graphs, the passes).
// Private to them.
#pragma once

#include <string>
#include <vector>

#include "engine/cuda_exchange.h"
#include "engine/cuda_engine.h"
#include "kernels/layers.h"
#include "kernels/step_totals.h"
#include "steps/gradient_exchange_steps.h"

namespace enhanced {

using cuda::DeviceBuffer;
using cuda::PinnedBuffer;
using cuda::DeviceTotals;
using cuda::StepScalars;


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
static_assert(sizeof(cuda::LossDenominator) <= (kHeaderInts - kWholeInts) * sizeof(int32_t),
              "so must the denominators");

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


// What the engine keeps on the device, and the step pipeline over it.
struct CudaEngineState {
  ModelConfig config;
  OptimizerConfig optimizer;
  CudaOptions options;
  Precision precision = Precision::fp32;  // fp32 or bf16 (bf16-emulated is refused: a CPU path)
  int max_batch = 0;   // the whole batch a step is given
  // The most samples one device pass computes: max_batch alone; in a data-parallel run this
  // rank's shard of a whole batch (shard_of), which is what the LSTM, its chosen algorithm, the
  // activations and the id buffers are sized for (as the CPU engine sizes its activations).
  int pass_batch = 0;
  int64_t steps = 0;  // optimizer steps queued (all applied unless a collect says otherwise)

  cuda::UniqueStream stream, copy_stream;
  cuda::UniqueCublas cublas;
  DeviceBuffer<unsigned char> cublas_workspace;
  cuda::UniqueCudnn cudnn;
  std::unique_ptr<cuda::CudnnBiLstm> lstm;
  cuda::EmbeddingGradWorkspace embedding_workspace;

  DeviceParameters params, grads, first_moment, second_moment;

  // Activations (device), sized for pass_batch: one allocation carved by activation_layout
  // (cuDNN keeps the LSTM's own state in its reserve space), and argmax's int32 buffer.
  DeviceBuffer<float> activation_data;
  DeviceBuffer<int32_t> argmax_data;
  ActivationTensors<float> act;
  // bf16: the dense GEMMs' bfloat16 operands (dense_bf16_scratch_size for pass_batch); empty in fp32.
  DeviceBuffer<uint16_t> dense_bf16;
  DeviceBuffer<double> scalars;  // [0] mean loss, [1] gradient norm, [2..258) norm partials
  DeviceBuffer<float> class_weights;  // L, the training loss's (empty: unweighted)
  ClassWeightMean class_weight_mean = ClassWeightMean::weights;  // what their weighted sum is divided by
  DeviceBuffer<float> clip_scale;
  DeviceBuffer<DeviceTotals> totals;
  PinnedBuffer<DeviceTotals> totals_host;
  PinnedBuffer<double> scalars_host;  // the mean loss of forward / compute_gradients
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
  // Which list names the gradient's non-zero rows: what the last backward queued left. Kept on
  // the host, in queue order: a pass whose backward clears through another list is preceded by
  // an eager clear through this one (clear_gradients), so no row outlives its step.
  steps::GradientRows written_rows = steps::GradientRows::clear;

  // Data-parallel (null alone): the exchange over the ranks, this rank's shard of a training
  // step's batch, the training loss's class weights on the host (the whole batch's denominator),
  // and the step's loss share and correct count, summed over the ranks.
  std::unique_ptr<CudaGradientExchange> exchange;
  Batch shard;
  std::vector<float> class_weights_host;
  DeviceBuffer<double> shard_sums;

  struct BatchView {
    int size = 0, positions = 0;
    const StepScalars* scalars = nullptr;
    const cuda::LossDenominator* whole = nullptr;  // a shard of a data-parallel step (null: the whole batch)
    const int32_t *offsets = nullptr, *cur = nullptr, *labels = nullptr, *identifiers = nullptr;
  };

  cudaStream_t s() const { return stream.get(); }
  uint16_t* dense_scratch() { return dense_bf16.size() ? dense_bf16.data() : nullptr; }  // null: FP32 GEMMs
  int F() const { return config.pooled_features(); }
  uint64_t generation() const {
    return batch_generation + embedding_workspace.generation() + lstm->generation() +
           (exchange ? exchange->generation() : 0);
  }

  // The gradient's rows as `rows` names them (steps::GradientRows): a backward's own touched
  // rows (the embedding workspace's list) or the exchange's union of the ranks' rows.
  cuda::StepRange range(steps::GradientRows rows, bool rows_only) const {
    const bool exchanged = rows == steps::GradientRows::exchanged;
    cuda::StepRange r;
    r.total = parameter_count(config);
    r.table = static_cast<size_t>(config.vocab_size) * config.embedding_dim;
    r.dim = config.embedding_dim;
    r.rows_only = rows_only;
    r.rows = exchanged ? exchange->rows() : embedding_workspace.touched_rows();
    r.row_count = exchanged ? exchange->row_count() : embedding_workspace.touched_count();
    r.max_rows = exchanged ? exchange->max_rows() : embedding_workspace.entry_capacity();
    return r;
  }
  // The rows a pass's backward writes and its step visits: exchanged for a data-parallel
  // training step (a shard: b.whole), else its own.
  static steps::GradientRows rows_of(const BatchView& b) { return steps::rows_left_by(b.whole != nullptr); }

  void validate(const Batch& batch) const;
  void clear_gradients();
  void allocate_batch_blocks();
  void grow_ids(size_t ids);
  const Batch& shard_of_step(const Batch& batch, cuda::LossDenominator& whole);
  BatchView enqueue(const Batch& batch, StepKind kind, float learning_rate);
  void run_step(const BatchView& b, StepKind kind, int slot);
  template <class Body>
  void run_graph(const BatchView& b, int slot, int phase, const Body& body);
  void shard_pass(const BatchView& b);
  void merge_pass(const BatchView& b);
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

// The engine: the CPU engine's members in the same order (cpu_engine.cpp), over the state above.
class CudaEngine final : public Engine {
 public:
  CudaEngine(ParameterBuffer<float>& params, OptimizerState* optimizer, const EngineOptions& options);
  ~CudaEngine() override;
  CudaEngine(const CudaEngine&) = delete;
  CudaEngine& operator=(const CudaEngine&) = delete;

  const ModelConfig& config() const override { return s_.config; }
  std::string summary() const override;
  RnnAlgorithm rnn_algorithm() const override { return s_.lstm->algorithm(); }
  bool queues_steps() const override { return true; }

  void enqueue_train_step(const Batch& batch, float learning_rate) override;
  TrainTotals collect() override;

  double forward(const Batch& batch, float* logits) override;
  double compute_gradients(const Batch& batch, float* logits) override;
  void download_gradients(ParameterBuffer<float>& grads) override;

  void sync_to_host() override;
  void sync_to_device() override;
  std::string closing_note() const override;
  // One fused pipeline: no part runs alone.
  std::vector<EnginePart> parts(const Batch& batch) override {
    static_cast<void>(batch);
    return {};
  }

 private:
  void allocate(const ModelConfig& config, int max_batch, const EngineOptions& options);
  void allocate_batch_slots(size_t max_positions);
  void allocate_exchange(Communicator& ranks, int max_batch, const std::vector<float>& class_weights);
  void upload_optimizer_state();

  ParameterBuffer<float>& params_;
  OptimizerState* optimizer_;
  std::string rank_device_;  // "GPU 1 of 8 (local rank 1), 16 ranks; " in a data-parallel run, else ""
  CudaEngineState s_;
};

}  // namespace enhanced
