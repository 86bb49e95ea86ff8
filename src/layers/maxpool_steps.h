// The max-pool's rule for the maximum of a row, written once for maxpool_forward
// (layers/maxpool.cpp) and the max-pool fused into the BiLSTM (layers/cpu/lstm_pool.cpp), which
// must find the same element.
#pragma once

#include <algorithm>

#include "layers/cpu/multiversion.h"

namespace enhanced::maxpool_steps {

// The first maximal element of row[0, n): what "if (row[k] > row[best]) best = k" over k finds,
// in one vectorised pass over the row. Each of 16 lanes runs that scan over its own elements
// (every 16th), keeping its maximum and where it first reached it: a new element wins only where
// it is greater (a NaN never is, -0.0 and +0.0 keep the first). The first element equal to the
// largest of the lanes' maxima is then the lowest of the indices of the lanes that hold it, unless
// only the tail past the last whole block does. A NaN first element wins the strict scan outright
// (nothing compares greater): index 0.
template <class Real>
ENHANCED_INLINE int first_maximum(const Real* row, int n) {
  constexpr int kLanes = 16;
  // 16 values a vector (registers where the ISA has them; aligned(alignof(Real)): the row need not
  // be aligned), and the comparisons' lanes of the same width, which hold the indices.
  typedef Real Lanes __attribute__((vector_size(kLanes * sizeof(Real)), aligned(alignof(Real))));
  typedef decltype(Lanes{} > Lanes{}) Indices;
  Indices lane_of{};
  for (int l = 0; l < kLanes; ++l) lane_of[l] = l;
  Lanes lanes = row[0] - Lanes{};  // row[0] in every lane (x - 0 keeps -0.0), at index 0
  Indices first_at{};
  int k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    const Lanes values = *reinterpret_cast<const Lanes*>(row + k);
    const Indices greater = values > lanes;
    lanes = greater ? values : lanes;
    first_at = greater ? lane_of + k : first_at;
  }
  Real best = lanes[0];
  int index = static_cast<int>(first_at[0]);
  for (int l = 1; l < kLanes; ++l) {
    if (lanes[l] > best) best = lanes[l], index = static_cast<int>(first_at[l]);
    else if (lanes[l] == best && first_at[l] < index) index = static_cast<int>(first_at[l]);
  }
  for (; k < n; ++k)
    if (row[k] > best) best = row[k], index = k;
  return best != best ? 0 : index;
}

}  // namespace enhanced::maxpool_steps
