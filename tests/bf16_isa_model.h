// bf16_gemm's kernels compiled against models of their instructions, so that the tests run them
// on every CPU (set one with bf16_gemm::set_kernel_for_tests):
// - AVX512-BF16: the kernel against SIMDe's portable definitions of the intrinsics (Debian's
//   libsimde-dev); absent (nullptr) where the build found no SIMDe. SIMDe (with GCC on x86)
//   adds a VDPBF16PS lane's two exact products to the sum in turn, the even one first (the
//   instruction adds the odd one first), and flushes no subnormal (the instruction flushes them
//   to zero).
// - AMX-BF16: the kernel against amx_model.h, this project's scalar model of the tile
//   intrinsics (SIMDe has none), which also checks the tiles' shapes.
// So the tests that use them compare within FP32 sums' noise, as they compare the instructions.
#pragma once

#include "layers/cpu/bf16_gemm.h"

namespace enhanced::testing {

bf16_gemm::Kernel bf16_model_kernel(bf16_gemm::Isa isa);

// Sets a kernel for a scope; the process's own choice again after it.
class ScopedBf16Kernel {
 public:
  explicit ScopedBf16Kernel(bf16_gemm::Kernel kernel) { bf16_gemm::set_kernel_for_tests(kernel); }
  ~ScopedBf16Kernel() { bf16_gemm::set_kernel_for_tests(nullptr); }
  ScopedBf16Kernel(const ScopedBf16Kernel&) = delete;
  ScopedBf16Kernel& operator=(const ScopedBf16Kernel&) = delete;
};

}  // namespace enhanced::testing
