#include "layers/cpu/small_gemm.h"
#include "layers/cpu/multiversion.h"

#include <algorithm>
#include <cstring>

namespace enhanced::small_gemm {
namespace {

// 16 floats; aligned(4) makes loads and stores through it unaligned-safe.
typedef float Vector16 __attribute__((vector_size(64), aligned(4)));

// One tile: `rows` (<= kRows) rows of A against one 32-column panel, the tile of C in registers.
template <int kRows>
ENHANCED_INLINE void tile(float* c, int ldc, const float* a, int lda, const float* panel, int k,
                                                int columns, bool accumulate) {
  Vector16 low[kRows], high[kRows];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) low[r] = high[r] = Vector16{};
  for (int i = 0; i < k; ++i) {
    const Vector16 b_low = *reinterpret_cast<const Vector16*>(panel + static_cast<size_t>(i) * kPanelWidth);
    const Vector16 b_high = *reinterpret_cast<const Vector16*>(panel + static_cast<size_t>(i) * kPanelWidth + 16);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const float value = a[static_cast<size_t>(r) * lda + i];
      low[r] += value * b_low;
      high[r] += value * b_high;
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    float* row = c + static_cast<size_t>(r) * ldc;
    if (columns == kPanelWidth) {
      Vector16* out_low = reinterpret_cast<Vector16*>(row);
      Vector16* out_high = reinterpret_cast<Vector16*>(row + 16);
      if (accumulate) {
        *out_low += low[r];
        *out_high += high[r];
      } else {
        *out_low = low[r];
        *out_high = high[r];
      }
    } else {
      float values[kPanelWidth];
      std::memcpy(values, &low[r], sizeof low[r]);
      std::memcpy(values + 16, &high[r], sizeof high[r]);
      for (int j = 0; j < columns; ++j) row[j] = accumulate ? row[j] + values[j] : values[j];
    }
  }
}

}  // namespace

size_t packed_size(int k, int n) {
  const size_t panels = static_cast<size_t>((n + kPanelWidth - 1) / kPanelWidth);
  return panels * kPanelWidth * static_cast<size_t>(k);
}

void pack_rows(float* packed, int total_k, int row_offset, const float* source, int k, int n, size_t stride_n,
               size_t stride_k) {
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  for (int p = 0; p < panels; ++p) {
    float* panel = packed + static_cast<size_t>(p) * kPanelWidth * total_k;
    for (int i = 0; i < k; ++i) {
      float* row = panel + static_cast<size_t>(row_offset + i) * kPanelWidth;
      for (int j = 0; j < kPanelWidth; ++j) {
        const int column = p * kPanelWidth + j;
        row[j] = column < n ? source[static_cast<size_t>(column) * stride_n + static_cast<size_t>(i) * stride_k] : 0.0f;
      }
    }
  }
}

void pack(float* packed, const float* source, int k, int n, size_t stride_n, size_t stride_k) {
  pack_rows(packed, k, 0, source, k, n, stride_n, stride_k);
}

ENHANCED_MULTIVERSION
void multiply(float* c, int ldc, const float* a, int lda, const float* packed, int m, int n, int k, bool accumulate) {
  constexpr int kRows = 8;
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  for (int p = 0; p < panels; ++p) {  // a panel of B stays in L1 across every row block
    const float* panel = packed + static_cast<size_t>(p) * kPanelWidth * k;
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

}  // namespace enhanced::small_gemm
