// Dense layer (docs/model.md, forward step 4): out (B, L) = in (B, F) W^T + b, W (L, F) as torch.nn.Linear.
// precision: the GEMMs' (enhanced/precision.h); the double path (the gradient checks) is FP32.
// workspace: dense_workspace_size elements, for the bf16 paths' operands (FP32 needs none: null).
#pragma once

#include <cstddef>

#include "enhanced/precision.h"

namespace enhanced {

// Elements of Real the bf16 paths need (either of them; 0 would do for FP32).
template <class Real>
size_t dense_workspace_size(int batch, int in_features, int out_features);

template <class Real>
void dense_forward(Real* out, const Real* in, const Real* weight, const Real* bias, int batch, int in_features,
                   int out_features, Precision precision = Precision::fp32, Real* workspace = nullptr);

// din (B, F) =; dweight (L, F) +=; dbias (L) +=.
template <class Real>
void dense_backward(Real* din, Real* dweight, Real* dbias, const Real* dout, const Real* in, const Real* weight,
                    int batch, int in_features, int out_features, Precision precision = Precision::fp32,
                    Real* workspace = nullptr);

}  // namespace enhanced
