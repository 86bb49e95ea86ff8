#include "layers/cpu/lstm_pointwise.h"
#include "layers/cpu/multiversion.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "enhanced/precision.h"

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

// Where a pass puts a value besides (or over) its FP32 output: nowhere, a copy, a copy rounded to
// bfloat16, or its bfloat16 bits (the next product's operand, written while the value is in a
// register).
struct NoCopy {
  ENHANCED_INLINE void operator()(int, float) const {}
  ENHANCED_INLINE void operator()(int, double) const {}
};
template <class Real>
struct Copy {
  Real* out;
  ENHANCED_INLINE void operator()(int k, Real value) const { out[k] = value; }
};
struct RoundedCopy {
  float* out;
  ENHANCED_INLINE void operator()(int k, float value) const { out[k] = round_to_bf16(value); }
};
struct Bf16Copy {
  uint16_t* out;
  ENHANCED_INLINE void operator()(int k, float value) const { out[k] = to_bf16_bits(value); }
};

// One gate's activations in place: gate[k] = activation(gate[k] + bias[k]).
template <class Real, class Activation>
ENHANCED_INLINE void activate(Real* gate, const Real* bias, int H, Activation activation) {
#pragma omp simd
  for (int k = 0; k < H; ++k) gate[k] = activation(gate[k] + bias[k]);
}

// A loop a gate, then one for the cell and h: each loop's constants and values fit the registers
// (one loop over all five functions spilled on AVX2's 16), with the same arithmetic per element.
// has_prev is a template argument so the loop body has no branch (a conditional load would stop
// the vectorizer). next(k, h) hands h to the next step's operand.
template <bool has_prev, class Real, class Next, class Sigmoid, class Tanh>
ENHANCED_INLINE void forward_row(Real* gates, Real* cell, Real* h, Next next, const Real* cell_prev, const Real* bias,
                                 int H, Sigmoid sigmoid, Tanh tanh_fn) {
  activate(gates, bias, H, sigmoid);
  activate(gates + H, bias + H, H, sigmoid);
  activate(gates + 2 * H, bias + 2 * H, H, tanh_fn);
  activate(gates + 3 * H, bias + 3 * H, H, sigmoid);
#pragma omp simd
  for (int k = 0; k < H; ++k) {
    const Real i = gates[k], f = gates[H + k], g = gates[2 * H + k], o = gates[3 * H + k];
    const Real c = (has_prev ? f * cell_prev[k] : Real(0)) + i * g;
    cell[k] = c;
    const Real h_k = o * tanh_fn(c);
    h[k] = h_k;
    next(k, h_k);
  }
}

// store(j, d) writes gate gradient j (as is, or rounded and converted); dbias takes d unrounded.
template <bool has_prev, class Real, class Store, class Tanh>
ENHANCED_INLINE void backward_row(Real* gates, Store store, Real* dc, Real* dbias, const Real* cell,
                                  const Real* cell_prev, const Real* dh_out, const Real* dh_recurrent, int H,
                                  Tanh tanh_fn) {
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
    store(k, di);
    store(H + k, df);
    store(2 * H + k, dg);
    store(3 * H + k, d_o);
    dbias[k] += di;
    dbias[H + k] += df;
    dbias[2 * H + k] += dg;
    dbias[3 * H + k] += d_o;
  }
}

// Gate gradients over the gates rounded to bfloat16 (the Copy or RoundedCopy of the gates
// themselves otherwise), and their bits to a second row.
struct Bf16GateStore {
  float* gates;
  uint16_t* bits;
  ENHANCED_INLINE void operator()(int j, float d) const {
    const uint16_t b = to_bf16_bits(d);
    gates[j] = from_bf16_bits(b);
    bits[j] = b;
  }
};

template <class Real, class Next, class Sigmoid, class Tanh>
ENHANCED_INLINE void forward_any(Real* gates, Real* cell, Real* h, Next next, const Real* cell_prev, const Real* bias,
                                 int H, Sigmoid sigmoid, Tanh tanh_fn) {
  if (cell_prev) forward_row<true>(gates, cell, h, next, cell_prev, bias, H, sigmoid, tanh_fn);
  else forward_row<false>(gates, cell, h, next, cell_prev, bias, H, sigmoid, tanh_fn);
}

