// Embedding blend forward and its deterministic backward (sort + segment reduce, no atomics).
#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "kernels/layers.h"

namespace enhanced::cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t count, int threads = kThreads) {
  return static_cast<unsigned>((count + threads - 1) / threads);
}

// Mean mode: one thread per (p, d), summing the ids in order as the CPU layer does; explicit
// round-to-nearest intrinsics keep nvcc from contracting into FMA, so the bits match the CPU.
__global__ void blend_mean_kernel(float* __restrict__ x, const int32_t* __restrict__ offsets,
                                  const int32_t* __restrict__ ids, const int32_t* __restrict__ cur,
                                  const float* __restrict__ embedding, int positions, int dim) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<int64_t>(positions) * dim) return;
  const int p = static_cast<int>(index / dim), d = static_cast<int>(index % dim);
  const float current = embedding[static_cast<int64_t>(cur[p]) * dim + d];
  const int begin = offsets[p], end = offsets[p + 1];
  if (begin == end) {
    x[index] = current;
    return;
  }
  float sum = 0.0f;
  for (int j = begin; j < end; ++j) sum = __fadd_rn(sum, embedding[static_cast<int64_t>(ids[j]) * dim + d]);
  const float scale = __fdiv_rn(0.5f, static_cast<float>(end - begin));
  x[index] = __fadd_rn(__fmul_rn(scale, sum), __fmul_rn(0.5f, current));
}

// Scalar-mean mode: one thread per position (the scalar needs all D sums first).
__global__ void blend_scalar_kernel(float* __restrict__ x, const int32_t* __restrict__ offsets,
                                    const int32_t* __restrict__ ids, const int32_t* __restrict__ cur,
                                    const float* __restrict__ embedding, int positions, int dim) {
  const int p = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (p >= positions) return;
  float* out = x + static_cast<int64_t>(p) * dim;
  const float* current = embedding + static_cast<int64_t>(cur[p]) * dim;
  const int begin = offsets[p], end = offsets[p + 1];
  if (begin == end) {
    for (int d = 0; d < dim; ++d) out[d] = current[d];
    return;
  }
  float total = 0.0f;
  for (int d = 0; d < dim; ++d) {
    float sum = 0.0f;
    for (int j = begin; j < end; ++j) sum = __fadd_rn(sum, embedding[static_cast<int64_t>(ids[j]) * dim + d]);
    total = __fadd_rn(total, sum);
  }
  const float half_mean =
      __fdiv_rn(__fmul_rn(0.5f, total), __fmul_rn(static_cast<float>(end - begin), static_cast<float>(dim)));
  for (int d = 0; d < dim; ++d) out[d] = __fadd_rn(half_mean, __fmul_rn(0.5f, current[d]));
}

// Per position: the position of each of its ids, the ids' coefficient and the cur word's weight.
// Mean: an id entry contributes id_coefficient[p] * dx[p, d]; scalar-mean: id_coefficient[p]
// itself (the same share for every d). The cur entry contributes cur_coefficient[p] * dx[p, d].
__global__ void backward_prepare_kernel(int32_t* __restrict__ id_position, float* __restrict__ id_coefficient,
                                        float* __restrict__ cur_coefficient, const float* __restrict__ dx,
                                        const int32_t* __restrict__ offsets, int positions, int dim, bool scalar) {
  const int p = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (p >= positions) return;
  const int begin = offsets[p], end = offsets[p + 1];
  const int count = end - begin;
  for (int j = begin; j < end; ++j) id_position[j] = p;
  cur_coefficient[p] = count == 0 ? 1.0f : 0.5f;
  if (count == 0) {
    id_coefficient[p] = 0.0f;
  } else if (!scalar) {
    id_coefficient[p] = __fdiv_rn(0.5f, static_cast<float>(count));
  } else {
    const float* grad = dx + static_cast<int64_t>(p) * dim;
    float total = 0.0f;
    for (int d = 0; d < dim; ++d) total = __fadd_rn(total, grad[d]);
    id_coefficient[p] =
        __fdiv_rn(__fmul_rn(0.5f, total), __fmul_rn(static_cast<float>(count), static_cast<float>(dim)));
  }
}

// Entry e < num_ids is identifier id e; e >= num_ids is the cur word of position e - num_ids.
__global__ void backward_entries_kernel(int32_t* __restrict__ values, int64_t entries) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < entries) values[e] = static_cast<int32_t>(e);
}

// Marks the first entry of each row's run in the sorted keys.
__global__ void run_heads_kernel(int32_t* __restrict__ heads, const int32_t* __restrict__ keys, int entries) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < entries) heads[i] = (i == 0 || keys[i] != keys[i - 1]) ? 1 : 0;
}

// run_index = exclusive sum of heads: each head writes its run's row and start; the last entry
// writes the number of runs.
__global__ void run_starts_kernel(int32_t* __restrict__ rows, int32_t* __restrict__ run_offsets,
                                  int32_t* __restrict__ run_count, const int32_t* __restrict__ heads,
                                  const int32_t* __restrict__ run_index, const int32_t* __restrict__ keys,
                                  int entries) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= entries) return;
  if (heads[i]) {
    rows[run_index[i]] = keys[i];
    run_offsets[run_index[i]] = i;
  }
  if (i == entries - 1) *run_count = run_index[i] + heads[i];
}

