#include "layers/dense.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "enhanced/common.h"
#include "layers/cpu/bf16_gemm.h"
#include "layers/cpu/blas.h"
#include "layers/cpu/packing_clock.h"

namespace enhanced {
namespace {

// The workspace's parts (dense_workspace_size): the reference path's three rounded operand copies
// (slot 0: in or dout; 1: weight or in; 2: weight), or the bf16 kernels' A, converted, B, packed,
// and the kernel's own workspace.
struct DenseParts {
  size_t copies[3];
  size_t a_bf16, packed_bf16, kernel_bf16;  // uint16_t elements
};

DenseParts dense_parts(int batch, int in_features, int out_features) {
  const size_t B = static_cast<size_t>(batch), F = static_cast<size_t>(in_features), L = static_cast<size_t>(out_features);
  return {{std::max(B * F, B * L), std::max(L * F, B * F), L * F},
          std::max({B * F, L * B, B * L}),
          std::max({bf16_gemm::packed_size(in_features, out_features), bf16_gemm::packed_size(batch, in_features),
                    bf16_gemm::packed_size(out_features, in_features)}),
          bf16_gemm::multiply_workspace_size(std::max({in_features, out_features, batch}))};
}

// The GEMM operand `values` (n of them) as the reference path multiplies it: itself in FP32, else
// a copy rounded to bfloat16 in `copy` (room for n).
template <class Real>
const Real* operand(const Real* values, size_t n, Precision precision, Real* copy) {
  if (precision == Precision::fp32) return values;
  if (!std::is_same<Real, float>::value) fail("internal: the double-precision dense layer is FP32 only");
  if (copy == nullptr) fail("internal: the dense layer's bf16 path needs its workspace (dense_workspace_size)");
  const packing_clock::Scope packing;
  for (size_t i = 0; i < n; ++i) copy[i] = static_cast<Real>(round_to_bf16(values[i]));
  return copy;
}

// Slot `slot` of the reference path's copies in the workspace.
template <class Real>
Real* copy_slot(Real* workspace, const DenseParts& parts, int slot) {
  if (workspace == nullptr) return nullptr;
  size_t offset = 0;
  for (int i = 0; i < slot; ++i) offset += parts.copies[i];
  return workspace + offset;
}

// C (M, N) (+)= A (M, K) B (K, N) on the bf16 kernels (--precision bf16), from FP32 operands:
// A's element (m, k) = a[m * a_row + k * a_column], B's (k, n) = b[n * b_column + k * b_row];
// A converted and B packed into the workspace (parts' a_bf16, packed_bf16, then the kernel's).
void bf16_product(uint16_t* workspace, const DenseParts& parts, float* c, int ldc, const float* a, size_t a_row,
                  size_t a_column, const float* b, size_t b_row, size_t b_column, int m, int n, int k,
                  bool accumulate) {
  if (workspace == nullptr) fail("internal: the dense layer's bf16 path needs its workspace (dense_workspace_size)");
  uint16_t* a_bf16 = workspace;
  uint16_t* packed = workspace + parts.a_bf16;
  {
    const packing_clock::Scope packing;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < k; ++j) a_bf16[static_cast<size_t>(i) * k + j] = to_bf16_bits(a[i * a_row + j * a_column]);
    bf16_gemm::pack_rows(packed, k, 0, b, k, n, b_column, b_row);
  }
  bf16_gemm::multiply(c, ldc, a_bf16, k, packed, m, n, k, accumulate, packed + parts.packed_bf16);
}

// dbias (L) += the sum of dout's rows: a sum, not a GEMM, so FP32 in every precision.
template <class Real>
void add_bias_gradient(Real* dbias, const Real* dout, int batch, int out_features) {
  for (int b = 0; b < batch; ++b)
    for (int l = 0; l < out_features; ++l) dbias[l] += dout[static_cast<size_t>(b) * out_features + l];
}

template <class Real>
bool on_bf16_kernels(Precision precision) {
  return std::is_same<Real, float>::value && precision == Precision::bf16;
}

}  // namespace

