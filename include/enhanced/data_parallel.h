// How a data-parallel step divides its batch over the ranks (docs/distributed.md): the whole
// batch is the one a single process would take (the loader's seeded order is global); rank r
// computes samples [first, first + count) of it, the remainder going to the first ranks.
#pragma once

#include "enhanced/batch.h"
#include "enhanced/class_weight_mean.h"

namespace enhanced {

struct Shard {
  int first = 0;
  int count = 0;  // 0 when the batch has fewer samples than there are ranks
};

Shard shard_of(int batch_size, int rank, int ranks);

// out = samples [first, first + count) of `in`, with their sample indices (out's capacity reused).
void slice_batch(Batch& out, const Batch& in, int first, int count);

namespace steps {
struct LossDenominator;  // src/steps/softmax_xent_steps.h
}

// Rank `rank`'s part of a data-parallel step's `batch` over `ranks`, the one rule the CPU engine,
// the CUDA engine and evaluation shard by: its samples (shard_of, returned), sliced into `out`
// (empty when it has none), and, when `whole` is not null, the whole batch's loss denominators:
// its size and its weighted mean's denominator as `mean` divides (class_weights nullable:
// unweighted, the size), its total class weight summed in its sample order as one process sums it.
Shard take_shard(Batch& out, const Batch& batch, int rank, int ranks, const float* class_weights = nullptr,
                 steps::LossDenominator* whole = nullptr, ClassWeightMean mean = ClassWeightMean::weights);

}  // namespace enhanced
