// The BiLSTM's indexing rules, shared by its FP32 path (layers/lstm.cpp) and its bfloat16 one
// (layers/cpu/lstm_bf16.cpp): which time a step is, and which time it follows.
#pragma once

namespace enhanced::lstm_steps {

// Time index of step s in a direction, forward 0..T-1, reverse T-1..0.
inline int step_time(int direction, int step, int seq_len) { return direction == 0 ? step : seq_len - 1 - step; }

// The time a direction's step at t follows (-1 or T at a sequence's first step).
inline int previous_time(int direction, int t) { return direction == 0 ? t - 1 : t + 1; }

}  // namespace enhanced::lstm_steps
