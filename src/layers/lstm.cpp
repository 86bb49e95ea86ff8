#include "layers/lstm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "enhanced/common.h"
#include "enhanced/precision.h"
#include "layers/cpu/bf16_gemm.h"

#include "layers/cpu/blas.h"
#include "layers/cpu/lstm_bf16.h"
#include "layers/cpu/lstm_pointwise.h"
#include "layers/cpu/lstm_steps.h"
#include "layers/cpu/packing_clock.h"
#include "layers/cpu/small_gemm.h"

namespace enhanced {
namespace {

// Runs body(part) for parts 0 and 1 (the two directions, or two halves of a GEMM): on two
// threads when allowed. BLAS runs single-threaded (configure_cpu_threads), so the engine's two
// threads are the only ones competing for the cores.
template <class Body>
void in_two_parts(int threads, Body body) {
  if (threads >= 2) {
#pragma omp parallel for num_threads(2) schedule(static, 1)
    for (int part = 0; part < 2; ++part) body(part);
  } else {
    for (int part = 0; part < 2; ++part) body(part);
  }
}

// b_ih + b_hh of one direction, per thread (grown once, then reused).
template <class Real>
std::vector<Real>& bias_sum_buffer() {
  thread_local std::vector<Real> buffer;
  return buffer;
}

using lstm_steps::previous_h;
using lstm_steps::previous_time;
using lstm_steps::step_time;

// How the layer multiplies (enhanced/precision.h): FP32; bfloat16 operands through the FP32
// kernels, rounded as they are packed and gathered (the reference, any CPU); or bfloat16 operands
// through the AMX-BF16 or AVX512-BF16 kernels (layers/cpu/lstm_bf16.h), every product included.
enum class Arithmetic { fp32, bf16_reference, bf16_fast };

template <class Real>
Arithmetic arithmetic_for(Precision precision) {
  if (precision == Precision::fp32) return Arithmetic::fp32;
  if (!std::is_same<Real, float>::value) fail("internal: the double-precision LSTM (the gradient checks) is FP32 only");
  if (precision == Precision::bf16_emulated) return Arithmetic::bf16_reference;
  if (!bf16_gemm::available()) fail("internal: --precision bf16 on a CPU without AVX512-BF16");
  return Arithmetic::bf16_fast;
}

inline bool rounds(Arithmetic arithmetic) { return arithmetic != Arithmetic::fp32; }

// Per-thread buffers (grown once, then reused: no allocation in steady state): slot 0 for W_hh's
// or [W_ih | W_hh]'s panels, slot 1 for W_ih's or a step's operand.
std::vector<float>& packing_buffer(int slot = 0) {
  thread_local std::vector<float> buffers[2];
  return buffers[slot];
}

// values[0, n) rounded to the nearest bfloat16 (the reference path's operands).
template <class Real>
inline void round_in_place(Real* values, int n) {
  for (int i = 0; i < n; ++i) values[i] = static_cast<Real>(round_to_bf16(values[i]));
}

// dst[0, n) = source[0, n), rounded to bfloat16 when round.
inline void copy_row(float* dst, const float* source, int n, bool round) {
  if (!round) std::memcpy(dst, source, n * sizeof(float));
  else for (int j = 0; j < n; ++j) dst[j] = round_to_bf16(source[j]);
}

// The product C (M, N) = A (M, K, row stride lda) B for an operand B packed once (K x N, element
// (k, n) = source[n * stride_n + k * stride_k]), its elements rounded to bfloat16 in the reference
// path. float only: the double path (the gradient checks) calls BLAS.
class PackedOperand {
 public:
  PackedOperand(Arithmetic arithmetic, int slot) : round_(rounds(arithmetic)), packed_(packing_buffer(slot)) {}
  void pack(const float* source, int k, int n, size_t stride_n, size_t stride_k) {
    resize(k, n);
    pack_rows(0, source, k, stride_n, stride_k);
  }
  void resize(int k, int n) {
    k_ = k;
    n_ = n;
    packed_.resize(small_gemm::packed_size(k, n));
  }
  // Rows [row_offset, row_offset + k) of the resized operand.
  void pack_rows(int row_offset, const float* source, int k, size_t stride_n, size_t stride_k) {
    const packing_clock::Scope packing;
    small_gemm::pack_rows(packed_.data(), k_, row_offset, source, k, n_, stride_n, stride_k, round_);
  }
  // A in FP32, already rounded in the reference path.
  void multiply(float* c, int ldc, const float* a, int lda, int m) const {
    small_gemm::multiply(c, ldc, a, lda, packed_.data(), m, n_, k_, false);
  }

