#include "layers/cpu/lstm_pool.h"

#include <algorithm>

#include "layers/cpu/multiversion.h"
#include "layers/maxpool_steps.h"

namespace enhanced::lstm_pool {
namespace {

// Feature mode: the maximum of one direction's row h (H) and its index, as the strict scan over
// the whole row [h_fwd | h_rev] (maxpool_steps::first_maximum) counts them. The forward half
// starts that scan: first_maximum's own rule, where a NaN first element wins. The reverse half
// continues it, where a NaN never wins: first_maximum from its first element that is not NaN (all
// NaN: a NaN, which loses the combine).
template <class Real>
ENHANCED_MULTIVERSION void feature_row(Real* max, int32_t* index, const Real* h, int hidden, int direction) {
  int first = 0;
  if (direction == 1)
    while (first + 1 < hidden && h[first] != h[first]) ++first;
  const int best = first + maxpool_steps::first_maximum(h + first, hidden - first);
  *max = h[best];
  *index = best;
}

// Time mode: the running maxima out (H) and their times best (H) take row h of time t, the
// direction's step `step`. The result is the first maximal t in time order, as maxpool_forward's
// strict scan from t = 0 finds it (a NaN at t = 0 wins, a NaN later never does). The forward
// direction runs that scan itself. The reverse one meets the times from T - 1 down: a later step
// is an earlier time, so it takes a tie; it takes any number over a NaN (which only t = 0 keeps),
// and at t = 0 whatever the strict scan would start from.
template <class Real>
ENHANCED_MULTIVERSION void time_row(Real* out, int32_t* best, const Real* h, int t, int step, int hidden,
                                    int direction) {
  if (step == 0) {
    std::copy(h, h + hidden, out);
    std::fill(best, best + hidden, t);
    return;
  }
  for (int k = 0; k < hidden; ++k) {
    bool take;
    if (direction == 0) take = h[k] > out[k];
    else if (t > 0) take = h[k] >= out[k] || out[k] != out[k];
    else take = !(h[k] < out[k]);
    out[k] = take ? h[k] : out[k];
    best[k] = take ? t : best[k];
  }
}

template <class Real>
ENHANCED_MULTIVERSION void combine_rows(Real* pooled, int32_t* argmax, const Real* reverse_max,
                                        const int32_t* reverse_index, size_t positions, int hidden) {
  for (size_t p = 0; p < positions; ++p) {
    const bool greater = reverse_max[p] > pooled[p];  // ties and NaN: the forward half's, first
    pooled[p] = greater ? reverse_max[p] : pooled[p];
    argmax[p] = greater ? hidden + reverse_index[p] : argmax[p];
  }
}

// dL/dh's pooled part of one row (H): feature mode, dpooled where argmax (the position's, over
// 2H channels) lies in this direction's half; time mode, the direction's dpooled (H) where its
// argmax (H) is t.
template <class Real>
ENHANCED_MULTIVERSION void gradient_row(Real* row, const int32_t* argmax, const Real* dpooled, int t, int hidden,
                                        int direction, PoolMode mode) {
  if (mode == PoolMode::feature) {
    std::fill(row, row + hidden, Real(0));
    const int k = *argmax - direction * hidden;
    if (k >= 0 && k < hidden) row[k] = *dpooled;
    return;
  }
  for (int k = 0; k < hidden; ++k) row[k] = argmax[k] == t ? dpooled[k] : Real(0);
}

}  // namespace

template <class Real>
void DirectionPool<Real>::take(int b, int t, int step, const Real* h) const {
  if (mode == PoolMode::feature) {
    const size_t p = static_cast<size_t>(b) * seq_len + t;
    feature_row(max + p, index + p, h, hidden, direction);
  } else {
    const size_t at = (2 * static_cast<size_t>(b) + direction) * hidden;
    time_row(max + at, index + at, h, t, step, hidden, direction);
  }
}

template <class Real>
void combine_features(Real* pooled, int32_t* argmax, const Real* reverse_max, const int32_t* reverse_index,
                      size_t positions, int hidden) {
  combine_rows(pooled, argmax, reverse_max, reverse_index, positions, hidden);
}

template <class Real>
const Real* DirectionGradient<Real>::at(int b, int t) const {
  const size_t at = mode == PoolMode::feature ? static_cast<size_t>(b) * seq_len + t
                                              : (2 * static_cast<size_t>(b) + direction) * hidden;
  gradient_row(row, argmax + at, dpooled + at, t, hidden, direction, mode);
  return row;
}

template struct DirectionPool<float>;
template struct DirectionPool<double>;
template struct DirectionGradient<float>;
template struct DirectionGradient<double>;
template void combine_features<float>(float*, int32_t*, const float*, const int32_t*, size_t, int);
template void combine_features<double>(double*, int32_t*, const double*, const int32_t*, size_t, int);

}  // namespace enhanced::lstm_pool
