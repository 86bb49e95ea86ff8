#include "layers/cpu/bf16_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "enhanced/common.h"
#include "enhanced/precision.h"

namespace enhanced::bf16_gemm {
namespace native {
// Compiled for AVX512-BF16 function by function (not the whole file, whose packing must run on any
// CPU): multiply calls it only once the CPU has said yes, so no AVX-512 instruction runs ahead of
// the check.
#define ENHANCED_BF16_TARGET __attribute__((target("avx512f,avx512bf16")))
#include "layers/cpu/bf16_gemm_kernel.inc"
#undef ENHANCED_BF16_TARGET
}  // namespace native

namespace {
bool cpu_has_the_instructions() {
  static const bool has = cpu_bf16_support().avx512_bf16;
  return has;
}
std::atomic<Kernel> model_kernel{nullptr};
}  // namespace

bool available() { return cpu_has_the_instructions() || model_kernel.load() != nullptr; }

void set_model_kernel_for_tests(Kernel kernel) { model_kernel.store(kernel); }

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
  if (const Kernel model = model_kernel.load(std::memory_order_relaxed)) {
    model(c, ldc, a, lda, packed, m, n, k, accumulate);
    return;
  }
  if (!cpu_has_the_instructions()) fail("internal: the bf16 kernels need AVX512-BF16, which this CPU lacks");
  native::multiply_kernel(c, ldc, a, lda, packed, m, n, k, accumulate);
}

}  // namespace enhanced::bf16_gemm
