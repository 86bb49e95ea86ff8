// How a data-parallel step divides its batch over the ranks (docs/distributed.md): the whole
// batch is the one a single process would take (the loader's seeded order is global); rank r
// computes samples [first, first + count) of it, the remainder going to the first ranks.
#pragma once

#include "enhanced/batch.h"

namespace enhanced {

struct Shard {
  int first = 0;
  int count = 0;  // 0 when the batch has fewer samples than there are ranks
};

Shard shard_of(int batch_size, int rank, int ranks);

// out = samples [first, first + count) of `in`, with their sample indices (out's capacity reused).
void slice_batch(Batch& out, const Batch& in, int first, int count);

}  // namespace enhanced
