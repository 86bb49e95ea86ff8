#include "layers/cpu/lstm_pointwise.h"
#include "layers/cpu/multiversion.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace enhanced::lstm_pointwise {
namespace {

// exp(x) for float: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-7 polynomial (Cephes expf),
// 2^n through the exponent bits. Branch-free so loops over it vectorize.
ENHANCED_INLINE float exp_vectorizable(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);  // keeps 2^n a normal float
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r -= n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

ENHANCED_INLINE float sigmoid_vectorizable(float x) { return 1.0f / (1.0f + exp_vectorizable(-x)); }

// tanh: an odd polynomial near 0 (Cephes tanhf), 1 - 2 / (e^{2|x|} + 1) elsewhere.
ENHANCED_INLINE float tanh_vectorizable(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  const float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                        1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
  const float large = std::copysign(1.0f - 2.0f / (exp_vectorizable(2.0f * a) + 1.0f), x);
  return a < 0.625f ? small : large;
}

ENHANCED_INLINE double sigmoid_exact(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// has_prev is a template argument so the loop body has no branch (a conditional load would stop
// the vectorizer).
template <bool has_prev, class Real, class Sigmoid, class Tanh>
ENHANCED_INLINE void forward_row(Real* gates, Real* cell, Real* h, const Real* cell_prev, const Real* bias, int H,
                                 Sigmoid sigmoid, Tanh tanh_fn) {
#pragma omp simd
  for (int k = 0; k < H; ++k) {
    const Real i = sigmoid(gates[k] + bias[k]), f = sigmoid(gates[H + k] + bias[H + k]),
               g = tanh_fn(gates[2 * H + k] + bias[2 * H + k]), o = sigmoid(gates[3 * H + k] + bias[3 * H + k]);
    const Real c = (has_prev ? f * cell_prev[k] : Real(0)) + i * g;
    gates[k] = i;
    gates[H + k] = f;
    gates[2 * H + k] = g;
    gates[3 * H + k] = o;
    cell[k] = c;
    h[k] = o * tanh_fn(c);
  }
}

template <bool has_prev, class Real, class Tanh>
ENHANCED_INLINE void backward_row(Real* gates, Real* dc, Real* dbias, const Real* cell, const Real* cell_prev,
                                  const Real* dh_out, const Real* dh_recurrent, int H, Tanh tanh_fn) {
#pragma omp simd
  for (int k = 0; k < H; ++k) {
    const Real i = gates[k], f = gates[H + k], g = gates[2 * H + k], o = gates[3 * H + k];
    const Real dh = dh_out[k] + dh_recurrent[k];
    const Real tanh_c = tanh_fn(cell[k]);
    const Real dc_total = dc[k] + dh * o * (Real(1) - tanh_c * tanh_c);
    const Real c_prev = has_prev ? cell_prev[k] : Real(0);
    dc[k] = dc_total * f;
    const Real di = dc_total * g * i * (Real(1) - i), df = dc_total * c_prev * f * (Real(1) - f);
    const Real dg = dc_total * i * (Real(1) - g * g), d_o = dh * tanh_c * o * (Real(1) - o);
    gates[k] = di;
    gates[H + k] = df;
    gates[2 * H + k] = dg;
    gates[3 * H + k] = d_o;
    dbias[k] += di;
    dbias[H + k] += df;
    dbias[2 * H + k] += dg;
    dbias[3 * H + k] += d_o;
  }
}

template <class Real, class Sigmoid, class Tanh>
ENHANCED_INLINE void forward_any(Real* gates, Real* cell, Real* h, const Real* cell_prev, const Real* bias, int H,
                                 Sigmoid sigmoid, Tanh tanh_fn) {
  if (cell_prev) forward_row<true>(gates, cell, h, cell_prev, bias, H, sigmoid, tanh_fn);
  else forward_row<false>(gates, cell, h, cell_prev, bias, H, sigmoid, tanh_fn);
}

template <class Real, class Tanh>
ENHANCED_INLINE void backward_any(Real* gates, Real* dc, Real* dbias, const Real* cell, const Real* cell_prev,
                                  const Real* dh_out, const Real* dh_recurrent, int H, Tanh tanh_fn) {
  if (cell_prev) backward_row<true>(gates, dc, dbias, cell, cell_prev, dh_out, dh_recurrent, H, tanh_fn);
  else backward_row<false>(gates, dc, dbias, cell, cell_prev, dh_out, dh_recurrent, H, tanh_fn);
}

}  // namespace

ENHANCED_MULTIVERSION
void forward(float* gates, float* cell, float* h, const float* cell_prev, const float* bias, int hidden) {
  forward_any(gates, cell, h, cell_prev, bias, hidden, [](float x) { return sigmoid_vectorizable(x); },
              [](float x) { return tanh_vectorizable(x); });
}

void forward(double* gates, double* cell, double* h, const double* cell_prev, const double* bias, int hidden) {
  forward_any(gates, cell, h, cell_prev, bias, hidden, [](double x) { return sigmoid_exact(x); }, [](double x) { return std::tanh(x); });
}

ENHANCED_MULTIVERSION
void backward(float* gates, float* dc, float* dbias, const float* cell, const float* cell_prev, const float* dh_out,
              const float* dh_recurrent, int hidden) {
  backward_any(gates, dc, dbias, cell, cell_prev, dh_out, dh_recurrent, hidden, [](float x) { return tanh_vectorizable(x); });
}

void backward(double* gates, double* dc, double* dbias, const double* cell, const double* cell_prev,
              const double* dh_out, const double* dh_recurrent, int hidden) {
  backward_any(gates, dc, dbias, cell, cell_prev, dh_out, dh_recurrent, hidden, [](double x) { return std::tanh(x); });
}

}  // namespace enhanced::lstm_pointwise
