// A data-parallel step's gradient exchange, one rule for both devices (engine/cpu_exchange.cpp
// over the Communicator on the CPU, engine/cuda_exchange.cpp + kernels/row_exchange.cu over NCCL):
// every rank ends with the same bits, the whole batch's gradient.
//   1. The dense part (dense_part: everything after the embedding table, one flat buffer) is
//      summed over the ranks by the transport's all-reduce.
//   2. Each rank's touched embedding rows travel as (id, row) pairs, O(batch) and never V x D;
//      the rank clears them in its own table first.
//   3. Every rank adds every rank's rows, its own included, in rank order (add_exchanged), so
//      each row's sum is formed in the same order everywhere; the touched rows become the sorted
//      union of the ranks' rows, which the optimizer visits.
#pragma once

#include <cstddef>

#include "steps/host_device.h"

namespace enhanced::steps {

// The dense part of a gradient of `total` values whose first `table` are the embedding table.
struct DensePart {
  size_t offset;
  size_t count;
};
ENHANCED_HOST_DEVICE inline DensePart dense_part(size_t table, size_t total) { return {table, total - table}; }

// One value of a rank's packed row added into the merged table: rounded, never fused.
ENHANCED_HOST_DEVICE inline void add_exchanged(float& target, float value) { target = add_rn(target, value); }

// Which list names the embedding gradient's non-zero rows, the ones a clear must zero: none (the
// gradient is clear), the last backward's own touched rows, or, after a data-parallel training
// step's exchange, the union of every rank's rows (rule 3 adds them all in). A device whose two
// lists are separate (the GPU's workspace and exchange) clears through the one this names.
enum class GradientRows { clear, own, exchanged };
// The rows a backward leaves: a data-parallel training step's are exchanged; compute_gradients
// and a lone rank's steps keep their own.
inline GradientRows rows_left_by(bool exchanged) { return exchanged ? GradientRows::exchanged : GradientRows::own; }

}  // namespace enhanced::steps
