// Embedding blend forward and its deterministic backward (sort + segment reduce, no atomics).
#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "steps/embedding_blend_steps.h"
#include "kernels/embedding_blend.cuh"

namespace enhanced::cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t count, int threads = kThreads) {
  return static_cast<unsigned>((count + threads - 1) / threads);
}

// The forward's kernels: one thread per (p, d) (mean) or per position (scalar-mean), each one step
// of embedding_blend_steps.h, the CPU layer's operations in its order without FMA: its bits.
__global__ void blend_mean_kernel(float* __restrict__ x, const int32_t* __restrict__ offsets,
                                  const int32_t* __restrict__ ids, const int32_t* __restrict__ cur,
                                  const float* __restrict__ embedding, int positions, int dim) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < static_cast<int64_t>(positions) * dim) steps::blend_mean_at(index, x, offsets, ids, cur, embedding, dim);
}

__global__ void blend_scalar_kernel(float* __restrict__ x, const int32_t* __restrict__ offsets,
                                    const int32_t* __restrict__ ids, const int32_t* __restrict__ cur,
                                    const float* __restrict__ embedding, int positions, int dim) {
  const int p = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (p < positions) steps::blend_scalar_at(p, x, offsets, ids, cur, embedding, dim);
}

// The backward's kernels: a thread index and one step of embedding_blend_steps.h each.
__global__ void backward_entries_kernel(int32_t* __restrict__ keys, int32_t* __restrict__ values,
                                        int32_t* __restrict__ entry_position, float* __restrict__ id_coefficient,
                                        float* __restrict__ cur_coefficient, const float* __restrict__ dx,
                                        const int32_t* __restrict__ offsets, const int32_t* __restrict__ ids,
                                        const int32_t* __restrict__ cur, int positions, int dim, bool scalar) {
  const int p = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (p < positions)
    steps::write_entries(p, keys, values, entry_position, id_coefficient, cur_coefficient, dx, offsets, ids, cur, dim,
                         scalar);
}

__global__ void backward_padding_kernel(int32_t* __restrict__ keys, int32_t* __restrict__ values,
                                        const int32_t* __restrict__ offsets, int positions, int64_t entries,
                                        int32_t sentinel) {
  const int64_t e = positions + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < entries) steps::pad_entry(e, keys, values, offsets, positions, sentinel);
}

__global__ void run_heads_kernel(int32_t* __restrict__ heads, const int32_t* __restrict__ keys, int entries) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < entries) steps::mark_run_head(i, heads, keys);
}

__global__ void run_starts_kernel(int32_t* __restrict__ rows, int32_t* __restrict__ run_offsets,
                                  int32_t* __restrict__ run_count, const int32_t* __restrict__ heads,
                                  const int32_t* __restrict__ run_index, const int32_t* __restrict__ keys,
                                  int entries, int32_t sentinel) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < entries) steps::record_run_start(i, rows, run_offsets, run_count, heads, run_index, keys, entries, sentinel);
}

__global__ void count_chunks_kernel(int32_t* __restrict__ chunk_counts, const int32_t* __restrict__ run_offsets,
                                    const int32_t* __restrict__ run_count, int bound) {
  const int r = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (r < bound) steps::count_chunks(r, chunk_counts, run_offsets, run_count);
}

__global__ void write_chunks_kernel(int32_t* __restrict__ chunk_begin, int32_t* __restrict__ chunk_end,
                                    int32_t* __restrict__ chunk_count, const int32_t* __restrict__ chunk_counts,
                                    const int32_t* __restrict__ chunk_offsets, const int32_t* __restrict__ run_offsets,
                                    int bound) {
  const int r = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (r < bound)
    steps::write_chunks(r, chunk_begin, chunk_end, chunk_count, chunk_counts, chunk_offsets, run_offsets, bound);
}

__global__ void sum_chunks_kernel(float* __restrict__ chunk_sums, const int32_t* __restrict__ chunk_begin,
                                  const int32_t* __restrict__ chunk_end, const int32_t* __restrict__ chunk_count,
                                  const int32_t* __restrict__ sorted_entries, const int32_t* __restrict__ entry_position,
                                  const int32_t* __restrict__ offsets, const float* __restrict__ id_coefficient,
                                  const float* __restrict__ cur_coefficient, const float* __restrict__ dx,
                                  int64_t bound, int dim, bool scalar) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < bound)
    steps::sum_chunk(index, chunk_sums, chunk_begin, chunk_end, chunk_count, sorted_entries, entry_position, offsets,
                     id_coefficient, cur_coefficient, dx, dim, scalar);
}

