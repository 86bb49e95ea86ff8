// The BiLSTM's products in FP32, and in the bf16 reference path (enhanced/precision.h), whose
// operands are rounded to bfloat16 as they are packed or gathered: what layers/lstm.cpp's loops
// call in place of lstm_bf16.h's. Each weight operand is packed once per call of the layer
// (small_gemm.h), into a buffer of the caller's, so the 400 steps never re-pack it; the double
// path (the gradient checks) calls BLAS. A float product's rows are independent (small_gemm): a
// row's result is the same bits whichever rows are multiplied with it; BLAS's may not be, so the
// layer never cuts a double product by the threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "layers/cpu/bf16_gemm.h"
#include "layers/cpu/blas.h"
#include "layers/cpu/line_requests.h"
#include "layers/cpu/packing_clock.h"
#include "layers/cpu/parts.h"
#include "layers/cpu/small_gemm.h"

namespace enhanced::lstm_fp32 {

// dst[0, n) = source[0, n), rounded to bfloat16 when round.
inline void copy_row(float* dst, const float* source, int n, bool round) {
  if (!round) std::memcpy(dst, source, n * sizeof(float));
  else bf16_gemm::round_floats(dst, source, static_cast<size_t>(n));
}

// The product C (M, N) = A (M, K, row stride lda) B for an operand B packed once (K x N, element
// (k, n) = source[n * stride_n + k * stride_k]), its elements rounded to bfloat16 when round.
class PackedOperand {
 public:
  // packed: room for small_gemm::packed_size(K, N) floats.
  PackedOperand(bool round, float* packed) : round_(round), packed_(packed) {}
  void pack(const float* source, int k, int n, size_t stride_n, size_t stride_k) {
    resize(k, n);
    pack_rows(0, source, k, stride_n, stride_k);
  }
  void resize(int k, int n) {
    k_ = k;
    n_ = n;
  }
  // Rows [row_offset, row_offset + k) of the resized operand.
  void pack_rows(int row_offset, const float* source, int k, size_t stride_n, size_t stride_k) {
    const packing_clock::Scope packing;
    small_gemm::pack_rows(packed_, k_, row_offset, source, k, n_, stride_n, stride_k, round_);
  }
  // A in FP32, already rounded in the reference path; requests: small_gemm::multiply's.
  void multiply(float* c, int ldc, const float* a, int lda, int m, LineRequests requests = {}) const {
    small_gemm::multiply(c, ldc, a, lda, packed_, m, n_, k_, false, requests);
  }

 private:
  bool round_;
  float* packed_;
  int k_ = 0, n_ = 0;
};

// The forward's per-step product gates_t (B, 4H) = [x_t | h_{t-1}] (B, D + H) [W_ih | W_hh]^T: the
// input projection and the recurrent product in one GEMM of K = D + H, into the step's rows of
// gates (the workspace's, in cache for the pointwise pass), so the input projection needs no
// pass of its own over the (B, T, 8H) buffer. The operand's rows are the caller's: gather_x
// copies x_t into them (rounded to bfloat16 in the reference path), the step before's pointwise
// pass writes h_{t-1} (rounded in the reference path too). float: [W_ih | W_hh] packed once, in
// packed (small_gemm::packed_size(D + H, 4H) floats).
template <class Real>
class StepProjection;

template <>
class StepProjection<float> {
 public:
  StepProjection(float* packed, const float* w_ih, const float* w_hh, int input, int hidden, bool round)
      : input_(input), round_(round), packed_(round, packed) {
    packed_.resize(input + hidden, 4 * hidden);
    packed_.pack_rows(0, w_ih, input, static_cast<size_t>(input), 1);
    packed_.pack_rows(input, w_hh, hidden, static_cast<size_t>(hidden), 1);
  }
  void gather_x(float* operand, size_t ld_operand, const float* x, size_t ld_x, int rows) const {
    const packing_clock::Scope packing;
    for (int b = 0; b < rows; ++b) copy_row(operand + b * ld_operand, x + b * ld_x, input_, round_);
  }
  void operator()(float* gates, size_t ld_gates, const float* operand, size_t ld_operand, int rows) const {
    packed_.multiply(gates, static_cast<int>(ld_gates), operand, static_cast<int>(ld_operand), rows);
  }

