// The embedding blend on the GPU: the CUDA twin of layers/embedding_blend.h,
// with the same argument order plus the stream / library handle last (kernels/layers.h).
#pragma once

#include <cstdint>

#include "enhanced/model.h"
#include "kernels/cuda_check.h"

namespace enhanced::cuda {

// x (P, D) with P = B*T positions. Bit-identical to the CPU layer (same summation order,
// no fused multiply-add).
void embedding_blend_forward(float* x, const int32_t* identifier_offsets, const int32_t* identifier_ids,
                             const int32_t* cur_word_ids, const float* embedding, int positions, int dim,
                             BlendMode mode, cudaStream_t stream);

// Scratch of the deterministic embedding backward, sized for the largest batch (grows, with an
// allocation, only when a batch has more identifier ids than any before). After a backward it
// also holds the batch's distinct rows: touched_rows()[0 .. *touched_count()) on the device,
// sorted ascending (what embedding_touched_rows gives on the CPU); before the first backward
// *touched_count() is 0.
class EmbeddingGradWorkspace {
 public:
  EmbeddingGradWorkspace() = default;
  // Ensures room for `positions` positions and `identifier_ids` ids (entries = their sum).
  // Asynchronous on `stream`; synchronise first when growing may free memory still in use.
  // Growing forgets the touched rows (*touched_count() becomes 0): zero their gradients first.
  void reserve(int positions, int64_t identifier_ids, int64_t vocab_size, int dim, cudaStream_t stream);

  const int32_t* touched_rows() const { return unique_rows_.data(); }
  const int32_t* touched_count() const { return run_count_.data(); }  // one int on the device
  int64_t entry_capacity() const { return static_cast<int64_t>(keys_in_.size()); }
  // Changes whenever reserve reallocates (a captured CUDA graph holding the old pointers is stale).
  uint64_t generation() const { return generation_; }

 private:
  friend void embedding_blend_backward(float*, EmbeddingGradWorkspace&, const float*, const int32_t*,
                                       const int32_t*, const int32_t*, int, int64_t, int, BlendMode,
                                       cudaStream_t);
  int end_bit_ = 32;                    // radix bits that cover keys 0 .. V
  int32_t sentinel_ = 0;                // V: the key of padding entries
  uint64_t generation_ = 0;
  DeviceBuffer<int32_t> keys_in_, keys_out_;      // (N) embedding row of each entry, then sorted
  DeviceBuffer<int32_t> values_in_, values_out_;  // (N) entry index, sorted along with its row
  DeviceBuffer<int32_t> entry_position_;  // (N) position p of each entry
  DeviceBuffer<float> id_coefficient_;  // (P) 0.5/n (mean) or the scalar-mean share of p
  DeviceBuffer<float> cur_coefficient_; // (P) 1 (n == 0) or 0.5
  DeviceBuffer<int32_t> run_heads_, run_index_;  // (N) 1 at each row's first sorted entry; its run number
  DeviceBuffer<int32_t> unique_rows_, run_offsets_;  // per distinct row: the row; its first entry (N + 1)
  DeviceBuffer<int32_t> run_count_;     // (1)
  DeviceBuffer<int32_t> chunk_counts_, chunk_offsets_;  // (N) per run: its chunks (0: short), the first's number
  DeviceBuffer<int32_t> chunk_begin_, chunk_end_;       // (N / 32 + 1) per chunk: its sorted entries
  DeviceBuffer<int32_t> chunk_count_;   // (1)
  DeviceBuffer<float> chunk_sums_;      // (N / 32 + 1, D)
  DeviceBuffer<unsigned char> temp_;    // CUB temporary storage
};

// dembedding (V, D) += d loss / d E; only rows named in the batch change. Deterministic, and
// bit-identical to the float CPU layer for every row with at most kChunkEntries (64) terms: the
// (row, entry) pairs, laid out in the CPU's order of accumulation, are radix-sorted (stable) and
// each row's segment is summed in that order, in fixed chunks for longer rows (see
// embedding_blend_steps.h); no atomics. max_identifier_ids: identifier_offsets[P] (host) or any bound
// on it up to the workspace's room; the count itself is read on the device and the rest of the
// sort padded, so a captured CUDA graph serves every batch within that bound.
void embedding_blend_backward(float* dembedding, EmbeddingGradWorkspace& workspace, const float* dx,
                              const int32_t* identifier_offsets, const int32_t* identifier_ids,
                              const int32_t* cur_word_ids, int positions, int64_t max_identifier_ids, int dim,
                              BlendMode mode, cudaStream_t stream);

}  // namespace enhanced::cuda