 private:
  bool round_;
  std::vector<float>& packed_;
  int k_ = 0, n_ = 0;
};

// The backward's per-step dh (B, H) = dgates (B, 4H) W_hh: W_hh packed once per call (element
// (k, n) = W_hh[k][n]); double: BLAS.
template <class Real>
class RecurrentBackward;

template <>
class RecurrentBackward<float> {
 public:
  RecurrentBackward(const float* w_hh, int hidden, Arithmetic arithmetic) : hidden_(hidden), w_hh_(arithmetic, 0) {
    w_hh_.pack(w_hh, 4 * hidden, hidden, 1, static_cast<size_t>(hidden));
  }
  void operator()(float* dh, const float* dgates, int ld_dgates, int batch) const {
    w_hh_.multiply(dh, hidden_, dgates, ld_dgates, batch);
  }

 private:
  int hidden_;
  PackedOperand w_hh_;
};

template <>
class RecurrentBackward<double> {
 public:
  RecurrentBackward(const double* w_hh, int hidden, Arithmetic) : w_hh_(w_hh), hidden_(hidden) {}
  void operator()(double* dh, const double* dgates, int ld_dgates, int batch) const {
    gemm(false, false, batch, hidden_, 4 * hidden_, 1.0, dgates, ld_dgates, w_hh_, hidden_, 0.0, dh, hidden_);
  }

 private:
  const double* w_hh_;
  int hidden_;
};

// The forward's per-step product gates_t (B, 4H) = [x_t | h_{t-1}] (B, D + H) [W_ih | W_hh]^T: the
// input projection and the recurrent product in one GEMM of K = D + H, written straight into the
// step's rows of gates, so the input projection needs no pass of its own over the (B, T, 8H)
// buffer. float: [W_ih | W_hh] packed once per call, the step's operand gathered contiguous.
template <class Real>
class StepProjection;

template <>
class StepProjection<float> {
 public:
  StepProjection(const float* w_ih, const float* w_hh, int input, int hidden, Arithmetic arithmetic)
      : input_(input), hidden_(hidden), round_(rounds(arithmetic)), packed_(arithmetic, 0),
        operand_(packing_buffer(1)) {
    const int k = input + hidden, n = 4 * hidden;
    packed_.resize(k, n);
    packed_.pack_rows(0, w_ih, input, static_cast<size_t>(input), 1);
    packed_.pack_rows(input, w_hh, hidden, static_cast<size_t>(hidden), 1);
  }
  // h_prev null: the zero initial state.
  void operator()(float* gates, int ld_gates, const float* x, int ld_x, const float* h_prev, int ld_h, int batch) {
    const int k = input_ + hidden_;
    operand_.resize(static_cast<size_t>(batch) * k);
    {
      const packing_clock::Scope packing;
      for (int b = 0; b < batch; ++b) {
        float* row = operand_.data() + static_cast<size_t>(b) * k;
        copy_row(row, x + static_cast<size_t>(b) * ld_x, input_, round_);
        if (h_prev) copy_row(row + input_, h_prev + static_cast<size_t>(b) * ld_h, hidden_, round_);
        else std::memset(row + input_, 0, hidden_ * sizeof(float));
      }
    }
    packed_.multiply(gates, ld_gates, operand_.data(), k, batch);
  }

 private:
  int input_, hidden_;
  bool round_;
  PackedOperand packed_;
  std::vector<float>& operand_;
};

template <>
class StepProjection<double> {
 public:
  StepProjection(const double* w_ih, const double* w_hh, int input, int hidden, Arithmetic)
      : w_ih_(w_ih), w_hh_(w_hh), input_(input), hidden_(hidden) {}
  void operator()(double* gates, int ld_gates, const double* x, int ld_x, const double* h_prev, int ld_h, int batch) {
    gemm(false, true, batch, 4 * hidden_, input_, 1.0, x, ld_x, w_ih_, input_, 0.0, gates, ld_gates);
    if (h_prev) gemm(false, true, batch, 4 * hidden_, hidden_, 1.0, h_prev, ld_h, w_hh_, hidden_, 1.0, gates, ld_gates);
  }

