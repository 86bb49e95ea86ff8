// Softmax cross-entropy against integer labels, mean over the batch (docs/model.md, forward step 5).
// Loss and its gradient in one pass, stable through the max-shifted log-sum-exp.
#pragma once

#include <cstdint>

#include "steps/softmax_xent_steps.h"

namespace enhanced {

// mean_loss = the mean over the batch, summed in sample order in double (as the CUDA twin
// writes it). dlogits (B, L) = (softmax - onehot) / B when not null; sample_losses (B), each
// sample's unweighted loss, when not null.
//
// class_weights (L, nullable): mean_loss = sum_b w[y_b] * loss_b / N and dlogits row b = w[y_b] *
// (softmax - onehot) / N, sums in sample order in double, where N (`mean`) is sum_b w[y_b] for
// ClassWeightMean::weights (torch's CrossEntropyLoss(weight=w)) or B for ClassWeightMean::batch
// (Keras' class_weight, "sum_over_batch_size"). A batch whose weights sum to 0 has loss 0 and a
// zero gradient (torch gives 0 / 0 = NaN there; nothing of that batch can be learnt either way).
// The scalars are steps/softmax_xent_steps.h's, shared with the kernel.
//
// whole (nullable): when this batch is one rank's part of a data-parallel step, the whole step's
// B and N (B unweighted; `mean` is then not read): the shares are those of the whole batch, and
// mean_loss this part's share of the whole batch's mean (the ranks' values sum to it). The
// struct is steps/softmax_xent_steps.h's, the one the CUDA twin reads.
using steps::LossDenominator;

template <class Real>
void softmax_cross_entropy(Real* dlogits, Real* sample_losses, double* mean_loss, const Real* logits,
                           const int32_t* labels, const float* class_weights, int batch, int num_labels,
                           const LossDenominator* whole = nullptr,
                           ClassWeightMean mean = ClassWeightMean::weights);

// probabilities (B, L) = softmax(logits).
template <class Real>
void softmax_forward(Real* probabilities, const Real* logits, int batch, int num_labels);

}  // namespace enhanced
