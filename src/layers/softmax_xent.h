// Softmax cross-entropy against integer labels, mean over the batch (docs/model.md, forward step 5).
// Loss and its gradient in one pass, stable through the max-shifted log-sum-exp.
#pragma once

#include <cstdint>

namespace enhanced {

// mean_loss = the mean over the batch, summed in sample order in double (as the CUDA twin
// writes it). dlogits (B, L) = (softmax - onehot) / B when not null; sample_losses (B) when not null.
template <class Real>
void softmax_cross_entropy(Real* dlogits, Real* sample_losses, double* mean_loss, const Real* logits,
                           const int32_t* labels, int batch, int num_labels);

// probabilities (B, L) = softmax(logits).
template <class Real>
void softmax_forward(Real* probabilities, const Real* logits, int batch, int num_labels);

}  // namespace enhanced
