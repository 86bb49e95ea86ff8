// The training backends: the CPU engine, and (in CUDA builds) CudaModel behind the same calls.
#include "enhanced/backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "enhanced/common.h"
#include "enhanced/network.h"
#include "layers/embedding_blend.h"
#ifdef ENHANCED_HAVE_CUDA
#include "enhanced/cuda_model.h"
#endif

namespace enhanced {
namespace {

// Runs each step as it is queued, accumulating the totals the way the device does: loss * B in
// step order, the first largest logit against the label, a sticky halt on a non-finite loss.
class CpuBackend final : public TrainingBackend {
 public:
  CpuBackend(ParameterBuffer<float>& params, Optimizer& optimizer, int max_batch, int threads)
      : params_(params), grads_(params.config), optimizer_(optimizer), threads_(threads) {
    activations_.reserve(params.config, max_batch);
  }

  void enqueue_train_step(const Batch& batch) override {
    if (totals_.halted) return;
    embedding_touched_rows(rows_, batch.identifier_ids.data(), static_cast<int64_t>(batch.identifier_ids.size()),
                           batch.cur_word_ids.data(), batch.positions());
    const double loss = model_forward(activations_, params_, batch, threads_, true);
    if (!std::isfinite(loss)) {
      totals_.halted = 1;
      totals_.halted_step = optimizer_.steps() + 1;
      totals_.halted_value = loss;
      return;
    }
    model_backward(grads_, activations_, params_, batch, threads_);
    optimizer_.step(params_, grads_, rows_);  // a non-finite gradient throws, weights unchanged
    zero_gradients(grads_, rows_);
    const int L = params_.config.num_labels;
    for (int b = 0; b < batch.size; ++b) {
      const float* row = activations_.logits.data() + static_cast<size_t>(b) * L;
      totals_.correct += (std::max_element(row, row + L) - row) == batch.labels[b];
    }
    totals_.loss_sum += loss * batch.size;
    totals_.samples += batch.size;
    totals_.steps += 1;
  }

  TrainTotals collect() override {
    const TrainTotals out = totals_;
    totals_.loss_sum = 0;
    totals_.samples = totals_.correct = totals_.steps = 0;
    return out;
  }

  EvalResult evaluate(const Dataset& dataset, int batch_size) override {
    return enhanced::evaluate(params_, dataset, batch_size, threads_, false);
  }

  void sync_to_host() override {}  // the host's buffers are the model

 private:
  ParameterBuffer<float>& params_;
  ParameterBuffer<float> grads_;
  Optimizer& optimizer_;
  int threads_;
  Activations<float> activations_;
  std::vector<int32_t> rows_;
  TrainTotals totals_;
};

#ifdef ENHANCED_HAVE_CUDA
// CudaModel, which holds the parameters and moments on the GPU; the host's are refreshed from it.
class CudaBackend final : public TrainingBackend {
 public:
  CudaBackend(ParameterBuffer<float>& params, Optimizer& optimizer, int max_batch, CudaOptions& options)
      : params_(params), optimizer_(optimizer), model_(params.config, optimizer.config(), max_batch, options) {
    model_.upload_parameters(params_);
    model_.upload_optimizer_state(optimizer_.first_moment(), optimizer_.second_moment(), optimizer_.steps());
    options.rnn_algorithm = model_.rnn_algorithm();
    std::fprintf(stderr, "cuda: %s\n", model_.summary().c_str());
  }

  void enqueue_train_step(const Batch& batch) override { model_.enqueue_train_step(batch); }
  TrainTotals collect() override { return model_.collect(); }

  EvalResult evaluate(const Dataset& dataset, int batch_size) override {
    return enhanced::evaluate([&](const Batch& batch, float* logits) { return model_.forward(batch, logits); },
                              dataset, batch_size, params_.config.num_labels, false);
  }

  void sync_to_host() override {
    model_.download_parameters(params_);
    model_.download_optimizer_state(optimizer_.first_moment(), optimizer_.second_moment());
    optimizer_.set_steps(model_.optimizer_steps());
  }

  std::string closing_note() const override {
    if (!model_.graphs_off_reason().empty()) return "cuda: CUDA graphs " + model_.graphs_off_reason();
    return cat("cuda: ", model_.graph_replays(), " steps replayed from CUDA graphs");
  }

 private:
  ParameterBuffer<float>& params_;
  Optimizer& optimizer_;
  CudaModel model_;
};
#endif

}  // namespace

std::unique_ptr<TrainingBackend> make_training_backend(Device device, ParameterBuffer<float>& params,
                                                       Optimizer& optimizer, int max_batch, int threads,
                                                       CudaOptions& cuda) {
  if (device == Device::cpu) return std::make_unique<CpuBackend>(params, optimizer, max_batch, threads);
#ifdef ENHANCED_HAVE_CUDA
  return std::make_unique<CudaBackend>(params, optimizer, max_batch, cuda);
#else
  static_cast<void>(cuda);
  fail("this build has no CUDA backend");
#endif
}

}  // namespace enhanced
