// Softmax cross-entropy on the GPU: the CUDA twin of layers/softmax_xent.h,
// with the same argument order plus the stream / library handle last (kernels/layers.h).
#pragma once

#include <cstdint>

#include "enhanced/model.h"
#include "kernels/cuda_check.h"
#include "steps/softmax_xent_steps.h"

namespace enhanced::cuda {

// The whole batch's denominators when the call sees one rank's shard of it (data-parallel
// training), read on the device: steps/softmax_xent_steps.h's, as the CPU layer's.
using steps::LossDenominator;

// mean_loss (1, double) = mean over the batch, summed in sample order; dlogits (B, L) =
// (softmax - onehot) / B when not null; sample_losses (B, unweighted) when not null (needed for
// mean_loss: pass a buffer of B floats). class_weights (L, device, nullable): the CPU layer's
// weighted loss, divided as `mean` says (enhanced/class_weight_mean.h); it needs mean_loss, which
// holds the weighted mean's denominator between the two kernels. whole (device, nullable; then
// `mean` is not read, as on the CPU): the batch is a shard of `whole`; the gradient rows and
// *mean_loss are then its share of the whole batch's mean (the shares summed over the ranks give
// the whole mean). whole and mean come last but the stream, as the CPU layer's.
void softmax_cross_entropy(float* dlogits, float* sample_losses, double* mean_loss, const float* logits,
                           const int32_t* labels, const float* class_weights, int batch, int num_labels,
                           const LossDenominator* whole, ClassWeightMean mean, cudaStream_t stream);

}  // namespace enhanced::cuda
