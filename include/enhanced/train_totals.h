// What an engine's training steps did since the last collect (engine.h). Kept apart, with no
// C++20 in it, because nvcc compiles the CUDA engine as C++17: the GPU keeps this very struct in
// device memory, and both engines fill it with steps/step_totals_steps.h's rules.
#pragma once

#include <cstddef>
#include <cstdint>

namespace enhanced {

// Why a step stopped the run.
enum class Halt : int32_t { none = 0, loss = 1, gradient = 2 };

struct TrainTotals {
  // The counters, which collect() hands out and resets (the first kTotalsCounterBytes bytes).
  double loss_sum = 0;   // sum over steps of (mean loss * batch size), in step order
  int64_t samples = 0;
  int64_t correct = 0;   // samples whose first largest logit is the label
  int64_t steps = 0;     // optimizer steps applied
  // A step that stopped the run, sticky: Halt::loss for a non-finite loss, Halt::gradient for a
  // non-finite gradient norm with a finite loss. halted_step is that step's number (1-based
  // optimizer step) and halted_value the value. That step and every later one left the weights
  // unchanged (a Halt::gradient step's finite loss and samples are counted above, its step is not).
  double halted_value = 0;
  int64_t halted_step = 0;
  Halt halted = Halt::none;
  int32_t reserved = 0;
};

inline constexpr size_t kTotalsCounterBytes = offsetof(TrainTotals, halted_value);

}  // namespace enhanced
