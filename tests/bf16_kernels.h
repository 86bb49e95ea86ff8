// The fixture of the tests that run on each bf16 kernel (Bf16Kernels, instantiated in
// test_precision.cpp for the four sources: each ISA on its instructions and on its model), and
// what the bf16 tests share: random operands, a random LSTM case, a float's bits.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
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


// The bits of a float.
inline uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// A random BiLSTM layer's inputs, weights and output gradient (B, T, D, H as bilstm_forward's).
struct LstmCase {
  int B, T, D, H;
  std::vector<float> x, dy, w_ih, w_hh, b_ih, b_hh;
  size_t positions() const { return static_cast<size_t>(B) * T; }
};

inline LstmCase random_lstm_case(uint64_t seed, int B, int T, int D, int H) {
  Random random(seed);
  LstmCase c{B, T, D, H, {}, {}, {}, {}, {}, {}};
  c.x = random_floats(random, c.positions() * D, 1.0);
  c.dy = random_floats(random, c.positions() * 2 * H, 1.0);
  c.w_ih = random_floats(random, 8 * H * D, 0.4);
  c.w_hh = random_floats(random, 8 * H * H, 0.4);
  c.b_ih = random_floats(random, 8 * H, 0.4);
  c.b_hh = random_floats(random, 8 * H, 0.4);
  return c;
}

}  // namespace enhanced::testing
