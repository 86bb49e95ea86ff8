// The CPU engine: each step run as it is queued, on the caller's buffers, through the model of
// cpu_model.h; its training step is the one CPU step of the code base.
#include "engine/cpu_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu_exchange.h"
#include "engine/cpu_model.h"
#include "enhanced/common.h"
#include "enhanced/data_parallel.h"
#include "enhanced/step_parts.h"
#include "layers/cpu/bf16_gemm.h"
#include "layers/embedding_blend.h"
#include "layers/optimizer.h"
#include "steps/gradient_exchange_steps.h"
#include "steps/step_totals_steps.h"

namespace enhanced {

namespace {

// Runs each step as it is queued, on the caller's buffers, accumulating the totals with the
// device's rules (steps/step_totals_steps.h): loss * B in step order, the first largest logit
// against the label, a sticky halt on a non-finite loss or gradient norm. Its members are the
// CUDA engine's (cuda_engine.h), in the same order.
class CpuEngine final : public Engine {
 public:
  CpuEngine(ParameterBuffer<float>& params, OptimizerState* optimizer, const EngineOptions& options)
      : params_(params), optimizer_(optimizer), threads_(options.threads),
        max_batch_(options.max_batch), rnn_algorithm_(options.cuda.rnn_algorithm), precision_(options.precision),
        class_weights_(options.class_weights), class_weight_mean_(options.class_weight_mean),
        communicator_(data_parallel_ranks(options)) {
    // An inference engine (enhanced-eval) holds no gradients unless compute_gradients asks
    // (the tests): estimate_memory counts them for training only.
    if (optimizer_) grads_ = ParameterBuffer<float>(params.config);
    // A rank of a data-parallel run computes its part of each batch only (shard 0 is the largest).
    activations_.reserve(params.config, communicator_ ? std::max(1, shard_of(max_batch_, 0, communicator_->size()).count)
                                                      : options.max_batch);
  }

  const ModelConfig& config() const override { return params_.config; }
  std::string summary() const override {
    std::string arithmetic = precision_ == Precision::fp32 ? "" : cat(", ", to_string(precision_));
    if (precision_ == Precision::bf16) arithmetic += cat(" (", bf16_gemm::kernel_name(), " kernels)");
    if (communicator_) return cat("cpu, ", threads_, " threads a rank, ", communicator_->size(), " ranks", arithmetic);
    return cat("cpu, ", threads_, " threads", arithmetic);
  }
  // No cuDNN here: the run records the algorithm it was asked for, unchanged.
  RnnAlgorithm rnn_algorithm() const override { return rnn_algorithm_; }

  bool queues_steps() const override { return false; }

  void enqueue_train_step(const Batch& batch, float learning_rate) override {
    if (!optimizer_) fail("internal: this engine was made for inference only");
    if (totals_.halted != Halt::none) return;
    const int64_t step_number = optimizer_->steps + 1;
    check_step_learning_rate(learning_rate, step_number);
    int64_t correct = 0;
    double loss = 0;
    if (communicator_) {
      loss = shard_gradients(batch, correct);
    } else {
      loss = gradients(batch);
      correct = count_correct(batch.labels.data(), batch.size);
    }
    step(loss, correct, step_number, batch.size, learning_rate);
  }

  TrainTotals collect() override {
    const TrainTotals out = totals_;
    std::memset(static_cast<void*>(&totals_), 0, kTotalsCounterBytes);  // the halt stays, as on the device
    return out;
  }

  double forward(const Batch& batch, float* logits) override {
    validate(batch);
    const double loss = forward_pass(batch, false);
    copy_logits(batch, logits);
    return loss;
  }

  double compute_gradients(const Batch& batch, float* logits) override {
    const double loss = gradients(batch);
    copy_logits(batch, logits);
    return loss;
  }

  void download_gradients(ParameterBuffer<float>& grads) override { grads = grads_; }
  void sync_to_host() override {}  // the host's buffers are the model
  void sync_to_device() override {}
  std::string closing_note() const override { return ""; }

  std::vector<EnginePart> parts(const Batch& batch) override;

 private:
  // The passes of a step, named and ordered as the CUDA engine's (CudaEngineState::forward_pass,
  // backward_pass, step): the loss of `batch`, weighed by class when with_gradient (the training
  // loss; evaluation's stays unweighted), `whole` the loss's denominators of a data-parallel shard.
  double forward_pass(const Batch& batch, bool with_gradient, const LossDenominator* whole = nullptr) {
    return model_forward(activations_, params_, batch, threads_, with_gradient,
                         with_gradient ? weights_or_null() : nullptr, whole, precision_, class_weight_mean_);
  }

  // grads_ = d loss / d params after forward_pass(batch, true). Gradients start at zero: the
  // pass first clears what the previous backward left (its rows, still in rows_), as the CUDA
  // engine's backward_pass does, then lists the rows this batch touches.
  void backward_pass(const Batch& batch) {
    clear_gradients();
    embedding_touched_rows(rows_, batch.identifier_ids.data(), static_cast<int64_t>(batch.identifier_ids.size()),
                           batch.cur_word_ids.data(), batch.positions());
    model_backward(grads_, activations_, params_, batch, threads_, precision_);
  }

