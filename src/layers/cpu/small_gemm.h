// A small float GEMM for the LSTM's per-step recurrent products, C (B, 4H) += h (B, H) W_hh^T and
// dh (B, H) = dgates (B, 4H) W_hh. The weight operand is packed once per call of the layer into
// 32-column panels, so the 400 steps do not re-pack it as a BLAS call would; the kernel keeps a
// tile of C in registers (8 x 32 with AVX-512, 3 x 32 with AVX2: the same bits either way).
// Compiled for AVX-512, AVX2 and baseline x86-64.
#pragma once

#include <cstddef>

#include "layers/cpu/line_requests.h"

namespace enhanced::small_gemm {

inline constexpr int kPanelWidth = 32;

// Floats needed to pack a K x N operand (N rounded up to whole panels).
size_t packed_size(int k, int n);

// Packs the K x N operand whose element (k, n) is source[n * stride_n + k * stride_k] into
// panels of 32 columns, K rows each, zero-padded; each element rounded to the nearest bfloat16
// when round_to_bf16 (the bf16 reference path, enhanced/precision.h).
void pack(float* packed, const float* source, int k, int n, size_t stride_n, size_t stride_k,
          bool round_to_bf16 = false);

// The same for rows [row_offset, row_offset + k) of an operand of total_k rows (packed_size(total_k,
// n)), so two matrices can be stacked along K: [A; B] packed in two calls.
void pack_rows(float* packed, int total_k, int row_offset, const float* source, int k, int n, size_t stride_n,
               size_t stride_k, bool round_to_bf16 = false);

// C (M x N, row stride ldc) = A (M x K, row stride lda) * packed (K x N), or += when accumulate.
// requests: line_requests.h.
void multiply(float* c, int ldc, const float* a, int lda, const float* packed, int m, int n, int k, bool accumulate,
              LineRequests requests = {});

}  // namespace enhanced::small_gemm
