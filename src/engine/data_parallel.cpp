#include "engine/data_parallel.h"

#include <algorithm>

#include "enhanced/common.h"
#include "enhanced/data_parallel.h"

namespace enhanced {

Shard shard_of(int batch_size, int rank, int ranks) {
  const int base = batch_size / ranks, extra = batch_size % ranks;
  return {rank * base + std::min(rank, extra), base + (rank < extra ? 1 : 0)};
}

void slice_batch(Batch& out, const Batch& in, int first, int count) {
  if (first < 0 || count < 0 || first + count > in.size)
    fail("internal: samples ", first, "..", first + count, " of a batch of ", in.size);
  const size_t T = static_cast<size_t>(in.seq_len);
  const size_t p0 = static_cast<size_t>(first) * T, p1 = static_cast<size_t>(first + count) * T;
  out.size = count;
  out.seq_len = in.seq_len;
  const int32_t base = in.identifier_offsets[p0];
  out.identifier_offsets.resize(p1 - p0 + 1);
  for (size_t p = p0; p <= p1; ++p) out.identifier_offsets[p - p0] = in.identifier_offsets[p] - base;
  out.identifier_ids.assign(in.identifier_ids.begin() + base, in.identifier_ids.begin() + in.identifier_offsets[p1]);
  out.cur_word_ids.assign(in.cur_word_ids.begin() + static_cast<std::ptrdiff_t>(p0),
                          in.cur_word_ids.begin() + static_cast<std::ptrdiff_t>(p1));
  out.labels.assign(in.labels.begin() + first, in.labels.begin() + first + count);
  out.sample_indices.assign(in.sample_indices.begin() + first, in.sample_indices.begin() + first + count);
}

void GradientExchange::run(ParameterBuffer<float>& grads, std::vector<int32_t>& rows, Communicator& communicator) {
  const size_t table = grads.embedding_size();
  communicator.sum(grads.data.data() + table, grads.size() - table);
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
    for (size_t d = 0; d < D; ++d) row[d] += add[d];
  }
  rows = all_ids_;
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
}

}  // namespace enhanced
