// What a training backend's steps did since the last collect (backend.h, cuda_model.h). Kept
// apart, with no C++20 in it, because nvcc compiles the CUDA model as C++17.
#pragma once

#include <cstdint>

namespace enhanced {

// What the training steps since the last collect() did.
struct TrainTotals {
  double loss_sum = 0;   // sum over steps of (mean loss * batch size), in step order
  int64_t samples = 0;
  int64_t correct = 0;   // samples whose first largest logit is the label
  int64_t steps = 0;     // optimizer steps applied
  // Non-zero when a step stopped the run: 1 = non-finite loss, 2 = non-finite gradient norm
  // with a finite loss. halted_step is that step's number (1-based optimizer step) and
  // halted_value the value. That step and every later one left the weights unchanged (a kind 2
  // step's finite loss and samples are counted above, its step is not).
  int halted = 0;
  int64_t halted_step = 0;
  double halted_value = 0;
};

}  // namespace enhanced
