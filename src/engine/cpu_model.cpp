// The model on the CPU: model_forward / model_backward (the layers' calls, in order and in
// reverse), and its stages alone for the bench (model_parts). The CPU engine around them is
// cpu_engine.cpp.
#include "engine/cpu_model.h"

#include <algorithm>

#include "enhanced/common.h"
#include "enhanced/step_parts.h"
#include "layers/cpu/packing_clock.h"
#include "layers/dense.h"
#include "layers/embedding_blend.h"
#include "layers/lstm.h"
#include "layers/softmax_xent.h"

namespace enhanced {

template <class Real>
std::vector<ActivationSlot> cpu_activation_layout(const ModelConfig& config, int batch) {
  return activation_layout(config, batch,
                           bilstm_workspace_size<Real>(batch, config.seq_len, config.embedding_dim, config.hidden),
                           dense_workspace_size<Real>(batch, config.pooled_features(), config.num_labels),
                           LstmRows::fused_pool);
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
void blend_forward(Activations<Real>& a, const ParameterBuffer<Real>& params, const Batch& batch, int threads) {
  const ModelConfig& c = params.config;
  embedding_blend_forward(a.x, batch.identifier_offsets.data(), batch.identifier_ids.data(), batch.cur_word_ids.data(),
                          params.embedding, batch.positions(), c.embedding_dim, c.blend, threads);
}

template <class Real>
void blend_backward(ParameterBuffer<Real>& grads, Activations<Real>& a, const Batch& batch, int threads) {
  const ModelConfig& c = grads.config;
  embedding_blend_backward(grads.embedding, a.dx, batch.identifier_offsets.data(), batch.identifier_ids.data(),
                           batch.cur_word_ids.data(), batch.positions(), c.embedding_dim, c.blend, threads);
}

// The BiLSTM with the max-pool fused into it: pooled and argmax straight from each step's h, y
// not written (nothing reads it here). keep: save the gates and cells for lstm_backward (a
// forward without its backward keeps none).
template <class Real>
void lstm_forward(Activations<Real>& a, const ParameterBuffer<Real>& params, int batch, int threads,
                  Precision precision, bool keep = true) {
  const ModelConfig& c = params.config;
  BiLstmState<Real> saved{keep ? a.gates : nullptr, keep ? a.cell : nullptr, a.lstm_workspace};
  bilstm_maxpool_forward(a.pooled, a.argmax, static_cast<Real*>(nullptr), saved, a.x, params.weight_ih,
                         params.weight_hh, params.bias_ih, params.bias_hh, batch, c.seq_len, c.embedding_dim, c.hidden,
                         c.pool, threads, precision);
}

template <class Real>
void lstm_backward(ParameterBuffer<Real>& grads, Activations<Real>& a, const ParameterBuffer<Real>& params, int batch,
                   int threads, Precision precision) {
  const ModelConfig& c = params.config;
  BiLstmState<Real> saved{a.gates, a.cell, a.lstm_workspace};
  bilstm_maxpool_backward(a.dx, grads.weight_ih, grads.weight_hh, grads.bias_ih, grads.bias_hh, saved, a.argmax,
                          a.dpooled, a.x, params.weight_ih, params.weight_hh, batch, c.seq_len, c.embedding_dim,
                          c.hidden, c.pool, threads, precision);
}

// Dense and the (class-weighted when class_weights) loss over the pooled features lstm_forward
// left; returns the mean loss (and d loss / d logits with_gradient).
template <class Real>
double head_forward(Activations<Real>& a, const ParameterBuffer<Real>& params, const Batch& batch, bool with_gradient,
                    const float* class_weights, const LossDenominator* whole, Precision precision,
                    ClassWeightMean class_weight_mean = ClassWeightMean::weights) {
  const ModelConfig& c = params.config;
  const int B = batch.size;
  dense_forward(a.logits, a.pooled, params.dense_weight, params.dense_bias, B, c.pooled_features(), c.num_labels,
                precision, a.dense_workspace);
  double mean_loss = 0;
  softmax_cross_entropy(with_gradient ? a.dlogits : static_cast<Real*>(nullptr), a.sample_losses, &mean_loss, a.logits,
                        batch.labels.data(), class_weights, B, c.num_labels, whole, class_weight_mean);
  return mean_loss;
}

template <class Real>
void head_backward(ParameterBuffer<Real>& grads, Activations<Real>& a, const ParameterBuffer<Real>& params, int batch,
                   Precision precision) {
  const ModelConfig& c = params.config;
  dense_backward(a.dpooled, grads.dense_weight, grads.dense_bias, a.dlogits, a.pooled, params.dense_weight, batch,
                 c.pooled_features(), c.num_labels, precision, a.dense_workspace);
}

}  // namespace

template <class Real>
double model_forward(Activations<Real>& a, const ParameterBuffer<Real>& params, const Batch& batch, int threads,
                     bool with_gradient, const float* class_weights, const LossDenominator* whole,
                     Precision precision, ClassWeightMean class_weight_mean) {
  const ModelConfig& c = params.config;
  // The engine checked the batch (check_batch); a pass is at most the activations' capacity.
  if (batch.size > a.capacity || batch.seq_len != c.seq_len)
    fail("internal: a pass of ", batch.size, " x ", batch.seq_len, " positions; the activations hold ", a.capacity,
         " x ", c.seq_len);
  blend_forward(a, params, batch, threads);
  lstm_forward(a, params, batch.size, threads, precision, with_gradient);
  return head_forward(a, params, batch, with_gradient, class_weights, whole, precision, class_weight_mean);
}

template <class Real>
void model_backward(ParameterBuffer<Real>& grads, Activations<Real>& a, const ParameterBuffer<Real>& params,
                    const Batch& batch, int threads, Precision precision) {
  head_backward(grads, a, params, batch.size, precision);
  lstm_backward(grads, a, params, batch.size, threads, precision);
  blend_backward(grads, a, batch, threads);
}

// The model's stages alone, on the caller's buffers (the bench times each).
std::vector<EnginePart> model_parts(Activations<float>& a, ParameterBuffer<float>& p, ParameterBuffer<float>& g,
                                    const Batch& batch, int threads, Precision precision, const float* class_weights) {
  const int B = batch.size;
  std::vector<EnginePart> out;
  out.push_back({step_part::blend, {}, [&, threads] {
    blend_forward(a, p, batch, threads);
    blend_backward(g, a, batch, threads);
  }, {}});
  out.push_back({step_part::bilstm_forward, {}, [&, B, threads, precision] { lstm_forward(a, p, B, threads, precision); }, {}});
  out.push_back({step_part::bilstm, {}, [&, B, threads, precision] {
    lstm_forward(a, p, B, threads, precision);
    lstm_backward(g, a, p, B, threads, precision);
  }, {}});
  out.push_back({step_part::head, {}, [&, B, precision, class_weights] {
    head_forward(a, p, batch, true, class_weights, nullptr, precision);
    head_backward(g, a, p, B, precision);
  }, {}});
  // The layers' packing and conversion of GEMM operands within a forward and backward, the
  // threads' sum divided by the threads: its share of the step's time.
  out.push_back({step_part::packing,
                 [] {
                   packing_clock::set_measuring(true);
                   packing_clock::reset();
                 },
                 [&, B, threads, precision, class_weights] {
                   lstm_forward(a, p, B, threads, precision);
                   head_forward(a, p, batch, true, class_weights, nullptr, precision);
                   head_backward(g, a, p, B, precision);
                   lstm_backward(g, a, p, B, threads, precision);
                 },
                 [threads] {
                   const double seconds = packing_clock::seconds() / std::max(1, std::min(threads, 2));
                   packing_clock::reset();
                   return seconds;
                 }});
  return out;
}

template std::vector<ActivationSlot> cpu_activation_layout<float>(const ModelConfig&, int);
template std::vector<ActivationSlot> cpu_activation_layout<double>(const ModelConfig&, int);
template struct Activations<float>;
template struct Activations<double>;
template double model_forward<float>(Activations<float>&, const ParameterBuffer<float>&, const Batch&, int, bool,
                                     const float*, const LossDenominator*, Precision, ClassWeightMean);
template double model_forward<double>(Activations<double>&, const ParameterBuffer<double>&, const Batch&, int, bool,
                                      const float*, const LossDenominator*, Precision, ClassWeightMean);
template void model_backward<float>(ParameterBuffer<float>&, Activations<float>&, const ParameterBuffer<float>&,
                                    const Batch&, int, Precision);
template void model_backward<double>(ParameterBuffer<double>&, Activations<double>&, const ParameterBuffer<double>&,
                                     const Batch&, int, Precision);

}  // namespace enhanced
