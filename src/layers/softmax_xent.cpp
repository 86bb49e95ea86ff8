#include "layers/softmax_xent.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "steps/softmax_xent_steps.h"

namespace enhanced {

template <class Real>
void softmax_cross_entropy(Real* dlogits, Real* sample_losses, double* mean_loss, const Real* logits,
                           const int32_t* labels, const float* class_weights, int batch, int num_labels,
                           const LossDenominator* whole, ClassWeightMean mean) {
  const double denominator =
      whole ? whole->weighted : steps::loss_denominator(labels, class_weights, batch, mean);
  const int share_batch = whole ? whole->batch : batch;
  double total = 0;
  for (int b = 0; b < batch; ++b) {
    const Real* row = logits + static_cast<size_t>(b) * num_labels;
    const Real shift = *std::max_element(row, row + num_labels);
    Real sum = 0;
    for (int l = 0; l < num_labels; ++l) sum += std::exp(row[l] - shift);
    const Real log_sum = std::log(sum);
    const Real loss = log_sum - (row[labels[b]] - shift);
    if (sample_losses) sample_losses[b] = loss;
    total += steps::sample_weight(class_weights, labels[b]) * static_cast<double>(loss);
    if (dlogits) {
      Real* grad = dlogits + static_cast<size_t>(b) * num_labels;
      const Real share = steps::loss_share<Real>(class_weights, labels[b], denominator, share_batch);
      for (int l = 0; l < num_labels; ++l) grad[l] = std::exp(row[l] - shift - log_sum) * share;
      grad[labels[b]] -= share;
    }
  }
  *mean_loss = steps::mean_of(total, denominator);
}

template <class Real>
void softmax_forward(Real* probabilities, const Real* logits, int batch, int num_labels) {
  for (int b = 0; b < batch; ++b) {
    const Real* row = logits + static_cast<size_t>(b) * num_labels;
    Real* out = probabilities + static_cast<size_t>(b) * num_labels;
    const Real shift = *std::max_element(row, row + num_labels);
    Real sum = 0;
    for (int l = 0; l < num_labels; ++l) sum += (out[l] = std::exp(row[l] - shift));
    for (int l = 0; l < num_labels; ++l) out[l] /= sum;
  }
}

template void softmax_cross_entropy<float>(float*, float*, double*, const float*, const int32_t*, const float*, int,
                                           int, const LossDenominator*, ClassWeightMean);
template void softmax_cross_entropy<double>(double*, double*, double*, const double*, const int32_t*, const float*,
                                            int, int, const LossDenominator*, ClassWeightMean);
template void softmax_forward<float>(float*, const float*, int, int);
template void softmax_forward<double>(double*, const double*, int, int);

}  // namespace enhanced