template <class Real>
size_t dense_workspace_size(int batch, int in_features, int out_features) {
  const DenseParts parts = dense_parts(batch, in_features, out_features);
  const size_t copies = parts.copies[0] + parts.copies[1] + parts.copies[2];
  const size_t bf16 = ((parts.a_bf16 + parts.packed_bf16 + parts.kernel_bf16) * sizeof(uint16_t) + sizeof(Real) - 1) / sizeof(Real);
  return std::max(copies, bf16);
}

template <class Real>
void dense_forward(Real* out, const Real* in, const Real* weight, const Real* bias, int batch, int in_features,
                   int out_features, Precision precision, Real* workspace) {
  const size_t F = static_cast<size_t>(in_features), L = static_cast<size_t>(out_features);
  const DenseParts parts = dense_parts(batch, in_features, out_features);
  if constexpr (std::is_same<Real, float>::value) {
    if (on_bf16_kernels<Real>(precision)) {  // out = bias + in (B, F) W^T, W^T's (f, l) = W[l * F + f]
      for (int b = 0; b < batch; ++b) std::copy(bias, bias + L, out + b * L);
      bf16_product(reinterpret_cast<uint16_t*>(workspace), parts, out, out_features, in, F, 1, weight, 1, F,
                   batch, out_features, in_features, true);
      return;
    }
  }
  const Real* in_operand =
      operand(in, static_cast<size_t>(batch) * in_features, precision, copy_slot(workspace, parts, 0));
  const Real* weight_operand =
      operand(weight, static_cast<size_t>(out_features) * in_features, precision, copy_slot(workspace, parts, 1));
  for (int b = 0; b < batch; ++b)
    for (int l = 0; l < out_features; ++l) out[static_cast<size_t>(b) * out_features + l] = bias[l];
  gemm(false, true, batch, out_features, in_features, Real(1), in_operand, in_features, weight_operand, in_features,
       Real(1), out, out_features);
}

template <class Real>
void dense_backward(Real* din, Real* dweight, Real* dbias, const Real* dout, const Real* in, const Real* weight,
                    int batch, int in_features, int out_features, Precision precision, Real* workspace) {
  const size_t F = static_cast<size_t>(in_features), L = static_cast<size_t>(out_features);
  const DenseParts parts = dense_parts(batch, in_features, out_features);
  if constexpr (std::is_same<Real, float>::value) {
    if (on_bf16_kernels<Real>(precision)) {
      // dweight (L, F) += dout^T (L, B) in (B, F); din (B, F) = dout (B, L) W (L, F).
      uint16_t* bf16 = reinterpret_cast<uint16_t*>(workspace);
      bf16_product(bf16, parts, dweight, in_features, dout, 1, L, in, F, 1, out_features, in_features, batch,
                   true);
      add_bias_gradient(dbias, dout, batch, out_features);
      bf16_product(bf16, parts, din, in_features, dout, L, 1, weight, F, 1, batch, in_features, out_features,
                   false);
      return;
    }
  }
  const Real* dout_operand =
      operand(dout, static_cast<size_t>(batch) * out_features, precision, copy_slot(workspace, parts, 0));
  const Real* in_operand =
      operand(in, static_cast<size_t>(batch) * in_features, precision, copy_slot(workspace, parts, 1));
  const Real* weight_operand =
      operand(weight, static_cast<size_t>(out_features) * in_features, precision, copy_slot(workspace, parts, 2));
  gemm(true, false, out_features, in_features, batch, Real(1), dout_operand, out_features, in_operand, in_features,
       Real(1), dweight, in_features);
  add_bias_gradient(dbias, dout, batch, out_features);
  gemm(false, false, batch, in_features, out_features, Real(1), dout_operand, out_features, weight_operand,
       in_features, Real(0), din, in_features);
}

template size_t dense_workspace_size<float>(int, int, int);
template size_t dense_workspace_size<double>(int, int, int);
template void dense_forward<float>(float*, const float*, const float*, const float*, int, int, int, Precision, float*);
template void dense_forward<double>(double*, const double*, const double*, const double*, int, int, int, Precision,
                                    double*);
template void dense_backward<float>(float*, float*, float*, const float*, const float*, const float*, int, int, int,
                                    Precision, float*);
template void dense_backward<double>(double*, double*, double*, const double*, const double*, const double*, int, int,
                                     int, Precision, double*);

}  // namespace enhanced
