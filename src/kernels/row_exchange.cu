// Packing, merging and the union of the ranks' touched embedding rows (row_exchange.cuh).
#include "kernels/row_exchange.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>

#include <algorithm>

#include "steps/gradient_exchange_steps.h"

namespace enhanced::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

unsigned blocks_for(int64_t elements) {
  return static_cast<unsigned>(std::clamp<int64_t>((elements + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

__global__ void pack_kernel(int32_t* __restrict__ ids, float* __restrict__ values, float* __restrict__ dembedding,
                            const int32_t* __restrict__ rows, const int32_t* __restrict__ count, int64_t bound, int dim,
                            int32_t vocab) {
  const int64_t used = count ? *count : 0;
  const int64_t total = bound * dim;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = k / dim, d = k % dim;
    if (i < used) {
      const int32_t row = rows[i];
      float* source = dembedding + static_cast<int64_t>(row) * dim + d;
      values[k] = *source;
      *source = 0.0f;
      if (d == 0) ids[i] = row;
    } else {
      values[k] = 0.0f;
      if (d == 0) ids[i] = vocab;
    }
  }
}

__global__ void add_rows_kernel(float* __restrict__ dembedding, const int32_t* __restrict__ ids,
                                const float* __restrict__ values, int64_t bound, int dim, int32_t vocab) {
  const int64_t total = bound * dim;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t row = ids[k / dim];
    if (row == vocab) continue;
    float* target = dembedding + static_cast<int64_t>(row) * dim + k % dim;
    steps::add_exchanged(*target, values[k]);  // the CPU's addition, in the same rank order
  }
}

// The padding id sorts last and Unique keeps one copy of it: drop that one.
__global__ void drop_padding_kernel(int32_t* __restrict__ count, const int32_t* __restrict__ unique, int32_t vocab) {
  const int32_t n = *count;
  if (n > 0 && unique[n - 1] == vocab) *count = n - 1;
}

}  // namespace

void pack_touched_rows(int32_t* ids, float* values, float* dembedding, const int32_t* rows, const int32_t* count,
                       int64_t bound, int dim, int32_t vocab, cudaStream_t stream) {
  if (bound <= 0) return;
  pack_kernel<<<blocks_for(bound * dim), kThreads, 0, stream>>>(ids, values, dembedding, rows, count, bound, dim,
                                                               vocab);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void add_packed_rows(float* dembedding, const int32_t* ids, const float* values, int64_t bound, int dim,
                     int32_t vocab, cudaStream_t stream) {
  if (bound <= 0) return;
  add_rows_kernel<<<blocks_for(bound * dim), kThreads, 0, stream>>>(dembedding, ids, values, bound, dim, vocab);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void PackedRowUnion::reserve(int64_t count, int32_t vocab, cudaStream_t stream) {
  if (count > INT32_MAX) fail("the ranks' packed embedding rows (", count, ") exceed CUB's int32 item count");
  count_ = count;
  vocab_ = vocab;
  end_bit_ = 1;
  while (end_bit_ < 32 && (int64_t{1} << end_bit_) <= vocab) ++end_bit_;  // keys 0 .. vocab
  sorted_.resize(static_cast<size_t>(std::max<int64_t>(count, 1)));
  unique_.resize(static_cast<size_t>(std::max<int64_t>(count, 1)));
  unique_count_.resize(1);
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(unique_count_.data(), 0, sizeof(int32_t), stream));
  const int n = static_cast<int>(count);
  size_t sort_bytes = 0, unique_bytes = 0;
  ENHANCED_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, sort_bytes, static_cast<const int32_t*>(nullptr),
                                                     sorted_.data(), n, 0, end_bit_, stream));
  ENHANCED_CUDA_CHECK(cub::DeviceSelect::Unique(nullptr, unique_bytes, sorted_.data(), unique_.data(),
                                                unique_count_.data(), n, stream));
  temp_.resize(std::max<size_t>({sort_bytes, unique_bytes, 1}));
}

void PackedRowUnion::run(const int32_t* ids, cudaStream_t stream) {
  if (count_ <= 0) return;
  const int n = static_cast<int>(count_);
  size_t bytes = temp_.bytes();
  ENHANCED_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp_.data(), bytes, ids, sorted_.data(), n, 0, end_bit_, stream));
  bytes = temp_.bytes();
  ENHANCED_CUDA_CHECK(
      cub::DeviceSelect::Unique(temp_.data(), bytes, sorted_.data(), unique_.data(), unique_count_.data(), n, stream));
  drop_padding_kernel<<<1, 1, 0, stream>>>(unique_count_.data(), unique_.data(), vocab_);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

}  // namespace enhanced::cuda
