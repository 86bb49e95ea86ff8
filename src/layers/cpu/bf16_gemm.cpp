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
#include "layers/cpu/multiversion.h"

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

TileSessionState& tile_session() {
  thread_local TileSessionState state;
  return state;
}

TileSession::TileSession() { ++tile_session().depth; }

TileSession::~TileSession() {
  TileSessionState& state = tile_session();
  if (--state.depth == 0 && state.release != nullptr) {
    state.release();
    state.release = nullptr;
  }
}

size_t packed_size(int k, int n) {
  const size_t panels = static_cast<size_t>((n + kPanelWidth - 1) / kPanelWidth);
  return panels * kPanelWidth * padded_depth(k);
}

namespace {

// One pair row of a panel: the 32 columns' (even, odd) pairs, zero past `columns`; odd null: zeros.
ENHANCED_INLINE void write_pair_row(uint16_t* __restrict pair_row, const uint16_t* __restrict even,
                                    const uint16_t* __restrict odd, int columns) {
  if (columns == kPanelWidth && odd != nullptr) {
    for (int j = 0; j < kPanelWidth; ++j) pair_row[2 * j] = even[j], pair_row[2 * j + 1] = odd[j];
    return;
  }
  for (int j = 0; j < kPanelWidth; ++j) {
    pair_row[2 * j] = j < columns ? even[j] : uint16_t{0};
    pair_row[2 * j + 1] = j < columns && odd != nullptr ? odd[j] : uint16_t{0};
  }
}

}  // namespace

void pack_rows(uint16_t* packed, int total_k, int row_offset, const float* source, int k, int n, size_t stride_n,
               size_t stride_k) {
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  const size_t padded_k = padded_depth(total_k);
  for (int p = 0; p < panels; ++p) {
    uint16_t* panel = packed + static_cast<size_t>(p) * kPanelWidth * padded_k;
    const int columns = std::min(kPanelWidth, n - p * kPanelWidth);
    for (int i = 0; i < k; ++i) {
      const int row = row_offset + i;  // pair row / 2, slot row % 2
      uint16_t* pair_row = panel + static_cast<size_t>(row / 2) * 2 * kPanelWidth + row % 2;
      const float* column_zero = source + static_cast<size_t>(p) * kPanelWidth * stride_n + i * stride_k;
      for (int j = 0; j < columns; ++j) pair_row[2 * j] = to_bf16_bits(column_zero[j * stride_n]);
      for (int j = columns; j < kPanelWidth; ++j) pair_row[2 * j] = 0;
    }
  }
  // The last call also zeroes the pad rows past total_k (the buffer may hold an earlier operand).
  if (row_offset + k == total_k) {
    if (total_k % 2 == 1)
      for (int p = 0; p < panels; ++p) {
        uint16_t* pair_row = packed + static_cast<size_t>(p) * kPanelWidth * padded_k +
                             static_cast<size_t>(total_k / 2) * 2 * kPanelWidth;
        for (int j = 0; j < kPanelWidth; ++j) pair_row[2 * j + 1] = 0;
      }
    zero_rows(packed, padded_k, (total_k + 1) / 2 * 2, n);
  }
}

ENHANCED_MULTIVERSION
void pack_converted_rows(uint16_t* packed, size_t padded_k, int row_offset, const uint16_t* rows, size_t ld,
                         int count, int n) {
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  for (int pair = 0; 2 * pair < count; ++pair) {
    const uint16_t* even = rows + static_cast<size_t>(2 * pair) * ld;
    const uint16_t* odd = 2 * pair + 1 < count ? even + ld : nullptr;
    const size_t pair_index = static_cast<size_t>(row_offset / 2 + pair);
    for (int p = 0; p < panels; ++p)
      write_pair_row(packed + static_cast<size_t>(p) * kPanelWidth * padded_k + pair_index * 2 * kPanelWidth,
                     even + static_cast<size_t>(p) * kPanelWidth, odd == nullptr ? nullptr : odd + p * kPanelWidth,
                     std::min(kPanelWidth, n - p * kPanelWidth));
  }
}

void zero_rows(uint16_t* packed, size_t padded_k, int first_row, int n) {
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  const size_t first_pair = static_cast<size_t>(first_row / 2);
  if (first_pair * 2 >= padded_k) return;
  for (int p = 0; p < panels; ++p) {
    uint16_t* panel = packed + static_cast<size_t>(p) * kPanelWidth * padded_k;
    std::memset(panel + first_pair * 2 * kPanelWidth, 0, (padded_k - first_pair * 2) * kPanelWidth * sizeof(uint16_t));
  }
}

ENHANCED_MULTIVERSION
void convert_rows(uint16_t* dst, int ld_dst, const float* source, int ld_source, int rows, int columns) {
  for (int r = 0; r < rows; ++r) {
    const float* __restrict in = source + static_cast<size_t>(r) * ld_source;
    uint16_t* __restrict out = dst + static_cast<size_t>(r) * ld_dst;
    for (int j = 0; j < columns; ++j) out[j] = to_bf16_bits(in[j]);
  }
}

ENHANCED_MULTIVERSION
void convert_rows_rounding(uint16_t* dst, size_t ld_dst, float* values, size_t ld_values, int rows, int columns) {
  for (int r = 0; r < rows; ++r) {
    float* __restrict row = values + static_cast<size_t>(r) * ld_values;
    uint16_t* __restrict out = dst + static_cast<size_t>(r) * ld_dst;
    for (int j = 0; j < columns; ++j) {
      const uint16_t bits = to_bf16_bits(row[j]);
      const uint32_t wide = static_cast<uint32_t>(bits) << 16;
      out[j] = bits;
      std::memcpy(&row[j], &wide, sizeof wide);
    }
  }
}