__global__ void sum_runs_kernel(float* __restrict__ dembedding, const int32_t* __restrict__ rows,
                                const int32_t* __restrict__ run_offsets, const int32_t* __restrict__ run_count,
                                const int32_t* __restrict__ chunk_counts, const int32_t* __restrict__ chunk_offsets,
                                const float* __restrict__ chunk_sums, const int32_t* __restrict__ sorted_entries,
                                const int32_t* __restrict__ entry_position, const int32_t* __restrict__ offsets,
                                const float* __restrict__ id_coefficient, const float* __restrict__ cur_coefficient,
                                const float* __restrict__ dx, int64_t bound, int dim, bool scalar) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < bound)
    steps::sum_run(index, dembedding, rows, run_offsets, run_count, chunk_counts, chunk_offsets, chunk_sums,
                   sorted_entries, entry_position, offsets, id_coefficient, cur_coefficient, dx, dim, scalar);
}

int bits_for(int64_t vocab_size) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < vocab_size) ++bits;
  return bits;
}

}  // namespace

void embedding_blend_forward(float* x, const int32_t* identifier_offsets, const int32_t* identifier_ids,
                             const int32_t* cur_word_ids, const float* embedding, int positions, int dim,
                             BlendMode mode, cudaStream_t stream) {
  if (positions == 0) return;
  if (mode == BlendMode::mean) {
    blend_mean_kernel<<<blocks_for(static_cast<int64_t>(positions) * dim), kThreads, 0, stream>>>(
        x, identifier_offsets, identifier_ids, cur_word_ids, embedding, positions, dim);
  } else {
    blend_scalar_kernel<<<blocks_for(positions), kThreads, 0, stream>>>(x, identifier_offsets, identifier_ids,
                                                                        cur_word_ids, embedding, positions, dim);
  }
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void EmbeddingGradWorkspace::reserve(int positions, int64_t identifier_ids, int64_t vocab_size, int dim,
                                     cudaStream_t stream) {
  sentinel_ = static_cast<int32_t>(vocab_size);
  end_bit_ = bits_for(vocab_size + 1);  // keys 0 .. V, V being the padding sentinel
  if (run_count_.size() == 0) run_count_.resize(1);
  const size_t entries = static_cast<size_t>(positions) + static_cast<size_t>(identifier_ids);
  bool grown = generation_ == 0;
  if (entries > keys_in_.size()) {
    // Generous headroom so a batch with a few more ids than the last does not allocate again.
    const size_t capacity = entries + entries / 2;
    keys_in_.resize(capacity);
    keys_out_.resize(capacity);
    values_in_.resize(capacity);
    values_out_.resize(capacity);
    entry_position_.resize(capacity);
    unique_rows_.resize(capacity);
    run_heads_.resize(capacity);
    run_index_.resize(capacity);
    run_offsets_.resize(capacity + 1);
    chunk_counts_.resize(capacity);
    chunk_offsets_.resize(capacity);
    chunk_begin_.resize(static_cast<size_t>(steps::max_chunks(static_cast<int64_t>(capacity))));
    chunk_end_.resize(static_cast<size_t>(steps::max_chunks(static_cast<int64_t>(capacity))));
    grown = true;
  }
  if (chunk_count_.size() == 0) chunk_count_.resize(1);
  const size_t chunk_sums = chunk_begin_.size() * static_cast<size_t>(dim);
  if (chunk_sums > chunk_sums_.size()) {
    chunk_sums_.resize(chunk_sums);
    grown = true;
  }
  if (static_cast<size_t>(positions) > id_coefficient_.size()) {
    id_coefficient_.resize(static_cast<size_t>(positions));
    cur_coefficient_.resize(static_cast<size_t>(positions));
    grown = true;
  }
  if (grown) {
    // The touched rows are forgotten (the caller zeroed their gradients first): none are
    // touched, so a gradient zeroing before the next backward visits none.
    ENHANCED_CUDA_CHECK(cudaMemsetAsync(run_count_.data(), 0, sizeof(int32_t), stream));
    ++generation_;
  }
  // CUB's temporary storage for the larger of its two passes at the current capacity.
  const int capacity = static_cast<int>(keys_in_.size());
  size_t sort_bytes = 0, scan_bytes = 0;
  ENHANCED_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys_in_.data(), keys_out_.data(),
                                                      values_in_.data(), values_out_.data(), capacity, 0, end_bit_));
  ENHANCED_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, run_heads_.data(), run_index_.data(),
                                                    capacity));
  if (std::max(sort_bytes, scan_bytes) > temp_.size()) {
    temp_.resize(std::max(sort_bytes, scan_bytes));
    ++generation_;
  }
}