 private:
  const double* w_ih_;
  const double* w_hh_;
  int input_, hidden_;
};

// C (M, N) = A (M, K) B for B (K, N) row-major: dx = dgates W_ih, whose N = D is small.
inline void multiply_plain(float* c, int ldc, const float* a, int lda, const float* b, int m, int n, int k,
                           Arithmetic arithmetic) {
  PackedOperand packed(arithmetic, 1);
  packed.pack(b, k, n, 1, static_cast<size_t>(n));
  packed.multiply(c, ldc, a, lda, m);
}
inline void multiply_plain(double* c, int ldc, const double* a, int lda, const double* b, int m, int n, int k,
                           Arithmetic) {
  gemm(false, false, m, n, k, 1.0, a, lda, b, n, 0.0, c, ldc);
}

}  // namespace

size_t bilstm_backward_scratch_size(int batch, int seq_len, int input, int hidden) {
  // Per direction: recurrent dh (B, H), carried dc (B, H), the weight-gradient operand
  // [x | h_{t-1}] (B, T, D + H), its product (4H, D + H) and the bias gradient (4H).
  const size_t state = static_cast<size_t>(batch) * hidden, width = static_cast<size_t>(input) + hidden;
  return 2 * (2 * state + static_cast<size_t>(batch) * seq_len * width + 4 * static_cast<size_t>(hidden) * width +
              4 * static_cast<size_t>(hidden));
}

namespace {

// One direction's forward: per step, gates[:, t, dir] = project([x_t | h_{t-1}]) (rows T apart in
// (B, T, .)), then the pointwise pass per row; bias_sum (4H) = b_ih + b_hh.
template <class Real, class Project>
void forward_direction(Project& project, Real* y, Real* gates, Real* cell, const Real* x, const Real* bias_sum,
                       int direction, int batch, int seq_len, int input, int hidden) {
  const int H = hidden, G4 = 4 * hidden, G8 = 8 * hidden, C = 2 * hidden;
  for (int step = 0; step < seq_len; ++step) {
    const int t = step_time(direction, step, seq_len), t_prev = previous_time(direction, t);
    project(gates + static_cast<size_t>(t) * G8 + direction * G4, static_cast<int>(static_cast<size_t>(seq_len) * G8),
            x + static_cast<size_t>(t) * input, seq_len * input,
            step > 0 ? y + static_cast<size_t>(t_prev) * C + direction * H : nullptr, seq_len * C, batch);
    for (int b = 0; b < batch; ++b) {
      const size_t p = static_cast<size_t>(b) * seq_len + t;
      const Real* c_prev = step > 0 ? cell + (static_cast<size_t>(b) * seq_len + t_prev) * C + direction * H : nullptr;
      lstm_pointwise::forward(gates + p * G8 + direction * G4, cell + p * C + direction * H, y + p * C + direction * H,
                              c_prev, bias_sum, H);
    }
  }
}

}  // namespace

template <class Real>
void bilstm_forward(Real* y, BiLstmState<Real>& saved, const Real* x, const Real* weight_ih, const Real* weight_hh,
                    const Real* bias_ih, const Real* bias_hh, int batch, int seq_len, int input, int hidden,
                    int threads, Precision precision) {
  const Arithmetic arithmetic = arithmetic_for<Real>(precision);
  const int G4 = 4 * hidden;
  in_two_parts(threads, [&](int direction) {
    std::vector<Real>& bias_buffer = bias_sum_buffer<Real>();
    bias_buffer.resize(G4);
    Real* bias_sum = bias_buffer.data();  // b_ih + b_hh, added in the pointwise pass
    for (int j = 0; j < G4; ++j) bias_sum[j] = bias_ih[direction * G4 + j] + bias_hh[direction * G4 + j];
    const Real* w_ih = weight_ih + static_cast<size_t>(direction) * G4 * input;
    const Real* w_hh = weight_hh + static_cast<size_t>(direction) * G4 * hidden;
    if constexpr (std::is_same<Real, float>::value) {
      if (arithmetic == Arithmetic::bf16_fast) {
        const bf16_gemm::TileSession tiles;  // AMX: the tiles configured once for the 400 steps
        lstm_bf16::StepProjection project(w_ih, w_hh, input, hidden);
        forward_direction(project, y, saved.gates, saved.cell, x, bias_sum, direction, batch, seq_len, input, hidden);
        return;
      }
    }
    StepProjection<Real> project(w_ih, w_hh, input, hidden, arithmetic);
    forward_direction(project, y, saved.gates, saved.cell, x, bias_sum, direction, batch, seq_len, input, hidden);
  });
}

namespace {

// operand (P, D + H) = [x_t | h_{t-1}] of one direction for every position: what each step's
// gates were computed from (h_{t-1} is zero at a sequence's first step), rounded to bfloat16 when
// round (the weight gradients' operand).
template <class Real>
void gather_step_inputs(Real* operand, const Real* x, const Real* y, int direction, int batch, int seq_len, int input,
                        int hidden, bool round) {
  const packing_clock::Scope packing;
  const int W = input + hidden;
  const size_t P = static_cast<size_t>(batch) * seq_len;
  for (size_t p = 0; p < P; ++p) {
    Real* row = operand + p * W;
    std::memcpy(row, x + p * input, input * sizeof(Real));
    const Real* h = previous_h(y, p, direction, seq_len, hidden);
    if (h) std::memcpy(row + input, h, hidden * sizeof(Real));
    else std::memset(row + input, 0, hidden * sizeof(Real));
    if (round) round_in_place(row, W);
  }
}

// dW_ih (4H, D) and dW_hh (4H, H) += the halves of the product of dgates^T and [x | h_{t-1}]:
// product (4H, D + H), or its transpose (D + H, 4H) when transposed.
template <class Real>
void add_product(Real* dw_ih, Real* dw_hh, const Real* product, bool transposed, int input, int hidden) {
  const int G4 = 4 * hidden, W = input + hidden;
  auto at = [&](int j, int w) {
    return transposed ? product[static_cast<size_t>(w) * G4 + j] : product[static_cast<size_t>(j) * W + w];
  };
  for (int j = 0; j < G4; ++j) {
    for (int d = 0; d < input; ++d) dw_ih[static_cast<size_t>(j) * input + d] += at(j, d);
    for (int k = 0; k < hidden; ++k) dw_hh[static_cast<size_t>(j) * hidden + k] += at(j, input + k);
  }
}

// One direction's backward: per step (T-1 down to 0) the pointwise pass per row, writing the
// gate gradients over the gates and carrying dc and dh; then products(step, dgates rows
// (T * 8H apart), dh_recurrent), which must leave dh_recurrent for the step before.
template <class Real, class Products>
void backward_direction(Products& products, Real* gates, Real* dc_carry, Real* dh_recurrent, Real* dbias_sum,
                        const Real* cell, const Real* dy, int direction, int batch, int seq_len, int hidden) {
  const int H = hidden, G4 = 4 * hidden, G8 = 8 * hidden, C = 2 * hidden;
  for (int step = seq_len - 1; step >= 0; --step) {
    const int t = step_time(direction, step, seq_len), t_prev = previous_time(direction, t);
    for (int b = 0; b < batch; ++b) {
      const size_t p = static_cast<size_t>(b) * seq_len + t;
      const Real* c_prev = step > 0 ? cell + (static_cast<size_t>(b) * seq_len + t_prev) * C + direction * H : nullptr;
      lstm_pointwise::backward(gates + p * G8 + direction * G4, dc_carry + static_cast<size_t>(b) * H, dbias_sum,
                               cell + p * C + direction * H, c_prev, dy + p * C + direction * H,
                               dh_recurrent + static_cast<size_t>(b) * H, H);
    }
    products(step, gates + static_cast<size_t>(t) * G8 + direction * G4, static_cast<size_t>(seq_len) * G8,
             dh_recurrent);
  }
}

// The FP32 and reference paths' per-step products: the gate gradients rounded in place in the
// reference path (every later use is a product; the bias gradient, summed already, stays FP32),
// then dh = dgates W_hh. The weight gradients and dx follow the loop, as whole-batch GEMMs.
template <class Real>
struct RecurrentProducts {
  const RecurrentBackward<Real>& recurrent;
  int batch, hidden;
  bool round;
  void operator()(int step, Real* dgates, size_t ld_dgates, Real* dh_recurrent) const {
    if (round) {
      const packing_clock::Scope packing;
      for (int b = 0; b < batch; ++b) round_in_place(dgates + b * ld_dgates, 4 * hidden);
    }
    if (step > 0) recurrent(dh_recurrent, dgates, static_cast<int>(ld_dgates), batch);
  }
};

}  // namespace

template <class Real>
void bilstm_backward(Real* dx, Real* dweight_ih, Real* dweight_hh, Real* dbias_ih, Real* dbias_hh,
                     BiLstmState<Real>& saved, const Real* y, const Real* dy, const Real* x, const Real* weight_ih,
                     const Real* weight_hh, int batch, int seq_len, int input, int hidden, int threads,
                     Precision precision) {
  const Arithmetic arithmetic = arithmetic_for<Real>(precision);
  bool fast = false;
  if constexpr (std::is_same<Real, float>::value) fast = arithmetic == Arithmetic::bf16_fast;
  Real* gates = saved.gates;
  const int H = hidden, G4 = 4 * hidden, G8 = 8 * hidden;
  const int positions = batch * seq_len;
  const size_t state = static_cast<size_t>(batch) * H;
  const int W = input + H;  // columns of [x | h_{t-1}]
  const size_t per_direction = 2 * state + static_cast<size_t>(positions) * W + static_cast<size_t>(G4) * W + G4;
  in_two_parts(threads, [&](int direction) {
    Real* dh_recurrent = saved.scratch + direction * per_direction;  // (B, H)
    Real* dc_carry = dh_recurrent + state;                           // (B, H)
    Real* operand = dc_carry + state;  // (P, D + H); in the fast path the reverse direction's dx (P, D)
    Real* product = operand + static_cast<size_t>(positions) * W;  // (4H, D + H) or, fast, (D + H, 4H)
    Real* dbias_sum = product + static_cast<size_t>(G4) * W;       // (4H)
    std::memset(dbias_sum, 0, G4 * sizeof(Real));
    std::memset(dh_recurrent, 0, state * sizeof(Real));
    std::memset(dc_carry, 0, state * sizeof(Real));
    const Real* w_ih = weight_ih + static_cast<size_t>(direction) * G4 * input;
    const Real* w_hh = weight_hh + static_cast<size_t>(direction) * G4 * H;
    if constexpr (std::is_same<Real, float>::value) {
      if (fast) {
        const bf16_gemm::TileSession tiles;
        lstm_bf16::StepBackward products(w_ih, w_hh, x, y, direction == 0 ? dx : operand, product, direction, batch,
                                         seq_len, input, H);
        backward_direction(products, gates, dc_carry, dh_recurrent, dbias_sum, saved.cell, dy, direction, batch,
                           seq_len, H);
      }
    }
    if (!fast) {
      const RecurrentBackward<Real> recurrent(w_hh, H, arithmetic);
      RecurrentProducts<Real> products{recurrent, batch, H, rounds(arithmetic)};
      backward_direction(products, gates, dc_carry, dh_recurrent, dbias_sum, saved.cell, dy, direction, batch, seq_len,
                         H);
      // dW (4H, D + H) = dgates^T (4H, P) [x | h_{t-1}] (P, D + H): one GEMM, K = P.
      gather_step_inputs(operand, x, y, direction, batch, seq_len, input, H, rounds(arithmetic));
      gemm(true, false, G4, W, positions, Real(1), gates + direction * G4, G8, operand, W, Real(0), product, W);
    }
    add_product(dweight_ih + static_cast<size_t>(direction) * G4 * input,
                dweight_hh + static_cast<size_t>(direction) * G4 * H, product, fast, input, H);
    for (int j = 0; j < G4; ++j) {
      dbias_ih[direction * G4 + j] += dbias_sum[j];
      dbias_hh[direction * G4 + j] += dbias_sum[j];
    }
  });
  if (fast) {  // dx = the two directions' parts
    const Real* reverse_dx = saved.scratch + per_direction + 2 * state;
    for (size_t i = 0; i < static_cast<size_t>(positions) * input; ++i) dx[i] += reverse_dx[i];
    return;
  }
  // dx (P, D) = dgates (P, 8H) W_ih (8H, D), both directions at once, rows split in two halves.
  in_two_parts(threads, [&](int half) {
    const int first = half == 0 ? 0 : positions / 2;
    const int rows = half == 0 ? positions / 2 : positions - positions / 2;
    if (rows > 0)
      multiply_plain(dx + static_cast<size_t>(first) * input, input, gates + static_cast<size_t>(first) * G8, G8,
                     weight_ih, rows, input, G8, arithmetic);
  });
}

template void bilstm_forward<float>(float*, BiLstmState<float>&, const float*, const float*, const float*,
                                    const float*, const float*, int, int, int, int, int, Precision);
template void bilstm_forward<double>(double*, BiLstmState<double>&, const double*, const double*, const double*,
                                     const double*, const double*, int, int, int, int, int, Precision);
template void bilstm_backward<float>(float*, float*, float*, float*, float*, BiLstmState<float>&, const float*,
                                     const float*, const float*, const float*, const float*, int, int, int, int, int,
                                     Precision);
template void bilstm_backward<double>(double*, double*, double*, double*, double*, BiLstmState<double>&,
                                      const double*, const double*, const double*, const double*, const double*, int,
                                      int, int, int, int, Precision);

}  // namespace enhanced
