#include "layers/maxpool.h"

#include <omp.h>

#include <algorithm>
#include <utility>

#include "layers/cpu/multiversion.h"
#include "layers/maxpool_steps.h"

namespace enhanced {
namespace {

using maxpool_steps::first_maximum;

// Positions [first, last) of feature mode. Multiversioned here, not where the threads split the
// work: GCC outlines an OpenMP region into a function the target clones do not reach.
template <class Real>
ENHANCED_MULTIVERSION void feature_rows(Real* pooled, int32_t* argmax, const Real* y, int64_t first, int64_t last,
                                        int channels) {
  for (int64_t p = first; p < last; ++p) {
    const Real* row = y + p * channels;
    const int best = first_maximum(row, channels);
    pooled[p] = row[best];
    argmax[p] = best;
  }
}

// One sample of time mode: the channels' running maxima over T, taken where an element is greater.
template <class Real>
ENHANCED_MULTIVERSION void time_sample(Real* out, int32_t* best, const Real* sample, int seq_len, int channels) {
  std::copy(sample, sample + channels, out);
  std::fill(best, best + channels, 0);
  for (int t = 1; t < seq_len; ++t) {
    const Real* row = sample + static_cast<size_t>(t) * channels;
    for (int k = 0; k < channels; ++k) {  // strict: ties keep the first maximum
      const bool greater = row[k] > out[k];
      out[k] = greater ? row[k] : out[k];
      best[k] = greater ? t : best[k];
    }
  }
}

// [first, last) of `count` items for the calling OpenMP thread: contiguous shares in thread order.
std::pair<int64_t, int64_t> share_of_thread(int64_t count) {
  const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
  return {count * thread / threads, count * (thread + 1) / threads};
}

}  // namespace

template <class Real>
void maxpool_forward(Real* pooled, int32_t* argmax, const Real* y, int batch, int seq_len, int channels,
                     PoolMode mode) {
  if (mode == PoolMode::feature) {
#pragma omp parallel
    {
      const auto [first, last] = share_of_thread(static_cast<int64_t>(batch) * seq_len);
      feature_rows(pooled, argmax, y, first, last, channels);
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int b = 0; b < batch; ++b)
    time_sample(pooled + static_cast<size_t>(b) * channels, argmax + static_cast<size_t>(b) * channels,
                y + static_cast<size_t>(b) * seq_len * channels, seq_len, channels);
}

// Each position's row is zeroed and given its one gradient by the thread that owns it, in one
// pass over dy (a fill of the whole, then a scatter, would pass twice).
template <class Real>
void maxpool_backward(Real* dy, const int32_t* argmax, const Real* dpooled, int batch, int seq_len, int channels,
                      PoolMode mode) {
  const int64_t positions = static_cast<int64_t>(batch) * seq_len;
  if (mode == PoolMode::feature) {
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < positions; ++p) {
      Real* row = dy + p * channels;
      std::fill(row, row + channels, Real(0));
      row[argmax[p]] = dpooled[p];
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int b = 0; b < batch; ++b) {
    Real* sample = dy + static_cast<size_t>(b) * seq_len * channels;
    std::fill(sample, sample + static_cast<size_t>(seq_len) * channels, Real(0));
    for (int k = 0; k < channels; ++k) {
      const size_t i = static_cast<size_t>(b) * channels + k;
      sample[static_cast<size_t>(argmax[i]) * channels + k] = dpooled[i];
    }
  }
}

template void maxpool_forward<float>(float*, int32_t*, const float*, int, int, int, PoolMode);
template void maxpool_forward<double>(double*, int32_t*, const double*, int, int, int, PoolMode);
template void maxpool_backward<float>(float*, const int32_t*, const float*, int, int, int, PoolMode);
template void maxpool_backward<double>(double*, const int32_t*, const double*, int, int, int, PoolMode);

}  // namespace enhanced
