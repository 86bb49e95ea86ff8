// The class-weighted loss's scalars, written once for the CPU layer (layers/softmax_xent.cpp) and
// its CUDA twin (kernels/softmax_xent.cu): the weighted mean's denominator (the batch's total
// weight, torch's CrossEntropyLoss(weight=w), or its size, Keras' class_weight:
// enhanced/class_weight_mean.h), each sample's share of the mean and the mean itself. Sums run in
// sample order in double, so both devices divide by the same number.
#pragma once

#include <cstdint>

#include "enhanced/class_weight_mean.h"
#include "steps/host_device.h"

namespace enhanced::steps {

// The whole batch's loss denominators when a call sees one rank's shard of a data-parallel
// step's batch (data_parallel.h's take_shard): its size and its weighted mean's denominator
// (loss_denominator: its total class weight summed in its sample order, or its size). The CPU
// layer (layers/softmax_xent.h) takes it on the host; the CUDA engine uploads it with the step's
// header for its kernels to read on the device, so that a captured graph serves every step
// (hence the fixed layout).
struct LossDenominator {
  double weighted = 0;  // loss_denominator's
  int32_t batch = 0;
  int32_t reserved = 0;
};

// The weighted mean's denominator: sum_b w[y_b] in sample order (ClassWeightMean::weights), or B
// (ClassWeightMean::batch: Keras' per-sample weights, summed and divided by the batch size); B
// when class_weights is null (every sample weighs 1).
ENHANCED_HOST_DEVICE inline double loss_denominator(const int32_t* labels, const float* class_weights, int batch,
                                                    ClassWeightMean mean) {
  if (!class_weights || mean == ClassWeightMean::batch) return static_cast<double>(batch);
  double total = 0;
  for (int b = 0; b < batch; ++b) total += static_cast<double>(class_weights[labels[b]]);
  return total;
}

// Sample b's weight in the sums (1 unweighted).
ENHANCED_HOST_DEVICE inline double sample_weight(const float* class_weights, int32_t label) {
  return class_weights ? static_cast<double>(class_weights[label]) : 1.0;
}

// Sample b's share of the mean, the factor of its gradient row: 1 / B unweighted (in Real, as
// the unweighted layer always computed it), w[y_b] / denominator weighted (loss_denominator's),
// 0 when the denominator is 0 (the weights sum to 0).
template <class Real>
ENHANCED_HOST_DEVICE inline Real loss_share(const float* class_weights, int32_t label, double denominator,
                                            int batch) {
  if (!class_weights) return Real(1) / static_cast<Real>(batch);
  return denominator > 0 ? static_cast<Real>(static_cast<double>(class_weights[label]) / denominator) : Real(0);
}

// The mean from the (weighted) sum of losses: 0 when the denominator is 0 (torch: NaN).
ENHANCED_HOST_DEVICE inline double mean_of(double weighted_sum, double denominator) {
  return denominator > 0 ? weighted_sum / denominator : 0.0;
}

}  // namespace enhanced::steps
