// How a data-parallel step divides its batch (enhanced/data_parallel.h): in the core library, since
// the CPU engine, the CUDA engine and evaluation all shard alike.
#include "enhanced/data_parallel.h"

#include <algorithm>
#include <cstddef>

#include "enhanced/common.h"
#include "steps/softmax_xent_steps.h"

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

Shard take_shard(Batch& out, const Batch& batch, int rank, int ranks, const float* class_weights,
                 steps::LossDenominator* whole, ClassWeightMean mean) {
  const Shard mine = shard_of(batch.size, rank, ranks);
  slice_batch(out, batch, mine.first, mine.count);
  if (whole) {
    whole->batch = batch.size;
    whole->weighted = steps::loss_denominator(batch.labels.data(), class_weights, batch.size, mean);
  }
  return mine;
}

}  // namespace enhanced
