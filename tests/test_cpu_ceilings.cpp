// The bench's roofline ceilings (enhanced/cpu.h): each measured where this CPU (and Linux, for
// AMX) runs its instructions and zero where it does not, so the roofline never divides by a
// peak this machine lacks, nor reports one it never measured.
#include <gtest/gtest.h>

#include "enhanced/cpu.h"
#include "enhanced/precision.h"
#include "layers/cpu/bf16_gemm.h"

namespace enhanced {
namespace {

TEST(CpuCeilings, EachIsMeasuredExactlyWhereItsInstructionsRun) {
  const CpuCeilings c = measure_cpu_ceilings(1);
  const bool fma = __builtin_cpu_supports("avx512f") || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  EXPECT_EQ(c.fp32_gflops > 0, fma) << c.fp32_isa;
  EXPECT_EQ(std::string(c.fp32_isa), __builtin_cpu_supports("avx512f") ? "avx-512 fma" : fma ? "avx2 fma" : "none");
  EXPECT_EQ(c.avx512_bf16_gflops > 0, cpu_bf16_support().avx512_bf16);
  EXPECT_EQ(c.amx_bf16_gflops > 0, bf16_gemm::native_kernel(bf16_gemm::Isa::amx_bf16) != nullptr);
  EXPECT_GT(c.copy_gbytes_per_s, 0);
  std::printf("this CPU: FP32 %.0f GFLOP/s (%s), AVX512-BF16 %.0f, AMX-BF16 %.0f, copy %.1f GB/s (one thread)\n",
              c.fp32_gflops, c.fp32_isa, c.avx512_bf16_gflops, c.amx_bf16_gflops, c.copy_gbytes_per_s);
}

}  // namespace
}  // namespace enhanced