 private:
  int input_;
  bool round_;
  PackedOperand packed_;
};

template <>
class StepProjection<double> {
 public:
  StepProjection(float*, const double* w_ih, const double* w_hh, int input, int hidden, bool)
      : w_ih_(w_ih), w_hh_(w_hh), input_(input), hidden_(hidden) {}
  void gather_x(double* operand, size_t ld_operand, const double* x, size_t ld_x, int rows) const {
    for (int b = 0; b < rows; ++b) std::memcpy(operand + b * ld_operand, x + b * ld_x, input_ * sizeof(double));
  }
  void operator()(double* gates, size_t ld_gates, const double* operand, size_t ld_operand, int rows) const {
    const int ldg = static_cast<int>(ld_gates), lda = static_cast<int>(ld_operand);
    gemm(false, true, rows, 4 * hidden_, input_, 1.0, operand, lda, w_ih_, input_, 0.0, gates, ldg);
    gemm(false, true, rows, 4 * hidden_, hidden_, 1.0, operand + input_, lda, w_hh_, hidden_, 1.0, gates, ldg);
  }

 private:
  const double* w_ih_;
  const double* w_hh_;
  int input_, hidden_;
};

// The backward's per-step dh (B, H) = dgates (B, 4H) W_hh. float: W_hh packed once, in packed
// (small_gemm::packed_size(4H, H) floats; element (k, n) = W_hh[k][n]).
template <class Real>
class RecurrentBackward;

template <>
class RecurrentBackward<float> {
 public:
  RecurrentBackward(float* packed, const float* w_hh, int hidden, bool round) : hidden_(hidden), w_hh_(round, packed) {
    w_hh_.pack(w_hh, 4 * hidden, hidden, 1, static_cast<size_t>(hidden));
  }
  void operator()(float* dh, const float* dgates, int ld_dgates, int rows, LineRequests requests) const {
    w_hh_.multiply(dh, hidden_, dgates, ld_dgates, rows, requests);
  }

 private:
  int hidden_;
  PackedOperand w_hh_;
};

template <>
class RecurrentBackward<double> {
 public:
  RecurrentBackward(float*, const double* w_hh, int hidden, bool) : w_hh_(w_hh), hidden_(hidden) {}
  void operator()(double* dh, const double* dgates, int ld_dgates, int rows, LineRequests) const {
    gemm(false, false, rows, hidden_, 4 * hidden_, 1.0, dgates, ld_dgates, w_hh_, hidden_, 0.0, dh, hidden_);
  }

 private:
  const double* w_hh_;
  int hidden_;
};

// dx (P, D) = dgates (P, 8H) W_ih (8H, D), both directions at once, whose N = D is small. float:
// W_ih packed once, in packed (small_gemm::packed_size(8H, D) floats), then any rows multiplied.
template <class Real>
class InputGradient;

template <>
class InputGradient<float> {
 public:
  InputGradient(float* packed, const float* w_ih, int input, int gates8, bool round)
      : input_(input), w_ih_(round, packed) {
    w_ih_.pack(w_ih, gates8, input, 1, static_cast<size_t>(input));
  }
  void operator()(float* dx, const float* dgates, int ld_dgates, int rows) const {
    w_ih_.multiply(dx, input_, dgates, ld_dgates, rows);
  }

 private:
  int input_;
  PackedOperand w_ih_;
};

template <>
class InputGradient<double> {
 public:
  InputGradient(float*, const double* w_ih, int input, int gates8, bool)
      : w_ih_(w_ih), input_(input), gates8_(gates8) {}
  void operator()(double* dx, const double* dgates, int ld_dgates, int rows) const {
    gemm(false, false, rows, input_, gates8_, 1.0, dgates, ld_dgates, w_ih_, input_, 0.0, dx, input_);
  }

 private:
  const double* w_ih_;
  int input_, gates8_;
};

// The parts of a direction's weight gradients, dW (4H, D + H) = dgates^T (4H, P) [x | h_{t-1}]
// (P, D + H): one OpenBLAS sgemm a part of dW's rows, up to one a thread of the direction's half.
// OpenBLAS sums each element over the same blocks of K whatever rows it is given, except on its
// small-matrix path (M N K <= 10^6, its AVX-512 cores), which sums otherwise; so the rows are cut
// only where every part's M N K is at least kSmallestCutProduct, 16 times that bound, and the
// parts are the whole's bits (FusedMaxPool.EveryThreadCount*, OpenBLAS 0.3.21). The double path
// never cuts it.
constexpr double kSmallestCutProduct = 1 << 24;

inline int weight_gradient_parts(int threads, int gate_rows, int columns, int positions) {
  for (int parts = parts::part_count(threads / 2, gate_rows); parts > 1; --parts) {
    int smallest = gate_rows;
    for (int index = 0; index < parts; ++index)
      smallest = std::min(smallest, parts::part_of(index, parts, gate_rows).count);
    if (static_cast<double>(smallest) * columns * positions >= kSmallestCutProduct) return parts;
  }
  return 1;
}

}  // namespace enhanced::lstm_fp32
