#include "enhanced/network.h"

#include <omp.h>

#include <algorithm>
#include <thread>

#include "enhanced/common.h"
#include "layers/blas.h"
#include "layers/dense.h"
#include "layers/embedding_blend.h"
#include "layers/lstm.h"
#include "layers/maxpool.h"
#include "layers/softmax_xent.h"

namespace enhanced {

int configure_cpu_threads(int requested) {
  const int threads = requested > 0 ? requested : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  openblas_set_num_threads(1);
  omp_set_num_threads(threads);
  return threads;
}

template <class Real>
void Activations<Real>::reserve(const ModelConfig& config, int batch) {
  if (batch <= capacity) return;
  const size_t P = static_cast<size_t>(batch) * config.seq_len;
  const size_t D = config.embedding_dim, H = config.hidden, L = config.num_labels;
  const size_t F = static_cast<size_t>(batch) * config.pooled_features();
  x.resize(P * D);
  gates.resize(P * 8 * H);
  cell.resize(P * 2 * H);
  y.resize(P * 2 * H);
  pooled.resize(F);
  argmax.resize(F);
  logits.resize(batch * L);
  dlogits.resize(batch * L);
  sample_losses.resize(batch);
  dpooled.resize(F);
  dy.resize(P * 2 * H);
  dx.resize(P * D);
  lstm_scratch.resize(bilstm_backward_scratch_size(batch, config.seq_len, config.embedding_dim, config.hidden));
  capacity = batch;
}

template <class Real>
double model_forward(Activations<Real>& a, const ParameterBuffer<Real>& params, const Batch& batch, int threads,
                     bool with_gradient) {
  const ModelConfig& c = params.config;
  if (batch.seq_len != c.seq_len) fail("batch has T = ", batch.seq_len, ", the model expects T = ", c.seq_len);
  if (batch.size > a.capacity) fail("internal: batch of ", batch.size, " exceeds activations sized for ", a.capacity);
  const int B = batch.size, T = c.seq_len, D = c.embedding_dim, H = c.hidden;
  embedding_blend_forward(a.x.data(), batch.identifier_offsets.data(), batch.identifier_ids.data(),
                          batch.cur_word_ids.data(), params.embedding, B * T, D, c.blend);
  bilstm_forward(a.y.data(), a.gates.data(), a.cell.data(), a.x.data(), params.weight_ih, params.weight_hh,
                 params.bias_ih, params.bias_hh, B, T, D, H, threads);
  maxpool_forward(a.pooled.data(), a.argmax.data(), a.y.data(), B, T, 2 * H, c.pool);
  dense_forward(a.logits.data(), a.pooled.data(), params.dense_weight, params.dense_bias, B, c.pooled_features(),
                c.num_labels);
  return softmax_cross_entropy(with_gradient ? a.dlogits.data() : static_cast<Real*>(nullptr),
                               a.sample_losses.data(), a.logits.data(), batch.labels.data(), B, c.num_labels);
}

template <class Real>
void model_backward(ParameterBuffer<Real>& grads, Activations<Real>& a, const ParameterBuffer<Real>& params,
                    const Batch& batch, int threads) {
  const ModelConfig& c = params.config;
  const int B = batch.size, T = c.seq_len, D = c.embedding_dim, H = c.hidden;
  dense_backward(a.dpooled.data(), grads.dense_weight, grads.dense_bias, a.dlogits.data(), a.pooled.data(),
                 params.dense_weight, B, c.pooled_features(), c.num_labels);
  maxpool_backward(a.dy.data(), a.argmax.data(), a.dpooled.data(), B, T, 2 * H, c.pool);
  bilstm_backward(a.dx.data(), grads.weight_ih, grads.weight_hh, grads.bias_ih, grads.bias_hh, a.gates.data(),
                  a.lstm_scratch.data(), a.cell.data(), a.y.data(), a.dy.data(), a.x.data(), params.weight_ih,
                  params.weight_hh, B, T, D, H, threads);
  embedding_blend_backward(grads.embedding, a.dx.data(), batch.identifier_offsets.data(), batch.identifier_ids.data(),
                           batch.cur_word_ids.data(), B * T, D, c.blend);
}

template struct Activations<float>;
template struct Activations<double>;
template double model_forward<float>(Activations<float>&, const ParameterBuffer<float>&, const Batch&, int, bool);
template double model_forward<double>(Activations<double>&, const ParameterBuffer<double>&, const Batch&, int, bool);
template void model_backward<float>(ParameterBuffer<float>&, Activations<float>&, const ParameterBuffer<float>&,
                                    const Batch&, int);
template void model_backward<double>(ParameterBuffer<double>&, Activations<double>&, const ParameterBuffer<double>&,
                                     const Batch&, int);

}  // namespace enhanced
