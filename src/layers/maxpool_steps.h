// The max-pool's rule for the maximum of a row, written once for maxpool_forward
// (layers/maxpool.cpp) and the max-pool fused into the BiLSTM (layers/cpu/lstm_pool.cpp), which
// must find the same element.
#pragma once

#include <algorithm>

#include "layers/cpu/multiversion.h"

namespace enhanced::maxpool_steps {

// The first maximal element of row[0, n): what "if (row[k] > row[best]) best = k" over k finds,
// in two vectorisable passes over a row that stays in L1. The lanes' running maxima take a new
// element only where it is greater (a NaN never is, -0.0 and +0.0 keep the first), so the maximum
// found is one the strict scan would keep; the first element equal to it is its index. A NaN
// first element wins the strict scan outright (nothing compares greater): index 0.
template <class Real>
ENHANCED_INLINE int first_maximum(const Real* row, int n) {
  constexpr int kLanes = 16;
  Real lanes[kLanes];
  std::fill(lanes, lanes + kLanes, row[0]);
  int k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] = row[k + l] > lanes[l] ? row[k + l] : lanes[l];
  for (; k < n; ++k) lanes[0] = row[k] > lanes[0] ? row[k] : lanes[0];
  Real best = lanes[0];
  for (int l = 1; l < kLanes; ++l) best = lanes[l] > best ? lanes[l] : best;
  if (best != best) return 0;
  int index = 0;
  while (!(row[index] == best)) ++index;
  return index;
}

}  // namespace enhanced::maxpool_steps
