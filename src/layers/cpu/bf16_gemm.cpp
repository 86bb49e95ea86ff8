#include "layers/cpu/bf16_gemm.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "enhanced/common.h"
#include "enhanced/precision.h"

namespace enhanced::bf16_gemm {
// The kernels are compiled for their instructions function by function (not the whole file, whose
// packing must run on any CPU): multiply calls one only once the CPU has said yes, so no AVX-512
// or AMX instruction runs ahead of the check.
namespace avx512 {
#define ENHANCED_KERNEL_TARGET __attribute__((target("avx512f,avx512bf16")))
#include "layers/cpu/bf16_gemm_avx512.inc"
#undef ENHANCED_KERNEL_TARGET
}  // namespace avx512

namespace amx {
#define ENHANCED_KERNEL_TARGET __attribute__((target("amx-tile,amx-bf16")))
#define ENHANCED_TILE_BARRIER() __asm__ volatile("" ::: "memory")
#include "layers/cpu/bf16_gemm_amx.inc"
#undef ENHANCED_TILE_BARRIER
#undef ENHANCED_KERNEL_TARGET
}  // namespace amx

namespace {

// Linux hands out AMX's tile data (8 KiB of state a thread) only on request; until then the
// first tile instruction faults.
bool tile_data_permitted() {
  constexpr long kArchRequestPermission = 0x1023;  // ARCH_REQ_XCOMP_PERM
  constexpr long kTileDataFeature = 18;            // XFEATURE_XTILEDATA
  return syscall(SYS_arch_prctl, kArchRequestPermission, kTileDataFeature) == 0;
}

struct Choice {
  Kernel kernel;
  const char* name;
};

Choice choose_native() {
  const char* asked = std::getenv("ENHANCED_BF16_KERNEL");
  const std::string wanted = asked ? asked : "";
  if (!wanted.empty() && wanted != "amx-bf16" && wanted != "avx512-bf16")
    fail("ENHANCED_BF16_KERNEL must be amx-bf16 or avx512-bf16, got '", wanted, "'");
  if (wanted != "avx512-bf16") {
    if (const Kernel kernel = native_kernel(Isa::amx_bf16)) return {kernel, "amx-bf16"};
    if (wanted == "amx-bf16")
      fail("ENHANCED_BF16_KERNEL=amx-bf16, but ",
           cpu_bf16_support().amx_bf16 ? "Linux refused this process AMX's tile data (arch_prctl)"
                                       : "this CPU has no AMX-BF16");
  }
  if (const Kernel kernel = native_kernel(Isa::avx512_bf16)) return {kernel, "avx512-bf16"};
  return {nullptr, "none"};
}

const Choice& native_choice() {
  static const Choice choice = choose_native();
  return choice;
}

std::atomic<Kernel> test_kernel{nullptr};

}  // namespace

Kernel native_kernel(Isa isa) {
  if (isa == Isa::avx512_bf16) {
    static const bool avx512_bf16 = cpu_bf16_support().avx512_bf16;
    return avx512_bf16 ? &avx512::multiply_kernel : nullptr;
  }
  static const bool amx_bf16 = cpu_bf16_support().amx_bf16 && tile_data_permitted();  // asked once, if ever
  return amx_bf16 ? &amx::multiply_kernel : nullptr;
}

bool available() { return test_kernel.load() != nullptr || native_choice().kernel != nullptr; }

const char* kernel_name() { return test_kernel.load() != nullptr ? "a test's kernel" : native_choice().name; }

void set_kernel_for_tests(Kernel kernel) { test_kernel.store(kernel); }

size_t packed_size(int k, int n) {
  const size_t panels = static_cast<size_t>((n + kPanelWidth - 1) / kPanelWidth);
  return panels * kPanelWidth * padded_depth(k);
}

void pack_rows(uint16_t* packed, int total_k, int row_offset, const float* source, int k, int n, size_t stride_n,
               size_t stride_k) {
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  const size_t padded_k = padded_depth(total_k);
  // The last call also zeroes the pad rows past total_k (the buffer may hold an earlier operand).
  const int end = row_offset + k == total_k ? static_cast<int>(padded_k) : row_offset + k;
  for (int p = 0; p < panels; ++p) {
    uint16_t* panel = packed + static_cast<size_t>(p) * kPanelWidth * padded_k;
    for (int row = row_offset; row < end; ++row) {
      const int i = row - row_offset;  // pair row / 2, slot row % 2
      uint16_t* pair_row = panel + static_cast<size_t>(row / 2) * 2 * kPanelWidth + row % 2;
      for (int j = 0; j < kPanelWidth; ++j) {
        const int column = p * kPanelWidth + j;
        const bool inside = column < n && i < k;
        pair_row[2 * j] =
            inside ? to_bf16_bits(source[static_cast<size_t>(column) * stride_n + static_cast<size_t>(i) * stride_k])
                   : uint16_t{0};
      }
    }
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
  Kernel kernel = test_kernel.load(std::memory_order_relaxed);
  if (kernel == nullptr) kernel = native_choice().kernel;
  if (kernel == nullptr) fail("internal: the bf16 kernels need AVX512-BF16 or AMX-BF16, which this CPU lacks");
  kernel(c, ldc, a, lda, packed, m, n, k, accumulate);
}

}  // namespace enhanced::bf16_gemm
