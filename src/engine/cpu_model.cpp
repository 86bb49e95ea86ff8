// The model on the CPU: model_forward / model_backward (the layers' calls, in order and in
// reverse), and the CPU engine, whose training step is the one CPU step of the code base.
#include "engine/cpu_model.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "engine/data_parallel.h"
#include "enhanced/common.h"
#include "enhanced/cpu.h"
#include "enhanced/data_parallel.h"
#include "layers/cpu/bf16_gemm.h"
#include "layers/cpu/blas.h"
#include "layers/cpu/packing_clock.h"
#include "layers/dense.h"
#include "layers/embedding_blend.h"
#include "layers/lstm.h"
#include "layers/maxpool.h"
#include "layers/optimizer.h"
#include "layers/softmax_xent.h"
#include "steps/gradient_exchange_steps.h"
#include "steps/step_totals_steps.h"

namespace enhanced {

int configure_cpu_threads(int requested) {
  const int threads = requested > 0 ? requested : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  openblas_set_num_threads(1);
  omp_set_num_threads(threads);
  return threads;
}

void softmax_probabilities(float* probabilities, const float* logits, int batch, int num_labels) {
  softmax_forward(probabilities, logits, batch, num_labels);
}

std::string cpu_blas_name() { return openblas_get_config(); }

double cpu_gemm_gflops(int threads, int warmup, int runs) {
  const int m = 4096, n = 1024, k = 160;
  std::vector<float> a(static_cast<size_t>(m) * k, 0.5f), b(static_cast<size_t>(k) * n, 0.25f), c(static_cast<size_t>(m) * n);
  openblas_set_num_threads(threads);
  double best = std::numeric_limits<double>::infinity();
  for (int run = 0; run < warmup + runs; ++run) {
    const auto start = std::chrono::steady_clock::now();
    gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (run >= warmup) best = std::min(best, seconds);
  }
  return 2.0 * m * n * k / best / 1e9;  // the best run: what the machine can do, not what it did under load
}

template <class Real>
std::vector<ActivationSlot> cpu_activation_layout(const ModelConfig& config, int batch) {
  return activation_layout(config, batch,
                           bilstm_workspace_size<Real>(batch, config.seq_len, config.embedding_dim, config.hidden),
                           dense_workspace_size<Real>(batch, config.pooled_features(), config.num_labels), false);
}

template <class Real>
void Activations<Real>::reserve(const ModelConfig& config, int batch) {
  if (batch <= capacity) return;
  const std::vector<ActivationSlot> layout = cpu_activation_layout<Real>(config, batch);
  data.assign(activation_count(layout), Real(0));
  this->carve(data.data(), layout);
  argmax_data.assign(static_cast<size_t>(batch) * config.pooled_features(), 0);
  this->argmax = argmax_data.data();
  capacity = batch;
}

namespace {

// The model's stages, each a forward or its backward: model_forward and model_backward are their
// calls in order and in reverse, and the bench times each stage alone (CpuEngine::parts).
template <class Real>
void blend_forward(Activations<Real>& a, const ParameterBuffer<Real>& params, const Batch& batch) {
  const ModelConfig& c = params.config;
  embedding_blend_forward(a.x, batch.identifier_offsets.data(), batch.identifier_ids.data(), batch.cur_word_ids.data(),
                          params.embedding, batch.positions(), c.embedding_dim, c.blend);
}

template <class Real>
void blend_backward(ParameterBuffer<Real>& grads, Activations<Real>& a, const Batch& batch) {
  const ModelConfig& c = grads.config;
  embedding_blend_backward(grads.embedding, a.dx, batch.identifier_offsets.data(), batch.identifier_ids.data(),
                           batch.cur_word_ids.data(), batch.positions(), c.embedding_dim, c.blend);
}

// keep: save the gates and cells for lstm_backward (a forward without its backward keeps none).
template <class Real>
void lstm_forward(Activations<Real>& a, const ParameterBuffer<Real>& params, int batch, int threads,
                  Precision precision, bool keep = true) {
  const ModelConfig& c = params.config;
  BiLstmState<Real> saved{keep ? a.gates : nullptr, keep ? a.cell : nullptr, a.lstm_workspace};
  bilstm_forward(a.y, saved, a.x, params.weight_ih, params.weight_hh, params.bias_ih, params.bias_hh, batch, c.seq_len,
                 c.embedding_dim, c.hidden, threads, precision);
}

template <class Real>
void lstm_backward(ParameterBuffer<Real>& grads, Activations<Real>& a, const ParameterBuffer<Real>& params, int batch,
                   int threads, Precision precision) {
  const ModelConfig& c = params.config;
  BiLstmState<Real> saved{a.gates, a.cell, a.lstm_workspace};
  bilstm_backward(a.dx, grads.weight_ih, grads.weight_hh, grads.bias_ih, grads.bias_hh, saved, a.y, a.dy, a.x,
                  params.weight_ih, params.weight_hh, batch, c.seq_len, c.embedding_dim, c.hidden, threads, precision);
}

// Max-pool, dense and the (class-weighted when class_weights) loss; returns the mean loss (and
// d loss / d logits with_gradient).
template <class Real>
double head_forward(Activations<Real>& a, const ParameterBuffer<Real>& params, const Batch& batch, bool with_gradient,
                    const float* class_weights, const LossDenominator* whole, Precision precision) {
  const ModelConfig& c = params.config;
  const int B = batch.size;
  maxpool_forward(a.pooled, a.argmax, a.y, B, c.seq_len, 2 * c.hidden, c.pool);
  dense_forward(a.logits, a.pooled, params.dense_weight, params.dense_bias, B, c.pooled_features(), c.num_labels,
                precision, a.dense_workspace);
  double mean_loss = 0;
  softmax_cross_entropy(with_gradient ? a.dlogits : static_cast<Real*>(nullptr), a.sample_losses, &mean_loss, a.logits,
                        batch.labels.data(), class_weights, B, c.num_labels, whole);
  return mean_loss;
}

template <class Real>
void head_backward(ParameterBuffer<Real>& grads, Activations<Real>& a, const ParameterBuffer<Real>& params, int batch,
                   Precision precision) {
  const ModelConfig& c = params.config;
  dense_backward(a.dpooled, grads.dense_weight, grads.dense_bias, a.dlogits, a.pooled, params.dense_weight, batch,
                 c.pooled_features(), c.num_labels, precision, a.dense_workspace);
  maxpool_backward(a.dy, a.argmax, a.dpooled, batch, c.seq_len, 2 * c.hidden, c.pool);
}

}  // namespace

template <class Real>
double model_forward(Activations<Real>& a, const ParameterBuffer<Real>& params, const Batch& batch, int threads,
                     bool with_gradient, const float* class_weights, const LossDenominator* whole,
                     Precision precision) {
  const ModelConfig& c = params.config;
  check_batch_seq_len(batch, c);
  if (batch.size > a.capacity) fail("internal: batch of ", batch.size, " exceeds activations sized for ", a.capacity);
  blend_forward(a, params, batch);
  lstm_forward(a, params, batch.size, threads, precision, with_gradient);
  return head_forward(a, params, batch, with_gradient, class_weights, whole, precision);
}

template <class Real>
void model_backward(ParameterBuffer<Real>& grads, Activations<Real>& a, const ParameterBuffer<Real>& params,
                    const Batch& batch, int threads, Precision precision) {
  head_backward(grads, a, params, batch.size, precision);
  lstm_backward(grads, a, params, batch.size, threads, precision);
  blend_backward(grads, a, batch);
}

template std::vector<ActivationSlot> cpu_activation_layout<float>(const ModelConfig&, int);
template std::vector<ActivationSlot> cpu_activation_layout<double>(const ModelConfig&, int);
template struct Activations<float>;
template struct Activations<double>;
template double model_forward<float>(Activations<float>&, const ParameterBuffer<float>&, const Batch&, int, bool,
                                     const float*, const LossDenominator*, Precision);
template double model_forward<double>(Activations<double>&, const ParameterBuffer<double>&, const Batch&, int, bool,
                                      const float*, const LossDenominator*, Precision);
template void model_backward<float>(ParameterBuffer<float>&, Activations<float>&, const ParameterBuffer<float>&,
                                    const Batch&, int, Precision);
template void model_backward<double>(ParameterBuffer<double>&, Activations<double>&, const ParameterBuffer<double>&,
                                     const Batch&, int, Precision);

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
        class_weights_(options.class_weights),
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
    const int64_t step = optimizer_->steps + 1;
    check_step_learning_rate(learning_rate, step);
    int64_t correct = 0;
    double loss = 0;
    if (communicator_) {
      loss = shard_gradients(batch, correct);
    } else {
      loss = gradients(batch);
      correct = count_correct(batch.labels.data(), batch.size);
    }
    steps::account_loss(totals_, loss, batch.size, correct, step);
    if (totals_.halted != Halt::none) return;
    // A non-finite gradient norm skips the update and halts (every rank alike: the same gradient).
    steps::account_update(totals_, optimizer_step(params_, *optimizer_, grads_, rows_, learning_rate), step);
    clear_gradients();
  }

  TrainTotals collect() override {
    const TrainTotals out = totals_;
    std::memset(static_cast<void*>(&totals_), 0, kTotalsCounterBytes);  // the halt stays, as on the device
    return out;
  }

  double forward(const Batch& batch, float* logits) override {
    check_size(batch);
    const double loss = model_forward(activations_, params_, batch, threads_, false, nullptr, nullptr, precision_);
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
  std::string closing_note() const override { return ""; }

  std::vector<EnginePart> parts(const Batch& batch) override;

 private:
  // grads_ = d loss / d params on `batch` (rows_ its touched rows); returns the mean loss.
  double gradients(const Batch& batch) {
    check_size(batch);
    ensure_gradients();
    clear_gradients();
    embedding_touched_rows(rows_, batch.identifier_ids.data(), static_cast<int64_t>(batch.identifier_ids.size()),
                           batch.cur_word_ids.data(), batch.positions());
    const double loss = model_forward(activations_, params_, batch, threads_, true, weights_or_null(), nullptr, precision_);
    if (!std::isfinite(loss)) return loss;
    model_backward(grads_, activations_, params_, batch, threads_, precision_);
    written_rows_ = steps::rows_left_by(false);
    return loss;
  }

  // The whole batch's gradient on every rank of a data-parallel run, from this rank's part of
  // it (take_shard); returns the whole batch's mean loss, `correct` its samples predicted right.
  double shard_gradients(const Batch& batch, int64_t& correct) {
    check_size(batch);
    ensure_gradients();
    clear_gradients();
    // The loss's denominators are the whole batch's (take_shard).
    LossDenominator whole;
    const Shard shard =
        take_shard(shard_batch_, batch, communicator_->rank(), communicator_->size(), weights_or_null(), &whole);
    double reduced[2] = {0, 0};  // this rank's share of the mean loss, its correct predictions
    rows_.clear();
    if (shard.count > 0) {
      embedding_touched_rows(rows_, shard_batch_.identifier_ids.data(),
                             static_cast<int64_t>(shard_batch_.identifier_ids.size()), shard_batch_.cur_word_ids.data(),
                             shard_batch_.positions());
      reduced[0] =
          model_forward(activations_, params_, shard_batch_, threads_, true, weights_or_null(), &whole, precision_);
      reduced[1] = static_cast<double>(count_correct(shard_batch_.labels.data(), shard.count));
    }
    communicator_->sum(reduced, 2);
    correct = static_cast<int64_t>(reduced[1]);
    if (!std::isfinite(reduced[0])) return reduced[0];  // every rank halts alike
    if (shard.count > 0) model_backward(grads_, activations_, params_, shard_batch_, threads_, precision_);
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

  void check_size(const Batch& batch) const {
    if (batch.size < 1 || batch.size > max_batch_)
      fail("batch of ", batch.size, " samples; the engine holds 1..", max_batch_);
  }

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
  Communicator* communicator_;  // null: alone
  Activations<float> activations_;
  std::vector<int32_t> rows_;
  steps::GradientRows written_rows_ = steps::GradientRows::clear;
  TrainTotals totals_;
  Batch shard_batch_;
  GradientExchange exchange_;
};

// The model's stages alone, on the engine's buffers (the bench times each).
std::vector<EnginePart> CpuEngine::parts(const Batch& batch) {
  check_size(batch);
  ensure_gradients();
  Activations<float>& a = activations_;
  ParameterBuffer<float>& p = params_;
  ParameterBuffer<float>& g = grads_;
  const int B = batch.size, threads = threads_;
  const Precision precision = precision_;
  std::vector<EnginePart> out;
  out.push_back({"blend fwd+bwd", {}, [&] {
    blend_forward(a, p, batch);
    blend_backward(g, a, batch);
  }, {}});
  out.push_back({"bilstm fwd", {}, [&, B, threads, precision] { lstm_forward(a, p, B, threads, precision); }, {}});
  out.push_back({"bilstm fwd+bwd", {}, [&, B, threads, precision] {
    lstm_forward(a, p, B, threads, precision);
    lstm_backward(g, a, p, B, threads, precision);
  }, {}});
  out.push_back({"head fwd+bwd", {}, [&, B, precision] {
    head_forward(a, p, batch, true, weights_or_null(), nullptr, precision);
    head_backward(g, a, p, B, precision);
  }, {}});
  // The layers' packing and conversion of GEMM operands within a forward and backward, the
  // threads' sum divided by the threads: its share of the step's time.
  out.push_back({"packing in f+b",
                 [] {
                   packing_clock::set_measuring(true);
                   packing_clock::reset();
                 },
                 [&, B, threads, precision] {
                   lstm_forward(a, p, B, threads, precision);
                   head_forward(a, p, batch, true, weights_or_null(), nullptr, precision);
                   head_backward(g, a, p, B, precision);
                   lstm_backward(g, a, p, B, threads, precision);
                 },
                 [threads] {
                   const double seconds = packing_clock::seconds() / std::max(1, std::min(threads, 2));
                   packing_clock::reset();
                   return seconds;
                 }});
  if (optimizer_) {
    // A step on zero gradients over the batch's rows: the update's cost, not the gradients'.
    out.push_back({"optimizer",
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
