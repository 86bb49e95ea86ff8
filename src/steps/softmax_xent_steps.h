// The class-weighted loss's scalars (torch's CrossEntropyLoss(weight=w)), written once for the
// CPU layer (layers/softmax_xent.cpp) and its CUDA twin (kernels/softmax_xent.cu): the batch's
// total weight, each sample's share of the mean and the mean itself. Sums run in sample order
// in double, so both devices divide by the same number.
#pragma once

#include <cstdint>

#include "steps/host_device.h"

namespace enhanced::steps {

// The whole batch's loss denominators when a call sees one rank's shard of a data-parallel
// step's batch (data_parallel.h's take_shard): its size and its total class weight, summed in its
// sample order (its size when unweighted). The CPU layer (layers/softmax_xent.h) takes it on the
// host; the CUDA engine uploads it with the step's header for its kernels to read on the device,
// so that a captured graph serves every step (hence the fixed layout).
struct LossDenominator {
  double total_weight = 0;
  int32_t batch = 0;
  int32_t reserved = 0;
};

// sum_b w[y_b] in sample order (B when class_weights is null: every sample weighs 1).
ENHANCED_HOST_DEVICE inline double total_class_weight(const int32_t* labels, const float* class_weights, int batch) {
  if (!class_weights) return static_cast<double>(batch);
  double total = 0;
  for (int b = 0; b < batch; ++b) total += static_cast<double>(class_weights[labels[b]]);
  return total;
}

// Sample b's weight in the sums (1 unweighted).
ENHANCED_HOST_DEVICE inline double sample_weight(const float* class_weights, int32_t label) {
  return class_weights ? static_cast<double>(class_weights[label]) : 1.0;
}

// Sample b's share of the mean, the factor of its gradient row: 1 / B unweighted (in Real, as
// the unweighted layer always computed it), w[y_b] / total weighted, 0 when the weights sum to 0.
template <class Real>
ENHANCED_HOST_DEVICE inline Real loss_share(const float* class_weights, int32_t label, double total_weight,
                                            int batch) {
  if (!class_weights) return Real(1) / static_cast<Real>(batch);
  return total_weight > 0 ? static_cast<Real>(static_cast<double>(class_weights[label]) / total_weight) : Real(0);
}

// The mean from the (weighted) sum of losses: 0 when the weights sum to 0 (torch: NaN).
ENHANCED_HOST_DEVICE inline double mean_of(double weighted_sum, double total_weight) {
  return total_weight > 0 ? weighted_sum / total_weight : 0.0;
}

}  // namespace enhanced::steps
