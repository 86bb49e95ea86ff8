#include "layers/cpu/bf16_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "enhanced/common.h"
#include "enhanced/precision.h"

namespace enhanced::bf16_gemm {
namespace {

#define ENHANCED_BF16_TARGET __attribute__((target("avx512f,avx512bf16")))

// A's elements 2i and 2i + 1 of one row as one 32-bit word (the second zero past K).
inline uint32_t pair_at(const uint16_t* row, int i, int k) {
  const uint32_t low = row[2 * i];
  const uint32_t high = 2 * i + 1 < k ? row[2 * i + 1] : 0u;
  return low | (high << 16);
}

// kRows rows of A against one panel: the tile of C (kRows x 32) in 2 * kRows registers.
template <int kRows>
ENHANCED_BF16_TARGET inline void tile(float* c, int ldc, const uint16_t* a, int lda, const uint16_t* panel, int k,
                                      int columns, bool accumulate) {
  __m512 sum[kRows][2];  // fully unrolled, so the tile lives in registers
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) sum[r][0] = sum[r][1] = _mm512_setzero_ps();
  const int pairs = (k + 1) / 2;
  for (int i = 0; i < pairs; ++i) {
    const uint16_t* b = panel + static_cast<size_t>(i) * 2 * kPanelWidth;
    const __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + kPanelWidth);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512i a_pair = _mm512_set1_epi32(static_cast<int>(pair_at(a + static_cast<size_t>(r) * lda, i, k)));
      sum[r][0] = _mm512_dpbf16_ps(sum[r][0], (__m512bh)a_pair, (__m512bh)b0);
      sum[r][1] = _mm512_dpbf16_ps(sum[r][1], (__m512bh)a_pair, (__m512bh)b1);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float* row = c + static_cast<size_t>(r) * ldc;
    float values[kPanelWidth];
    _mm512_storeu_ps(values, sum[r][0]);
    _mm512_storeu_ps(values + 16, sum[r][1]);
    for (int j = 0; j < columns; ++j) row[j] = accumulate ? row[j] + values[j] : values[j];
  }
}

// multiply's body, compiled for AVX512-BF16: called only once available() has said yes, so no
// AVX-512 instruction can run ahead of the check.
ENHANCED_BF16_TARGET void multiply_avx512_bf16(float* c, int ldc, const uint16_t* a, int lda, const uint16_t* packed,
                                               int m, int n, int k, bool accumulate) {
  constexpr int kRows = 8;  // 16 accumulators of AVX-512's 32 registers
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  const size_t padded_k = static_cast<size_t>((k + 1) / 2 * 2);
  for (int p = 0; p < panels; ++p) {
    const uint16_t* panel = packed + static_cast<size_t>(p) * kPanelWidth * padded_k;
    const int columns = std::min(kPanelWidth, n - p * kPanelWidth);
    float* c_panel = c + static_cast<size_t>(p) * kPanelWidth;
    int row = 0;
    for (; row + kRows <= m; row += kRows)
      tile<kRows>(c_panel + static_cast<size_t>(row) * ldc, ldc, a + static_cast<size_t>(row) * lda, lda, panel, k,
                  columns, accumulate);
    for (; row < m; ++row)
      tile<1>(c_panel + static_cast<size_t>(row) * ldc, ldc, a + static_cast<size_t>(row) * lda, lda, panel, k,
              columns, accumulate);
  }
}

}  // namespace

bool available() {
  static const bool has = cpu_bf16_support().avx512_bf16;
  return has;
}

size_t packed_size(int k, int n) {
  const size_t panels = static_cast<size_t>((n + kPanelWidth - 1) / kPanelWidth);
  return panels * kPanelWidth * static_cast<size_t>((k + 1) / 2 * 2);
}

void pack_rows(uint16_t* packed, int total_k, int row_offset, const float* source, int k, int n, size_t stride_n,
               size_t stride_k) {
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  const size_t padded_k = static_cast<size_t>((total_k + 1) / 2 * 2);
  for (int p = 0; p < panels; ++p) {
    uint16_t* panel = packed + static_cast<size_t>(p) * kPanelWidth * padded_k;
    for (int i = 0; i < k; ++i) {
      const int row = row_offset + i;  // pair row / 2, slot row % 2
      uint16_t* pair_row = panel + static_cast<size_t>(row / 2) * 2 * kPanelWidth + row % 2;
      for (int j = 0; j < kPanelWidth; ++j) {
        const int column = p * kPanelWidth + j;
        const float value =
            column < n ? source[static_cast<size_t>(column) * stride_n + static_cast<size_t>(i) * stride_k] : 0.0f;
        pair_row[2 * j] = to_bf16_bits(value);
      }
    }
    if (total_k % 2 == 1 && row_offset + k == total_k)  // the pad row past an odd K
      for (int j = 0; j < kPanelWidth; ++j) panel[static_cast<size_t>(total_k / 2) * 2 * kPanelWidth + 2 * j + 1] = 0;
  }
}

void convert_rows(uint16_t* dst, int ld_dst, const float* source, int ld_source, int rows, int columns) {
  for (int r = 0; r < rows; ++r) {
    const float* in = source + static_cast<size_t>(r) * ld_source;
    uint16_t* out = dst + static_cast<size_t>(r) * ld_dst;
    for (int j = 0; j < columns; ++j) out[j] = to_bf16_bits(in[j]);
  }
}

void multiply(float* c, int ldc, const uint16_t* a, int lda, const uint16_t* packed, int m, int n, int k,
              bool accumulate) {
  if (!available()) fail("internal: the bf16 kernels need AVX512-BF16, which this CPU lacks");
  multiply_avx512_bf16(c, ldc, a, lda, packed, m, n, k, accumulate);
}

}  // namespace enhanced::bf16_gemm
