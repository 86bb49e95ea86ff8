// The BiLSTM's indexing rules, shared by its FP32 path (layers/lstm.cpp) and its bfloat16 one
// (layers/cpu/lstm_bf16.cpp): which time a step is, and what a position's h_{t-1} is.
#pragma once

#include <cstddef>

namespace enhanced::lstm_steps {

// Time index of step s in a direction, forward 0..T-1, reverse T-1..0.
inline int step_time(int direction, int step, int seq_len) { return direction == 0 ? step : seq_len - 1 - step; }

// The time a direction's step at t follows (-1 or T at a sequence's first step).
inline int previous_time(int direction, int t) { return direction == 0 ? t - 1 : t + 1; }

// h_{t-1} of position p = (b, t) in a direction: its H values in y (B, T, 2H), or null at the
// sequence's first step (the zero initial state). What each step's gates were computed from.
template <class Real>
const Real* previous_h(const Real* y, size_t p, int direction, int seq_len, int hidden) {
  const int t = static_cast<int>(p % seq_len), t_prev = previous_time(direction, t);
  if (t_prev < 0 || t_prev >= seq_len) return nullptr;
  return y + (p - t + t_prev) * 2 * hidden + static_cast<size_t>(direction) * hidden;
}

}  // namespace enhanced::lstm_steps
