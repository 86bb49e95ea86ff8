// The fixture of the tests that run on each bf16 kernel (Bf16Kernels, instantiated in
// test_precision.cpp for the four sources: each ISA on its instructions and on its model), and
// the random operands they share.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <ostream>
#include <vector>

#include "bf16_isa_model.h"
#include "enhanced/random.h"
#include "layers/cpu/bf16_gemm.h"

namespace enhanced::testing {

// Where the fast kernels run: on the CPU's instructions (AVX512-BF16, AMX-BF16), or on models of
// them (bf16_isa_model.h), the same kernel sources on any CPU. Each test runs on all four.
struct KernelSource {
  bf16_gemm::Isa isa;
  bool model;
};

inline void PrintTo(const KernelSource& source, std::ostream* out) {
  *out << (source.isa == bf16_gemm::Isa::amx_bf16 ? "AMX-BF16" : "AVX512-BF16") << (source.model ? " model" : "");
}

class Bf16Kernels : public ::testing::TestWithParam<KernelSource> {
 protected:
  void SetUp() override {
    const KernelSource source = GetParam();
    const char* isa = source.isa == bf16_gemm::Isa::amx_bf16 ? "AMX-BF16" : "AVX512-BF16";
    const bf16_gemm::Kernel kernel =
        source.model ? testing::bf16_model_kernel(source.isa) : bf16_gemm::native_kernel(source.isa);
    if (kernel == nullptr && source.model)
      GTEST_SKIP() << "built without SIMDe (libsimde-dev, which scripts/setup installs): no model of " << isa;
    if (kernel == nullptr)
      GTEST_SKIP() << "this CPU (or the OS) does not run " << isa << ": its kernel runs here only on a model of it";
    kernel_.emplace(kernel);
  }
  std::optional<testing::ScopedBf16Kernel> kernel_;
};


// n floats uniform in [-scale, scale].
inline std::vector<float> random_floats(Random& random, size_t n, double scale) {
  std::vector<float> v(n);
  for (float& e : v) e = static_cast<float>(random.uniform(-scale, scale));
  return v;
}

}  // namespace enhanced::testing
