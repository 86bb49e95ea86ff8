// bf16_gemm's AVX512-BF16 kernel compiled against SIMDe's portable model of the instructions
// (Debian's libsimde-dev), so that the tests run it on every CPU: set it with
// bf16_gemm::set_model_kernel_for_tests. Absent (nullptr) where the build found no SIMDe.
//
// The model computes what the instructions compute, the order of the two FP32 additions in
// VDPBF16PS's lane aside (SIMDe adds the pair's two exact products, then the sum; the
// instruction adds them one after the other) and its flushing of subnormal inputs and outputs to
// zero, which SIMDe does not do: the tests that use it compare within FP32 sums' noise, as they
// compare the instructions.
#pragma once

#include "layers/cpu/bf16_gemm.h"

namespace enhanced::testing {

bf16_gemm::Kernel bf16_isa_model_kernel();

// Sets the model kernel for a scope; the instructions (or nothing) again after it.
class ScopedBf16IsaModel {
 public:
  ScopedBf16IsaModel() { bf16_gemm::set_model_kernel_for_tests(bf16_isa_model_kernel()); }
  ~ScopedBf16IsaModel() { bf16_gemm::set_model_kernel_for_tests(nullptr); }
  ScopedBf16IsaModel(const ScopedBf16IsaModel&) = delete;
  ScopedBf16IsaModel& operator=(const ScopedBf16IsaModel&) = delete;
};

}  // namespace enhanced::testing
