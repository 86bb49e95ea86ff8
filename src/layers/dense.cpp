#include "layers/dense.h"

#include <cstddef>
#include <type_traits>
#include <vector>

#include "enhanced/common.h"
#include "layers/cpu/blas.h"

namespace enhanced {
namespace {

// The GEMM operand `values` (n of them) as the precision multiplies it: itself in FP32, else a
// copy rounded to bfloat16 in a per-thread buffer of the slot (grown once, then reused). The
// dense layer is a few hundred kFLOP a sample, so bf16 runs as the reference path everywhere.
template <class Real>
const Real* operand(const Real* values, size_t n, Precision precision, int slot) {
  if (precision == Precision::fp32) return values;
  if (!std::is_same<Real, float>::value) fail("internal: the double-precision dense layer is FP32 only");
  thread_local std::vector<Real> buffers[3];
  std::vector<Real>& buffer = buffers[slot];
  buffer.resize(n);
  for (size_t i = 0; i < n; ++i) buffer[i] = static_cast<Real>(round_to_bf16(values[i]));
  return buffer.data();
}

}  // namespace

template <class Real>
void dense_forward(Real* out, const Real* in, const Real* weight, const Real* bias, int batch, int in_features,
                   int out_features, Precision precision) {
  const Real* in_operand = operand(in, static_cast<size_t>(batch) * in_features, precision, 0);
  const Real* weight_operand = operand(weight, static_cast<size_t>(out_features) * in_features, precision, 1);
  for (int b = 0; b < batch; ++b)
    for (int l = 0; l < out_features; ++l) out[static_cast<size_t>(b) * out_features + l] = bias[l];
  gemm(false, true, batch, out_features, in_features, Real(1), in_operand, in_features, weight_operand, in_features,
       Real(1), out, out_features);
}

template <class Real>
void dense_backward(Real* din, Real* dweight, Real* dbias, const Real* dout, const Real* in, const Real* weight,
                    int batch, int in_features, int out_features, Precision precision) {
  const Real* dout_operand = operand(dout, static_cast<size_t>(batch) * out_features, precision, 0);
  const Real* in_operand = operand(in, static_cast<size_t>(batch) * in_features, precision, 1);
  const Real* weight_operand = operand(weight, static_cast<size_t>(out_features) * in_features, precision, 2);
  gemm(true, false, out_features, in_features, batch, Real(1), dout_operand, out_features, in_operand, in_features,
       Real(1), dweight, in_features);
  for (int b = 0; b < batch; ++b)  // the bias gradient is a sum, not a GEMM: FP32 in every precision
    for (int l = 0; l < out_features; ++l) dbias[l] += dout[static_cast<size_t>(b) * out_features + l];
  gemm(false, false, batch, in_features, out_features, Real(1), dout_operand, out_features, weight_operand,
       in_features, Real(0), din, in_features);
}

template void dense_forward<float>(float*, const float*, const float*, const float*, int, int, int, Precision);
template void dense_forward<double>(double*, const double*, const double*, const double*, int, int, int, Precision);
template void dense_backward<float>(float*, float*, float*, const float*, const float*, const float*, int, int, int,
                                    Precision);
template void dense_backward<double>(double*, double*, double*, const double*, const double*, const double*, int, int,
                                     int, Precision);

}  // namespace enhanced