  // The step's loss and accuracy into the totals, then the update (a non-finite loss or gradient
  // norm halts instead, every rank alike: the same loss and gradient).
  void step(double loss, int64_t correct, int64_t step_number, int batch_size, float learning_rate) {
    steps::account_loss(totals_, loss, batch_size, correct, step_number);
    if (totals_.halted != Halt::none) return;
    steps::account_update(totals_, optimizer_step(params_, *optimizer_, grads_, rows_, learning_rate), step_number);
  }

  // grads_ = d loss / d params on `batch` (rows_ its touched rows); returns the mean loss.
  double gradients(const Batch& batch) {
    validate(batch);
    ensure_gradients();
    const double loss = forward_pass(batch, true);
    if (!std::isfinite(loss)) return loss;
    backward_pass(batch);
    written_rows_ = steps::rows_left_by(false);
    return loss;
  }

  // The whole batch's gradient on every rank of a data-parallel run, from this rank's part of
  // it (take_shard); returns the whole batch's mean loss, `correct` its samples predicted right.
  double shard_gradients(const Batch& batch, int64_t& correct) {
    validate(batch);
    ensure_gradients();
    // The loss's denominators are the whole batch's (take_shard).
    LossDenominator whole;
    const Shard shard =
        take_shard(shard_batch_, batch, communicator_->rank(), communicator_->size(), weights_or_null(), &whole,
                   class_weight_mean_);
    double reduced[2] = {0, 0};  // this rank's share of the mean loss, its correct predictions
    if (shard.count > 0) {
      reduced[0] = forward_pass(shard_batch_, true, &whole);
      reduced[1] = static_cast<double>(count_correct(shard_batch_.labels.data(), shard.count));
    }
    communicator_->sum(reduced, 2);
    correct = static_cast<int64_t>(reduced[1]);
    if (!std::isfinite(reduced[0])) return reduced[0];  // every rank halts alike
    if (shard.count > 0) {
      backward_pass(shard_batch_);
    } else {
      clear_gradients();  // an empty shard adds nothing, and touches no row
      rows_.clear();
    }
    written_rows_ = steps::rows_left_by(true);
    exchange_.run(grads_, rows_, *communicator_);  // rows_ becomes the ranks' union
    return reduced[0];
  }

  // Samples whose first largest logit (activations_.logits, (B, L)) is the label.
  int64_t count_correct(const int32_t* labels, int batch) const {
    const int L = params_.config.num_labels;
    int64_t correct = 0;
    for (int b = 0; b < batch; ++b)
      correct += steps::predicted_label(activations_.logits + static_cast<size_t>(b) * L, L) == labels[b];
    return correct;
  }

  void ensure_gradients() {
    if (grads_.data.empty()) grads_ = ParameterBuffer<float>(params_.config);
  }

  // rows_ is the list written_rows_ names, either kind: the CPU keeps one list.
  void clear_gradients() {
    if (written_rows_ != steps::GradientRows::clear) zero_gradients(grads_, rows_);
    written_rows_ = steps::GradientRows::clear;
  }

  // The training loss's class weights (EngineOptions); evaluation's forward stays unweighted.
  const float* weights_or_null() const { return class_weights_.empty() ? nullptr : class_weights_.data(); }

  void validate(const Batch& batch) const { check_batch(batch, params_.config, max_batch_); }

  void copy_logits(const Batch& batch, float* logits) const {
    if (logits) std::copy_n(activations_.logits, static_cast<size_t>(batch.size) * params_.config.num_labels, logits);
  }

  ParameterBuffer<float>& params_;
  ParameterBuffer<float> grads_;
  OptimizerState* optimizer_;
  int threads_;
  int max_batch_;
  RnnAlgorithm rnn_algorithm_;
  Precision precision_;
  std::vector<float> class_weights_;
  ClassWeightMean class_weight_mean_;
  Communicator* communicator_;  // null: alone
  Activations<float> activations_;
  std::vector<int32_t> rows_;
  steps::GradientRows written_rows_ = steps::GradientRows::clear;
  TrainTotals totals_;
  Batch shard_batch_;
  CpuGradientExchange exchange_;
};

// The model's stages alone (model_parts), then the optimizer's step, on the engine's buffers.
std::vector<EnginePart> CpuEngine::parts(const Batch& batch) {
  validate(batch);
  ensure_gradients();
  ParameterBuffer<float>& p = params_;
  ParameterBuffer<float>& g = grads_;
  std::vector<EnginePart> out = model_parts(activations_, p, g, batch, threads_, precision_, weights_or_null());
  if (optimizer_) {
    // A step on zero gradients over the batch's rows: the update's cost, not the gradients'.
    out.push_back({step_part::optimizer,
                   [&] {
                     std::fill(g.data.begin(), g.data.end(), 0.0f);
                     written_rows_ = steps::GradientRows::clear;
                     embedding_touched_rows(rows_, batch.identifier_ids.data(),
                                            static_cast<int64_t>(batch.identifier_ids.size()),
                                            batch.cur_word_ids.data(), batch.positions());
                   },
                   [&] { optimizer_step(p, *optimizer_, g, rows_, optimizer_->config.learning_rate); },
                   {}});
  }
  return out;
}

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(ParameterBuffer<float>& params, OptimizerState* optimizer,
                                        const EngineOptions& options) {
  if (options.max_batch < 1) fail("engine: max batch must be positive, got ", options.max_batch);
  const std::string unavailable = cpu_precision_unavailable_reason(options.precision);
  if (!unavailable.empty()) fail(unavailable);
  return std::make_unique<CpuEngine>(params, optimizer, options);
}

}  // namespace enhanced
