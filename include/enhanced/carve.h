// One allocation carved into pieces (activations, the CUDA kernels' staging and scratch): every
// piece starts on a 256-byte boundary, the alignment cudaMalloc gives each allocation, so a
// carved piece serves any kernel or library (cuBLAS, cuDNN, vector loads) as a separate
// allocation would. Every such carve computes its offsets here. The parameters (and their
// gradients and moments) are not carved this way: they are one contiguous buffer by design
// (parameter_layout), so that an optimizer step is one loop over all of them; their tensors are
// float-aligned, which cuBLAS accepts, and cuDNN reads its own packed copy of the LSTM's.
#pragma once

#include <array>
#include <cstddef>

namespace enhanced {

constexpr size_t kCarveAlignment = 256;  // bytes

// `count` elements of `element_bytes` (which divides 256) rounded up to whole aligned blocks.
constexpr size_t carved_count(size_t count, size_t element_bytes) {
  const size_t per_block = kCarveAlignment / element_bytes;
  return (count + per_block - 1) / per_block * per_block;
}

// Where each of N pieces of the given element counts starts (in elements, each aligned when the
// base is), and the elements the allocation must hold.
template <size_t N>
struct CarvedPieces {
  std::array<size_t, N> offsets{};
  size_t total = 0;
};

template <size_t N>
constexpr CarvedPieces<N> carve_pieces(const std::array<size_t, N>& counts, size_t element_bytes) {
  CarvedPieces<N> pieces;
  for (size_t i = 0; i < N; ++i) {
    pieces.offsets[i] = pieces.total;
    pieces.total += carved_count(counts[i], element_bytes);
  }
  return pieces;
}

}  // namespace enhanced
