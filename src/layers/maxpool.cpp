#include "layers/maxpool.h"

#include <algorithm>

namespace enhanced {

template <class Real>
void maxpool_forward(Real* pooled, int32_t* argmax, const Real* y, int batch, int seq_len, int channels,
                     PoolMode mode) {
  if (mode == PoolMode::feature) {
    for (size_t p = 0; p < static_cast<size_t>(batch) * seq_len; ++p) {
      const Real* row = y + p * channels;
      int best = 0;
      for (int k = 1; k < channels; ++k)
        if (row[k] > row[best]) best = k;  // strict: ties keep the first maximum
      pooled[p] = row[best];
      argmax[p] = best;
    }
    return;
  }
  for (int b = 0; b < batch; ++b) {
    const Real* sample = y + static_cast<size_t>(b) * seq_len * channels;
    Real* out = pooled + static_cast<size_t>(b) * channels;
    int32_t* best = argmax + static_cast<size_t>(b) * channels;
    std::copy(sample, sample + channels, out);
    std::fill(best, best + channels, 0);
    for (int t = 1; t < seq_len; ++t) {
      const Real* row = sample + static_cast<size_t>(t) * channels;
      for (int k = 0; k < channels; ++k) {
        if (row[k] > out[k]) {
          out[k] = row[k];
          best[k] = t;
        }
      }
    }
  }
}

template <class Real>
void maxpool_backward(Real* dy, const int32_t* argmax, const Real* dpooled, int batch, int seq_len, int channels,
                      PoolMode mode) {
  std::fill(dy, dy + static_cast<size_t>(batch) * seq_len * channels, Real(0));
  if (mode == PoolMode::feature) {
    for (size_t p = 0; p < static_cast<size_t>(batch) * seq_len; ++p) dy[p * channels + argmax[p]] = dpooled[p];
    return;
  }
  for (int b = 0; b < batch; ++b) {
    for (int k = 0; k < channels; ++k) {
      const size_t i = static_cast<size_t>(b) * channels + k;
      dy[(static_cast<size_t>(b) * seq_len + argmax[i]) * channels + k] = dpooled[i];
    }
  }
}

template void maxpool_forward<float>(float*, int32_t*, const float*, int, int, int, PoolMode);
template void maxpool_forward<double>(double*, int32_t*, const double*, int, int, int, PoolMode);
template void maxpool_backward<float>(float*, const int32_t*, const float*, int, int, int, PoolMode);
template void maxpool_backward<double>(double*, const int32_t*, const double*, int, int, int, PoolMode);

}  // namespace enhanced
