#include "layers/dense.h"

#include <cstddef>

#include "layers/cpu/blas.h"

namespace enhanced {

template <class Real>
void dense_forward(Real* out, const Real* in, const Real* weight, const Real* bias, int batch, int in_features,
                   int out_features) {
  for (int b = 0; b < batch; ++b)
    for (int l = 0; l < out_features; ++l) out[static_cast<size_t>(b) * out_features + l] = bias[l];
  gemm(false, true, batch, out_features, in_features, Real(1), in, in_features, weight, in_features, Real(1), out,
       out_features);
}

template <class Real>
void dense_backward(Real* din, Real* dweight, Real* dbias, const Real* dout, const Real* in, const Real* weight,
                    int batch, int in_features, int out_features) {
  gemm(true, false, out_features, in_features, batch, Real(1), dout, out_features, in, in_features, Real(1), dweight,
       in_features);
  for (int b = 0; b < batch; ++b)
    for (int l = 0; l < out_features; ++l) dbias[l] += dout[static_cast<size_t>(b) * out_features + l];
  gemm(false, false, batch, in_features, out_features, Real(1), dout, out_features, weight, in_features, Real(0), din,
       in_features);
}

template void dense_forward<float>(float*, const float*, const float*, const float*, int, int, int);
template void dense_forward<double>(double*, const double*, const double*, const double*, int, int, int);
template void dense_backward<float>(float*, float*, float*, const float*, const float*, const float*, int, int, int);
template void dense_backward<double>(double*, double*, double*, const double*, const double*, const double*, int, int,
                                     int);

}  // namespace enhanced