void embedding_blend_backward(float* dembedding, EmbeddingGradWorkspace& w, const float* dx,
                              const int32_t* identifier_offsets, const int32_t* identifier_ids,
                              const int32_t* cur_word_ids, int positions, int64_t max_identifier_ids, int dim,
                              BlendMode mode, cudaStream_t stream) {
  if (positions == 0) return;
  const int64_t entries = positions + max_identifier_ids;
  if (entries > w.entry_capacity() || static_cast<size_t>(positions) > w.id_coefficient_.size())
    fail("internal: embedding backward workspace holds ", w.entry_capacity(), " entries, the batch needs ", entries,
         " (call reserve first)");
  if (entries > INT32_MAX) fail("embedding backward: ", entries, " entries exceed int32 indexing");
  if (steps::max_chunks(entries) * dim > static_cast<int64_t>(w.chunk_sums_.size()))
    fail("internal: embedding backward workspace reserved for a smaller D (call reserve with D = ", dim, ")");
  const int count = static_cast<int>(entries);
  const bool scalar = mode == BlendMode::scalar_mean;
  backward_entries_kernel<<<blocks_for(positions), kThreads, 0, stream>>>(
      w.keys_in_.data(), w.values_in_.data(), w.entry_position_.data(), w.id_coefficient_.data(),
      w.cur_coefficient_.data(), dx, identifier_offsets, identifier_ids, cur_word_ids, positions, dim, scalar);
  ENHANCED_CUDA_CHECK_LAUNCH();
  if (max_identifier_ids > 0) {
    backward_padding_kernel<<<blocks_for(max_identifier_ids), kThreads, 0, stream>>>(
        w.keys_in_.data(), w.values_in_.data(), identifier_offsets, positions, entries, w.sentinel_);
    ENHANCED_CUDA_CHECK_LAUNCH();
  }
  // LSD radix sort is stable: within one row the entries stay in index (= CPU) order.
  size_t bytes = w.temp_.size();
  ENHANCED_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(w.temp_.data(), bytes, w.keys_in_.data(), w.keys_out_.data(),
                                                      w.values_in_.data(), w.values_out_.data(), count, 0, w.end_bit_,
                                                      stream));
  // Runs: heads of the sorted keys, their exclusive sum numbers the runs.
  run_heads_kernel<<<blocks_for(entries), kThreads, 0, stream>>>(w.run_heads_.data(), w.keys_out_.data(), count);
  ENHANCED_CUDA_CHECK_LAUNCH();
  bytes = w.temp_.size();
  ENHANCED_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(w.temp_.data(), bytes, w.run_heads_.data(), w.run_index_.data(),
                                                    count, stream));
  run_starts_kernel<<<blocks_for(entries), kThreads, 0, stream>>>(w.unique_rows_.data(), w.run_offsets_.data(),
                                                                  w.run_count_.data(), w.run_heads_.data(),
                                                                  w.run_index_.data(), w.keys_out_.data(), count,
                                                                  w.sentinel_);
  ENHANCED_CUDA_CHECK_LAUNCH();
  // Long runs' chunks: counted per run, numbered by their exclusive sum, laid out and summed;
  // then every run summed (a short one directly, a long one from its chunk sums) into dembedding.
  // Every launch is sized by the entry bound: a captured graph serves any batch.
  const int64_t chunk_bound = steps::max_chunks(entries);
  count_chunks_kernel<<<blocks_for(entries), kThreads, 0, stream>>>(w.chunk_counts_.data(), w.run_offsets_.data(),
                                                                    w.run_count_.data(), count);
  ENHANCED_CUDA_CHECK_LAUNCH();
  bytes = w.temp_.size();
  ENHANCED_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(w.temp_.data(), bytes, w.chunk_counts_.data(),
                                                    w.chunk_offsets_.data(), count, stream));
  write_chunks_kernel<<<blocks_for(entries), kThreads, 0, stream>>>(
      w.chunk_begin_.data(), w.chunk_end_.data(), w.chunk_count_.data(), w.chunk_counts_.data(),
      w.chunk_offsets_.data(), w.run_offsets_.data(), count);
  ENHANCED_CUDA_CHECK_LAUNCH();
  sum_chunks_kernel<<<blocks_for(chunk_bound * dim), kThreads, 0, stream>>>(
      w.chunk_sums_.data(), w.chunk_begin_.data(), w.chunk_end_.data(), w.chunk_count_.data(), w.values_out_.data(),
      w.entry_position_.data(), identifier_offsets, w.id_coefficient_.data(), w.cur_coefficient_.data(), dx,
      chunk_bound * dim, dim, scalar);
  ENHANCED_CUDA_CHECK_LAUNCH();
  sum_runs_kernel<<<blocks_for(entries * dim), kThreads, 0, stream>>>(
      dembedding, w.unique_rows_.data(), w.run_offsets_.data(), w.run_count_.data(), w.chunk_counts_.data(),
      w.chunk_offsets_.data(), w.chunk_sums_.data(), w.values_out_.data(), w.entry_position_.data(),
      identifier_offsets, w.id_coefficient_.data(), w.cur_coefficient_.data(), dx, entries * dim, dim, scalar);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

}  // namespace enhanced::cuda