ENHANCED_MULTIVERSION
void round_floats(float* dst, const float* source, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t wide = static_cast<uint32_t>(to_bf16_bits(source[i])) << 16;
    std::memcpy(&dst[i], &wide, sizeof wide);
  }
}

namespace {

constexpr int kTransposeBlock = 32;  // a whole block: 32 rows of 32 elements, one ZMM each
constexpr int kTransposeRounds = 5;  // log2(32)

// VPERMT2W's lanes for each round of transpose_block (half = 16, 8, 4, 2, 1): [round][0] makes the
// first row of a pair, [round][1] the second; lanes 0-31 pick the first row's, 32-63 the second's.
struct TransposeIndex {
  alignas(64) uint16_t lanes[kTransposeRounds][2][kTransposeBlock];
};
constexpr TransposeIndex transpose_index() {
  TransposeIndex index{};
  for (int round = 0, half = kTransposeBlock / 2; round < kTransposeRounds; ++round, half /= 2)
    for (int j = 0; j < kTransposeBlock; ++j) {
      const bool upper = (j & half) != 0;
      index.lanes[round][0][j] = static_cast<uint16_t>(upper ? 32 + j - half : j);
      index.lanes[round][1][j] = static_cast<uint16_t>(upper ? 32 + j : j + half);
    }
  return index;
}
constexpr TransposeIndex kTransposeIndex = transpose_index();

// dst's 32 x 32 block = source's transposed, in registers: five rounds, each swapping the
// off-diagonal sub-blocks of half the size between rows `half` apart, then the rows stored.
// Only moves: the bits are source's.
__attribute__((target("avx512f,avx512bw"))) void transpose_block(uint16_t* dst, size_t ld_dst,
                                                                  const uint16_t* source, size_t ld_source) {
  __m512i row[kTransposeBlock];
#pragma GCC unroll 32
  for (int r = 0; r < kTransposeBlock; ++r) row[r] = _mm512_loadu_si512(source + r * ld_source);
#pragma GCC unroll 5
  for (int round = 0; round < kTransposeRounds; ++round) {
    const int half = kTransposeBlock / 2 >> round;
    const __m512i low = _mm512_load_si512(kTransposeIndex.lanes[round][0]);
    const __m512i high = _mm512_load_si512(kTransposeIndex.lanes[round][1]);
#pragma GCC unroll 32
    for (int r = 0; r < kTransposeBlock; ++r) {
      if ((r & half) != 0) continue;
      const __m512i first = row[r], second = row[r + half];
      row[r] = _mm512_permutex2var_epi16(first, low, second);
      row[r + half] = _mm512_permutex2var_epi16(first, high, second);
    }
  }
#pragma GCC unroll 32
  for (int c = 0; c < kTransposeBlock; ++c) _mm512_storeu_si512(dst + c * ld_dst, row[c]);
}

void transpose_scalar(uint16_t* dst, size_t ld_dst, const uint16_t* source, size_t ld_source, int r0, int r_end,
                      int c0, int c_end) {
  for (int c = c0; c < c_end; ++c)
    for (int r = r0; r < r_end; ++r) dst[c * ld_dst + r] = source[r * ld_source + c];
}

}  // namespace

// Whole 32 x 32 blocks in registers where the CPU has AVX512-BW (every CPU with AVX512-BF16, so
// the fast path's), the ragged edges and other CPUs element by element in 16 x 16 blocks.
void transpose(uint16_t* dst, size_t ld_dst, const uint16_t* source, size_t ld_source, int rows, int columns) {
  static const bool wide = __builtin_cpu_supports("avx512bw");
  constexpr int kBlock = 16;  // a 16 x 16 block's rows and columns both stay in cache lines
  int whole_rows = 0, whole_columns = 0;
  if (wide) {
    whole_rows = rows / kTransposeBlock * kTransposeBlock, whole_columns = columns / kTransposeBlock * kTransposeBlock;
    for (int r0 = 0; r0 < whole_rows; r0 += kTransposeBlock)
      for (int c0 = 0; c0 < whole_columns; c0 += kTransposeBlock)
        transpose_block(dst + c0 * ld_dst + r0, ld_dst, source + r0 * ld_source + c0, ld_source);
  }
  for (int r0 = 0; r0 < rows; r0 += kBlock)
    for (int c0 = 0; c0 < columns; c0 += kBlock) {
      const int r_end = std::min(rows, r0 + kBlock), c_end = std::min(columns, c0 + kBlock);
      if (r_end <= whole_rows && c_end <= whole_columns) continue;  // done in registers
      transpose_scalar(dst, ld_dst, source, ld_source, r0, r_end, c0, c_end);
    }
}

void multiply(float* c, int ldc, const uint16_t* a, int lda, const uint16_t* packed, int m, int n, int k,
              bool accumulate, uint16_t* workspace, LineRequests requests) {
  Kernel kernel = test_kernel.load(std::memory_order_relaxed);
  if (kernel == nullptr) kernel = native_choice().kernel;
  if (kernel == nullptr) fail("internal: the bf16 kernels need AVX512-BF16 or AMX-BF16, which this CPU lacks");
  if (workspace == nullptr) fail("internal: bf16_gemm::multiply needs its workspace (multiply_workspace_size)");
  kernel(c, ldc, a, lda, packed, m, n, k, accumulate, workspace, requests);
}

}  // namespace enhanced::bf16_gemm