// One thread per (distinct row, d): sums the row's entries in sorted (= entry) order, then adds
// the total into dembedding. Each (row, d) has exactly one writer: no atomics, same bits every run.
__global__ void backward_segments_kernel(float* __restrict__ dembedding, const int32_t* __restrict__ rows,
                                         const int32_t* __restrict__ run_offsets,
                                         const int32_t* __restrict__ run_count, const int32_t* __restrict__ entries,
                                         const int32_t* __restrict__ id_position,
                                         const float* __restrict__ id_coefficient,
                                         const float* __restrict__ cur_coefficient, const float* __restrict__ dx,
                                         int64_t num_ids, int num_entries, int dim, bool scalar) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t run = index / dim;
  const int d = static_cast<int>(index % dim);
  const int runs = *run_count;
  if (run >= runs) return;
  const int begin = run_offsets[run], end = run + 1 < runs ? run_offsets[run + 1] : num_entries;
  float sum = 0.0f;
  for (int k = begin; k < end; ++k) {
    const int64_t e = entries[k];
    float value;
    if (e < num_ids) {
      const int p = id_position[e];
      value = scalar ? id_coefficient[p] : __fmul_rn(id_coefficient[p], dx[static_cast<int64_t>(p) * dim + d]);
    } else {
      const int64_t p = e - num_ids;
      value = __fmul_rn(cur_coefficient[p], dx[p * dim + d]);
    }
    sum = __fadd_rn(sum, value);
  }
  float* out = dembedding + static_cast<int64_t>(rows[run]) * dim + d;
  *out = __fadd_rn(*out, sum);
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

void EmbeddingGradWorkspace::reserve(int positions, int64_t identifier_ids, int64_t vocab_size) {
  end_bit_ = bits_for(vocab_size);
  const size_t entries = static_cast<size_t>(positions) + static_cast<size_t>(identifier_ids);
  if (entries > keys_in_.size()) {
    // Generous headroom so a batch with a few more ids than the last does not allocate again.
    const size_t capacity = entries + entries / 2;
    keys_in_.resize(capacity);
    keys_out_.resize(capacity);
    values_in_.resize(capacity);
    values_out_.resize(capacity);
    id_position_.resize(capacity);
    unique_rows_.resize(capacity);
    run_heads_.resize(capacity);
    run_index_.resize(capacity);
    run_offsets_.resize(capacity);
  }
  if (static_cast<size_t>(positions) > id_coefficient_.size()) {
    id_coefficient_.resize(static_cast<size_t>(positions));
    cur_coefficient_.resize(static_cast<size_t>(positions));
  }
  if (run_count_.size() == 0) run_count_.resize(1);
  // CUB's temporary storage for the larger of its two passes at the current capacity.
  const int capacity = static_cast<int>(keys_in_.size());
  size_t sort_bytes = 0, scan_bytes = 0;
  ENHANCED_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys_in_.data(), keys_out_.data(),
                                                      values_in_.data(), values_out_.data(), capacity, 0, end_bit_));
  ENHANCED_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, run_heads_.data(), run_index_.data(),
                                                    capacity));
  temp_.reserve(std::max(sort_bytes, scan_bytes));
}

void embedding_blend_backward(float* dembedding, EmbeddingGradWorkspace& w, const float* dx,
                              const int32_t* identifier_offsets, const int32_t* identifier_ids,
                              const int32_t* cur_word_ids, int positions, int64_t num_identifier_ids, int dim,
                              BlendMode mode, cudaStream_t stream) {
  if (positions == 0) return;
  const int64_t entries = positions + num_identifier_ids;
  if (entries > w.entry_capacity() || static_cast<size_t>(positions) > w.id_coefficient_.size())
    fail("internal: embedding backward workspace holds ", w.entry_capacity(), " entries, the batch needs ", entries,
         " (call reserve first)");
  if (entries > INT32_MAX) fail("embedding backward: ", entries, " entries exceed int32 indexing");
  const int count = static_cast<int>(entries);
  const bool scalar = mode == BlendMode::scalar_mean;
  // Keys: the ids, then the cur words; values: the entry index.
  if (num_identifier_ids > 0)
    ENHANCED_CUDA_CHECK(cudaMemcpyAsync(w.keys_in_.data(), identifier_ids, num_identifier_ids * sizeof(int32_t),
                                        cudaMemcpyDeviceToDevice, stream));
  ENHANCED_CUDA_CHECK(cudaMemcpyAsync(w.keys_in_.data() + num_identifier_ids, cur_word_ids,
                                      static_cast<size_t>(positions) * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                                      stream));
  backward_entries_kernel<<<blocks_for(entries), kThreads, 0, stream>>>(w.values_in_.data(), entries);
  ENHANCED_CUDA_CHECK_LAUNCH();
  backward_prepare_kernel<<<blocks_for(positions), kThreads, 0, stream>>>(
      w.id_position_.data(), w.id_coefficient_.data(), w.cur_coefficient_.data(), dx, identifier_offsets, positions,
      dim, scalar);
  ENHANCED_CUDA_CHECK_LAUNCH();
  // LSD radix sort is stable: within one row the entries stay in index order.
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
                                                                  w.run_index_.data(), w.keys_out_.data(), count);
  ENHANCED_CUDA_CHECK_LAUNCH();
  backward_segments_kernel<<<blocks_for(entries * dim), kThreads, 0, stream>>>(
      dembedding, w.unique_rows_.data(), w.run_offsets_.data(), w.run_count_.data(), w.values_out_.data(),
      w.id_position_.data(), w.id_coefficient_.data(), w.cur_coefficient_.data(), dx, num_identifier_ids, count, dim,
      scalar);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

}  // namespace enhanced::cuda