template <class Real, class Store, class Tanh>
ENHANCED_INLINE void backward_any(Real* gates, Store store, Real* dc, Real* dbias, const Real* cell,
                                  const Real* cell_prev, const Real* dh_out, const Real* dh_recurrent, int H,
                                  Tanh tanh_fn) {
  if (cell_prev) backward_row<true>(gates, store, dc, dbias, cell, cell_prev, dh_out, dh_recurrent, H, tanh_fn);
  else backward_row<false>(gates, store, dc, dbias, cell, cell_prev, dh_out, dh_recurrent, H, tanh_fn);
}

template <class Next>
ENHANCED_INLINE void forward_float(float* gates, float* cell, float* h, Next next, const float* cell_prev,
                                   const float* bias, int hidden) {
  forward_any(gates, cell, h, next, cell_prev, bias, hidden, [](float x) { return sigmoid_vectorizable(x); },
              [](float x) { return tanh_vectorizable(x); });
}

template <class Store>
ENHANCED_INLINE void backward_float(float* gates, Store store, float* dc, float* dbias, const float* cell,
                                    const float* cell_prev, const float* dh_out, const float* dh_recurrent,
                                    int hidden) {
  backward_any(gates, store, dc, dbias, cell, cell_prev, dh_out, dh_recurrent, hidden,
               [](float x) { return tanh_vectorizable(x); });
}

}  // namespace

ENHANCED_MULTIVERSION
void forward(float* gates, float* cell, float* h, float* h_next, const float* cell_prev, const float* bias, int hidden,
             bool round_next) {
  if (h_next == nullptr) forward_float(gates, cell, h, NoCopy{}, cell_prev, bias, hidden);
  else if (round_next) forward_float(gates, cell, h, RoundedCopy{h_next}, cell_prev, bias, hidden);
  else forward_float(gates, cell, h, Copy<float>{h_next}, cell_prev, bias, hidden);
}

ENHANCED_MULTIVERSION
void forward(float* gates, float* cell, float* h, uint16_t* h_next, const float* cell_prev, const float* bias,
             int hidden) {
  if (h_next == nullptr) forward_float(gates, cell, h, NoCopy{}, cell_prev, bias, hidden);
  else forward_float(gates, cell, h, Bf16Copy{h_next}, cell_prev, bias, hidden);
}

void forward(double* gates, double* cell, double* h, double* h_next, const double* cell_prev, const double* bias,
             int hidden, bool) {
  auto sigmoid = [](double x) { return sigmoid_exact(x); };
  auto tanh_fn = [](double x) { return std::tanh(x); };
  if (h_next == nullptr) forward_any(gates, cell, h, NoCopy{}, cell_prev, bias, hidden, sigmoid, tanh_fn);
  else forward_any(gates, cell, h, Copy<double>{h_next}, cell_prev, bias, hidden, sigmoid, tanh_fn);
}

ENHANCED_MULTIVERSION
void backward(float* gates, float* dc, float* dbias, const float* cell, const float* cell_prev, const float* dh_out,
              const float* dh_recurrent, int hidden, bool round) {
  if (round) backward_float(gates, RoundedCopy{gates}, dc, dbias, cell, cell_prev, dh_out, dh_recurrent, hidden);
  else backward_float(gates, Copy<float>{gates}, dc, dbias, cell, cell_prev, dh_out, dh_recurrent, hidden);
}

ENHANCED_MULTIVERSION
void backward(float* gates, uint16_t* gates_bf16, float* dc, float* dbias, const float* cell, const float* cell_prev,
              const float* dh_out, const float* dh_recurrent, int hidden) {
  backward_float(gates, Bf16GateStore{gates, gates_bf16}, dc, dbias, cell, cell_prev, dh_out, dh_recurrent, hidden);
}

void backward(double* gates, double* dc, double* dbias, const double* cell, const double* cell_prev,
              const double* dh_out, const double* dh_recurrent, int hidden, bool) {
  backward_any(gates, Copy<double>{gates}, dc, dbias, cell, cell_prev, dh_out, dh_recurrent, hidden,
               [](double x) { return std::tanh(x); });
}

}  // namespace enhanced::lstm_pointwise
