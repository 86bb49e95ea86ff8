// The training steps' totals (enhanced/train_totals.h), one rule for both engines: the CPU
// engine calls these on its host totals, the GPU's one-thread kernels on the device copy
// (kernels/step_totals.cu), so the loss sum, the correct count and the halt are the same
// arithmetic on either device.
#pragma once

#include <cstdint>

#include "enhanced/train_totals.h"
#include "steps/host_device.h"

namespace enhanced::steps {

// The label a row of logits (L) predicts: the first largest (std::max_element's choice).
ENHANCED_HOST_DEVICE inline int predicted_label(const float* row, int num_labels) {
  int best = 0;
  for (int l = 1; l < num_labels; ++l)
    if (row[l] > row[best]) best = l;
  return best;
}

// After a step's loss: its mean loss * batch (rounded as the host's `sum += loss * batch`, never
// fused), batch samples and `correct` predictions added, or, when the loss is not finite, the
// halt at `step` (its optimizer step number). Nothing once halted.
ENHANCED_HOST_DEVICE inline void account_loss(TrainTotals& totals, double mean_loss, int64_t batch, int64_t correct,
                                              int64_t step) {
  if (totals.halted != Halt::none) return;
  if (!is_finite(mean_loss)) {
    totals.halted = Halt::loss;
    totals.halted_step = step;
    totals.halted_value = mean_loss;
    return;
  }
#ifdef __CUDA_ARCH__
  totals.loss_sum = __dadd_rn(totals.loss_sum, __dmul_rn(mean_loss, static_cast<double>(batch)));
#else
  totals.loss_sum += mean_loss * static_cast<double>(batch);
#endif
  totals.samples += batch;
  totals.correct += correct;
}

// After the update (which skips a step whose gradient norm is not finite): the step counted, or
// the halt on that norm at `step`. Nothing once halted.
ENHANCED_HOST_DEVICE inline void account_update(TrainTotals& totals, double gradient_norm, int64_t step) {
  if (totals.halted != Halt::none) return;
  if (!is_finite(gradient_norm)) {
    totals.halted = Halt::gradient;
    totals.halted_step = step;
    totals.halted_value = gradient_norm;
    return;
  }
  totals.steps += 1;
}

}  // namespace enhanced::steps
