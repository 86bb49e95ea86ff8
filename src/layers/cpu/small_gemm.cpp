#include "layers/cpu/small_gemm.h"
#include "layers/cpu/multiversion.h"

#include <algorithm>
#include <cstring>

#include "enhanced/precision.h"

namespace enhanced::small_gemm {
namespace {

// Vectors of 16 or 8 floats; aligned(4) makes loads and stores through them unaligned-safe. (A
// traits struct, not the typedef as a template argument: GCC drops the typedef's aligned(4) there.)
template <int kLanes>
struct Unaligned;
template <>
struct Unaligned<16> {
  typedef float Vector __attribute__((vector_size(64), aligned(4)));
};
template <>
struct Unaligned<8> {
  typedef float Vector __attribute__((vector_size(32), aligned(4)));
};

// Steps along K between two turns of the line requests.
constexpr int kRequestSpacing = 16;

// One tile: kRows rows of A against one 32-column panel, the tile of C in registers, as
// kVectors vectors of kLanes floats per row. Each element of C sums its k products in order (one FMA
// each where the ISA has FMA), whatever the vector width: the same bits from every tile shape.
template <int kLanes, int kRows, bool kRequests>
ENHANCED_INLINE void tile(float* c, int ldc, const float* a, int lda, const float* panel, int k, int columns,
                          bool accumulate, RequestCursor& requests) {
  typedef typename Unaligned<kLanes>::Vector Vector;
  constexpr int kVectors = kPanelWidth / kLanes;
  Vector sum[kRows][kVectors];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) sum[r][v] = Vector{};
  const int spacing = kRequests ? kRequestSpacing : k;  // without requests, one stretch of k steps
  for (int start = 0; start < k; start += spacing) {
    if (kRequests) requests.turn();
    const int stop = std::min(k, start + spacing);
    for (int i = start; i < stop; ++i) {
      const float* b = panel + static_cast<size_t>(i) * kPanelWidth;
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const float value = a[static_cast<size_t>(r) * lda + i];
#pragma GCC unroll 4
        for (int v = 0; v < kVectors; ++v) sum[r][v] += value * *reinterpret_cast<const Vector*>(b + v * kLanes);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    float* row = c + static_cast<size_t>(r) * ldc;
    if (columns == kPanelWidth) {
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) {
        Vector* out = reinterpret_cast<Vector*>(row + v * kLanes);
        *out = accumulate ? *out + sum[r][v] : sum[r][v];
      }
    } else {
      float values[kPanelWidth];
      std::memcpy(values, sum[r], sizeof sum[r]);
      for (int j = 0; j < columns; ++j) row[j] = accumulate ? row[j] + values[j] : values[j];
    }
  }
}

// C's panel p: tiles of kRows rows, then single rows.
template <int kLanes, int kRows, bool kRequests>
ENHANCED_INLINE void multiply_panel(float* c_panel, int ldc, const float* a, int lda, const float* panel, int m,
                                    int k, int columns, bool accumulate, RequestCursor& requests) {
  int row = 0;
  for (; row + kRows <= m; row += kRows)
    tile<kLanes, kRows, kRequests>(c_panel + static_cast<size_t>(row) * ldc, ldc, a + static_cast<size_t>(row) * lda,
                                   lda, panel, k, columns, accumulate, requests);
  for (; row < m; ++row)
    tile<kLanes, 1, kRequests>(c_panel + static_cast<size_t>(row) * ldc, ldc, a + static_cast<size_t>(row) * lda, lda,
                               panel, k, columns, accumulate, requests);
}

// AVX-512's 32 registers hold an 8 x 32 tile of C in 16-float vectors; with AVX2's 16 (and the
// baseline's 16 halves of them) that tile spills on every product, so there it is 3 x 32 in
// 8-float vectors.
constexpr int kWideRows = 8, kNarrowRows = 3;

}  // namespace

size_t packed_size(int k, int n) {
  const size_t panels = static_cast<size_t>((n + kPanelWidth - 1) / kPanelWidth);
  return panels * kPanelWidth * static_cast<size_t>(k);
}

void pack_rows(float* packed, int total_k, int row_offset, const float* source, int k, int n, size_t stride_n,
               size_t stride_k, bool round_to_bf16) {
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  for (int p = 0; p < panels; ++p) {
    float* panel = packed + static_cast<size_t>(p) * kPanelWidth * total_k;
    for (int i = 0; i < k; ++i) {
      float* row = panel + static_cast<size_t>(row_offset + i) * kPanelWidth;
      for (int j = 0; j < kPanelWidth; ++j) {
        const int column = p * kPanelWidth + j;
        const float value =
            column < n ? source[static_cast<size_t>(column) * stride_n + static_cast<size_t>(i) * stride_k] : 0.0f;
        row[j] = round_to_bf16 ? enhanced::round_to_bf16(value) : value;
      }
    }
  }
}

void pack(float* packed, const float* source, int k, int n, size_t stride_n, size_t stride_k, bool round_to_bf16) {
  pack_rows(packed, k, 0, source, k, n, stride_n, stride_k, round_to_bf16);
}

ENHANCED_MULTIVERSION
void multiply(float* c, int ldc, const float* a, int lda, const float* packed, int m, int n, int k, bool accumulate,
              LineRequests requests) {
  const bool wide = cpu_has_avx512f();
  const int panels = (n + kPanelWidth - 1) / kPanelWidth, tile_rows = wide ? kWideRows : kNarrowRows;
  const long tiles = static_cast<long>(panels) * (m / tile_rows + m % tile_rows);
  RequestCursor cursor = spread(requests, tiles * ((k + kRequestSpacing - 1) / kRequestSpacing));
  for (int p = 0; p < panels; ++p) {  // a panel of B stays in L1 across every row block
    const float* panel = packed + static_cast<size_t>(p) * kPanelWidth * k;
    const int columns = std::min(kPanelWidth, n - p * kPanelWidth);
    float* c_panel = c + static_cast<size_t>(p) * kPanelWidth;
    if (requests.count > 0) {
      if (wide) multiply_panel<16, kWideRows, true>(c_panel, ldc, a, lda, panel, m, k, columns, accumulate, cursor);
      else multiply_panel<8, kNarrowRows, true>(c_panel, ldc, a, lda, panel, m, k, columns, accumulate, cursor);
    } else {
      if (wide) multiply_panel<16, kWideRows, false>(c_panel, ldc, a, lda, panel, m, k, columns, accumulate, cursor);
      else multiply_panel<8, kNarrowRows, false>(c_panel, ldc, a, lda, panel, m, k, columns, accumulate, cursor);
    }
  }
  cursor.finish();
}

}  // namespace enhanced::small_gemm
