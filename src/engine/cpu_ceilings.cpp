// The CPU's own ceilings for the bench's roofline (enhanced/cpu.h): short probe loops that do
// nothing but the arithmetic (independent chains of FMA, VDPBF16PS or TDPBF16PS on registers or
// tiles) or nothing but the memory traffic (a copy larger than every cache), on the engine's
// threads. Measured, not read off a data sheet: the clock the cores hold under that load and
// what the instructions issue per cycle on this CPU are in the number.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "enhanced/cpu.h"
#include "enhanced/precision.h"
#include "layers/cpu/bf16_gemm.h"

namespace enhanced {
namespace {

constexpr int64_t kProbeIterations = 1 << 22;  // per thread: some 10 ms at a few GHz
constexpr int kChains = 12;  // independent accumulators: more than latency x issue width on these CPUs

// The chains' final values, kept in memory: the compiler may not drop a loop whose result is
// never read.
template <class Vector>
inline void keep(const Vector (&chains)[kChains]) {
  __asm__ volatile("" ::"r"(chains) : "memory");
}

// Each probe returns the FLOP one thread did (the loop's), with its result kept alive.
__attribute__((target("avx512f"))) double fma_probe_avx512(int64_t iterations) {
  __m512 chains[kChains];
  for (int i = 0; i < kChains; ++i) chains[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 scale = _mm512_set1_ps(0.999999f), shift = _mm512_set1_ps(1e-7f);
  for (int64_t n = 0; n < iterations; ++n)
    for (int i = 0; i < kChains; ++i) chains[i] = _mm512_fmadd_ps(chains[i], scale, shift);
  keep(chains);
  return 2.0 * 16 * kChains * static_cast<double>(iterations);
}

__attribute__((target("avx2,fma"))) double fma_probe_avx2(int64_t iterations) {
  __m256 chains[kChains];
  for (int i = 0; i < kChains; ++i) chains[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m256 scale = _mm256_set1_ps(0.999999f), shift = _mm256_set1_ps(1e-7f);
  for (int64_t n = 0; n < iterations; ++n)
    for (int i = 0; i < kChains; ++i) chains[i] = _mm256_fmadd_ps(chains[i], scale, shift);
  keep(chains);
  return 2.0 * 8 * kChains * static_cast<double>(iterations);
}

// VDPBF16PS: 16 lanes, each two bf16 products added to an FP32 sum (4 FLOP a lane).
__attribute__((target("avx512f,avx512bf16"))) double bf16_dot_probe(int64_t iterations) {
  __m512 chains[kChains];
  for (int i = 0; i < kChains; ++i) chains[i] = _mm512_setzero_ps();
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);  // 1, ~6e-8
  for (int64_t n = 0; n < iterations; ++n)
    for (int i = 0; i < kChains; ++i) chains[i] = _mm512_dpbf16_ps(chains[i], a, b);
  keep(chains);
  return 4.0 * 16 * kChains * static_cast<double>(iterations);
}

// TDPBF16PS on 16 x 16 FP32 tiles with 16 x 32 bf16 operands: 16 * 16 * 32 * 2 FLOP each; four
// accumulator tiles (0-3) from the same two operand tiles (4, 6), as the GEMM kernel's block.
struct alignas(64) ProbeTileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile,amx-bf16"))) double amx_probe(int64_t iterations) {
  ProbeTileConfig config;
  for (int t = 0; t < 8; ++t) config.bytes_per_row[t] = 64, config.rows[t] = 16;
  alignas(64) const uint16_t operand[16 * 32] = {};  // zeros: the values do not matter
  alignas(64) float result[16 * 16];
  __asm__ volatile("" ::: "memory");  // LDTILECFG reads all 64 bytes of config
  _tile_loadconfig(&config);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(6, operand, 64);
  for (int64_t n = 0; n < iterations; ++n) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 6);
    _tile_dpbf16ps(2, 4, 6);
    _tile_dpbf16ps(3, 4, 6);
  }
  _tile_stored(0, result, 64);
  _tile_release();
  __asm__ volatile("" ::"r"(result[0]) : "memory");
  return 4.0 * 16 * 16 * 32 * 2 * static_cast<double>(iterations);
}

// The best rate (GFLOP/s) of `probe` run on every thread at once, over a few tries.
double parallel_rate(double (*probe)(int64_t), int threads, int64_t iterations) {
  double best = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    double flop = 0;
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flop)
    flop += probe(iterations);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, flop / seconds / 1e9);
  }
  return best;
}

// Bytes read plus bytes written per second by a copy of 256 MiB split over the threads.
double copy_rate(int threads) {
  const size_t bytes = size_t{256} << 20;
  const std::unique_ptr<char[]> source(new char[bytes]), target(new char[bytes]);
#pragma omp parallel for num_threads(threads)
  for (int64_t page = 0; page < static_cast<int64_t>(bytes >> 12); ++page) {  // first touch on the thread that copies
    std::memset(source.get() + (page << 12), 1, 4096);
    std::memset(target.get() + (page << 12), 0, 4096);
  }
  double best = 0;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const size_t share = bytes / static_cast<size_t>(omp_get_num_threads());
      const size_t first = share * static_cast<size_t>(omp_get_thread_num());
      std::memcpy(target.get() + first, source.get() + first, share);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * static_cast<double>(bytes) / seconds / 1e9);
  }
  __asm__ volatile("" ::"r"(target.get()) : "memory");
  return best;
}

}  // namespace

CpuCeilings measure_cpu_ceilings(int threads) {
  CpuCeilings c;
  threads = std::max(threads, 1);
  if (__builtin_cpu_supports("avx512f")) {
    c.fp32_isa = "avx-512 fma";
    c.fp32_gflops = parallel_rate(fma_probe_avx512, threads, kProbeIterations);
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    c.fp32_isa = "avx2 fma";
    c.fp32_gflops = parallel_rate(fma_probe_avx2, threads, kProbeIterations);
  }
  if (cpu_bf16_support().avx512_bf16) c.avx512_bf16_gflops = parallel_rate(bf16_dot_probe, threads, kProbeIterations);
  // native_kernel asks Linux for the tile data first; without that leave no tile instruction runs.
  if (bf16_gemm::native_kernel(bf16_gemm::Isa::amx_bf16) != nullptr)
    c.amx_bf16_gflops = parallel_rate(amx_probe, threads, kProbeIterations / 16);
  c.copy_gbytes_per_s = copy_rate(threads);
  return c;
}

}  // namespace enhanced
