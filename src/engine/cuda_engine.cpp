// CudaModel behind the Engine interface: it holds the parameters and moments on the GPU; the
// host's are refreshed from it by sync_to_host. Built only with the CUDA backend.
#include "engine/cuda_exchange.h"
#include "engine/cuda_model.h"
#include "enhanced/common.h"

namespace enhanced {
namespace {

// A data-parallel run's ranks (null alone): with more than one, this rank's GPU is made current
// first (its local rank modulo the host's devices) and the model exchanges gradients over NCCL.
Communicator* ranks_of(const EngineOptions& options) {
  return options.communicator && options.communicator->size() > 1 ? options.communicator : nullptr;
}

// "GPU 1 of 8 (local rank 1), 16 ranks; " for a rank of a data-parallel run, else "".
std::string rank_device(const Communicator* ranks) {
  if (!ranks) return "";
  if (!built_with_nccl())
    fail("--device cuda with ", ranks->size(), " ranks needs NCCL, and this build has none (configured with "
         "ENHANCED_NCCL=OFF, or nccl.h / libnccl.so.2 not found: set ENHANCED_NCCL_ROOT); --device cpu trains on "
         "several ranks without it");
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

class CudaEngine final : public Engine {
 public:
  CudaEngine(ParameterBuffer<float>& params, OptimizerState* optimizer, const EngineOptions& options)
      : params_(params), optimizer_(optimizer), device_(rank_device(ranks_of(options))),
        model_(params.config, optimizer_of(optimizer), options.max_batch, options.cuda, options.class_weights,
               options.precision, ranks_of(options)) {
    model_.upload_parameters(params_);
    if (optimizer_) model_.upload_optimizer_state(optimizer_->moment(0), optimizer_->moment(1), optimizer_->steps);
  }

  const ModelConfig& config() const override { return model_.config(); }
  std::string summary() const override { return "cuda, " + device_ + model_.summary(); }
  RnnAlgorithm rnn_algorithm() const override { return model_.rnn_algorithm(); }
  bool queues_steps() const override { return true; }

  void enqueue_train_step(const Batch& batch, float learning_rate) override {
    if (!optimizer_) fail("internal: this engine was made for inference only");
    model_.enqueue_train_step(batch, learning_rate);
  }
  TrainTotals collect() override { return model_.collect(); }

  double forward(const Batch& batch, float* logits) override { return model_.forward(batch, logits); }
  double compute_gradients(const Batch& batch, float* logits) override {
    return model_.compute_gradients(batch, logits);
  }
  void download_gradients(ParameterBuffer<float>& grads) override { model_.download_gradients(grads); }

  void sync_to_host() override {
    model_.download_parameters(params_);
    if (!optimizer_) return;
    model_.download_optimizer_state(optimizer_->moment(0), optimizer_->moment(1));
    optimizer_->steps = model_.optimizer_steps();
  }

  std::string closing_note() const override {
    if (!model_.graphs_off_reason().empty()) return "cuda: CUDA graphs " + model_.graphs_off_reason();
    return cat("cuda: ", model_.graph_replays(), " steps replayed from CUDA graphs");
  }

 private:
  ParameterBuffer<float>& params_;
  OptimizerState* optimizer_;
  std::string device_;  // before model_: it selects the rank's GPU
  CudaModel model_;
};

}  // namespace

std::unique_ptr<Engine> make_cuda_engine(ParameterBuffer<float>& params, OptimizerState* optimizer,
                                         const EngineOptions& options) {
  return std::make_unique<CudaEngine>(params, optimizer, options);
}

}  // namespace enhanced
