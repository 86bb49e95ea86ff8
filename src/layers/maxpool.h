// Max-pool of the BiLSTM output (docs/model.md, forward step 3). Feature mode: pooled (B, T) = max over
// the 2H features of y (B, T, 2H). Time mode: pooled (B, 2H) = max over T. The gradient goes to
// the first maximal element; argmax keeps its index.
#pragma once

#include <cstdint>

#include "enhanced/model.h"

namespace enhanced {

// pooled (B, F), argmax (B, F) with F = T (feature) or 2H (time); y (B, T, C), C = 2H.
template <class Real>
void maxpool_forward(Real* pooled, int32_t* argmax, const Real* y, int batch, int seq_len, int channels,
                     PoolMode mode);

// dy (B, T, C) = scatter of dpooled to the argmax elements, zero elsewhere.
template <class Real>
void maxpool_backward(Real* dy, const int32_t* argmax, const Real* dpooled, int batch, int seq_len, int channels,
                      PoolMode mode);

}  // namespace enhanced
