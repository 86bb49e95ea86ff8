// The device half of the embedding gradient's exchange between the ranks of a data-parallel run
// (docs/distributed.md): this rank's touched rows packed as ids and rows into buffers of a fixed
// bound (so that the collective's size, and a captured graph, never depend on the batch), every
// rank's rows added in rank order, and the sorted union of the ranks' rows for the optimizer.
// O(rows x D) work and memory, never V x D. The collectives themselves are NCCL's
// (engine/cuda_exchange.cpp).
//
// Host-compilable: tests include it.
#pragma once

#include <cstdint>

#include "kernels/cuda_check.h"

namespace enhanced::cuda {

// ids (bound) = rows[0 .. *count), then `vocab` (padding: it sorts after every row); values
// (bound, D) = those rows of dembedding (V, D), then zeros; the packed rows of dembedding are
// zeroed (the merge adds every rank's rows, this rank's own included). count == nullptr: no rows
// (a rank whose shard of the batch is empty). *count <= bound is the caller's promise.
void pack_touched_rows(int32_t* ids, float* values, float* dembedding, const int32_t* rows, const int32_t* count,
                       int64_t bound, int dim, int32_t vocab, cudaStream_t stream);

// dembedding[ids[i]] += values[i] for the `bound` packed rows of one rank (padding skipped). The
// rows of one rank are distinct, so one launch has no conflicting writes; a launch per rank, in
// rank order, forms each row's sum in the same order on every rank.
void add_packed_rows(float* dembedding, const int32_t* ids, const float* values, int64_t bound, int dim,
                     int32_t vocab, cudaStream_t stream);

// The sorted distinct rows of `count` packed ids (every rank's, padding included): rows()[0 ..
// *row_count()) on the device, what std::sort + std::unique of the CPU exchange gives.
class PackedRowUnion {
 public:
  // Room for `count` ids below vocab + 1 (asynchronous on stream; *row_count() becomes 0).
  void reserve(int64_t count, int32_t vocab, cudaStream_t stream);
  void run(const int32_t* ids, cudaStream_t stream);
  const int32_t* rows() const { return unique_.data(); }
  const int32_t* row_count() const { return unique_count_.data(); }
  int64_t capacity() const { return count_; }

 private:
  int64_t count_ = 0;
  int32_t vocab_ = 0;
  int end_bit_ = 32;
  DeviceBuffer<int32_t> sorted_, unique_, unique_count_;
  DeviceBuffer<unsigned char> temp_;
};

}  // namespace enhanced::cuda
