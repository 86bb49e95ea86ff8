// The max-pool fused into the BiLSTM (layers/lstm.h, bilstm_maxpool_forward and _backward): each
// direction takes its maxima from a row of h as its pointwise pass produces it, while the row is
// in L1, and its backward reads the pooled gradient where it reads dL/dh, so y (B, T, 2H) and a
// dense dy need not pass through memory. The results are maxpool_forward's and maxpool_backward's
// (layers/maxpool.h, the reference) bit for bit: the same elements win, ties and NaN included.
#pragma once

#include <cstddef>
#include <cstdint>

#include "enhanced/model.h"

namespace enhanced::lstm_pool {

// Where one direction's forward puts its maxima; max null: no pooling.
//   feature: max, index (B, T), the direction's own maximum at each position and its channel
//     within the direction's H (combined by combine_features once both directions are done);
//   time: max, index (B, 2H), pooled and argmax themselves (each direction has its own channels).
template <class Real>
struct DirectionPool {
  Real* max = nullptr;
  int32_t* index = nullptr;
  PoolMode mode = PoolMode::feature;
  int direction = 0, seq_len = 0, hidden = 0;

  // Takes h (H), the row of sample b at time t, the direction's step `step` (0 first).
  void take(int b, int t, int step, const Real* h) const;
};

// Where a direction's forward puts h: its rows of y (B, T, 2H), or, y null, one row (H) that the
// fused max-pool reads while it is in L1; and that pool's maxima (pool.max null: no pooling).
template <class Real>
struct HOutput {
  Real* y;
  Real* row;
  DirectionPool<Real> pool;
  // The row of h at position p (b T + t).
  Real* at(size_t p, int direction, int hidden) const {
    return y ? y + p * 2 * hidden + static_cast<size_t>(direction) * hidden : row;
  }
};

// Feature mode, after both directions: pooled, argmax (P) hold the forward direction's maxima
// and channels; the reverse direction's (P, its channels within its half) win where greater.
template <class Real>
void combine_features(Real* pooled, int32_t* argmax, const Real* reverse_max, const int32_t* reverse_index,
                      size_t positions, int hidden);

// One direction's part of dL/dy from the pooled gradient, a row at a time: what
// maxpool_backward's dense dy holds there (dpooled where argmax points, +0.0 elsewhere).
template <class Real>
struct DirectionGradient {
  Real* row = nullptr;  // (H) the caller's, overwritten by each call of at()
  const int32_t* argmax = nullptr;
  const Real* dpooled = nullptr;
  PoolMode mode = PoolMode::feature;
  int direction = 0, seq_len = 0, hidden = 0;

  // The row (H) of sample b at time t.
  const Real* at(int b, int t) const;
};

}  // namespace enhanced::lstm_pool
