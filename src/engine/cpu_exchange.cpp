#include "engine/cpu_exchange.h"

#include <algorithm>

#include "enhanced/common.h"
#include "steps/gradient_exchange_steps.h"

namespace enhanced {

// The exchange's rule: steps/gradient_exchange_steps.h (the CUDA engine's is the same).
void CpuGradientExchange::run(ParameterBuffer<float>& grads, std::vector<int32_t>& rows, Communicator& communicator) {
  const steps::DensePart dense = steps::dense_part(grads.embedding_size(), grads.size());
  communicator.sum(grads.data.data() + dense.offset, dense.count);
  // This rank's rows, packed and cleared: the merge below adds every rank's (its own included)
  // in rank order, so each row's sum is formed in the same order on every rank.
  const size_t D = static_cast<size_t>(grads.config.embedding_dim);
  mine_.resize(rows.size() * D);
  for (size_t i = 0; i < rows.size(); ++i) {
    float* row = grads.embedding + static_cast<size_t>(rows[i]) * D;
    std::copy_n(row, D, mine_.data() + i * D);
    std::fill_n(row, D, 0.0f);
  }
  communicator.gather(all_ids_, id_counts_, rows.data(), static_cast<int>(rows.size()));
  value_counts_.resize(id_counts_.size());
  for (size_t r = 0; r < id_counts_.size(); ++r) value_counts_[r] = id_counts_[r] * static_cast<int>(D);
  communicator.gather(all_values_, value_counts_, mine_.data());
  for (size_t i = 0; i < all_ids_.size(); ++i) {
    float* row = grads.embedding + static_cast<size_t>(all_ids_[i]) * D;
    const float* add = all_values_.data() + i * D;
    for (size_t d = 0; d < D; ++d) steps::add_exchanged(row[d], add[d]);
  }
  rows = all_ids_;
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
}

}  // namespace enhanced
