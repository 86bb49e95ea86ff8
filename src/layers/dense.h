// Dense layer (docs/model.md, forward step 4): out (B, L) = in (B, F) W^T + b, W (L, F) as torch.nn.Linear.
#pragma once

namespace enhanced {

template <class Real>
void dense_forward(Real* out, const Real* in, const Real* weight, const Real* bias, int batch, int in_features,
                   int out_features);

// din (B, F) =; dweight (L, F) +=; dbias (L) +=.
template <class Real>
void dense_backward(Real* din, Real* dweight, Real* dbias, const Real* dout, const Real* in, const Real* weight,
                    int batch, int in_features, int out_features);

}  // namespace enhanced
