// Dense layer (docs/model.md, forward step 4): out (B, L) = in (B, F) W^T + b, W (L, F) as torch.nn.Linear.
// precision: the GEMMs' (enhanced/precision.h); the double path (the gradient checks) is FP32.
#pragma once

#include "enhanced/precision.h"

namespace enhanced {

template <class Real>
void dense_forward(Real* out, const Real* in, const Real* weight, const Real* bias, int batch, int in_features,
                   int out_features, Precision precision = Precision::fp32);

// din (B, F) =; dweight (L, F) +=; dbias (L) +=.
template <class Real>
void dense_backward(Real* din, Real* dweight, Real* dbias, const Real* dout, const Real* in, const Real* weight,
                    int batch, int in_features, int out_features, Precision precision = Precision::fp32);

}  // namespace enhanced
