// --precision bf16 (enhanced/precision.h): the rounding, the CPU detection, the AVX512-BF16
// and AMX-BF16 kernels against the reference path (on the instructions where the CPU has them,
// on models of them on every CPU), the LSTM's bf16
// arithmetic against an independent double implementation that rounds the same operands, and
// the engine's bf16 gradients against FP32 within a bound derived from bfloat16's precision.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "engine/cpu_model.h"
#include "enhanced/common.h"
#include "enhanced/engine.h"
#include "enhanced/precision.h"
#include "bf16_isa_model.h"
#include "bf16_kernels.h"
#include "enhanced/random.h"
#include "gradcheck.h"
#include "layers/cpu/bf16_gemm.h"
#include "layers/cpu/small_gemm.h"
#include "layers/lstm.h"

namespace enhanced {
namespace {

using testing::Bf16Kernels;
using testing::bits_of;
using testing::KernelSource;
using testing::LstmCase;
using testing::random_floats;
using testing::random_lstm_case;

// bfloat16 keeps 8 significant bits: rounding to nearest errs by at most u = 2^-8 relative.
constexpr double kBf16UnitRoundoff = 0x1.0p-8;

float float_of(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

TEST(Bf16Rounding, NearestTiesToEvenOnRandomBitPatterns) {
  Random random(3);
  for (int i = 0; i < 200000; ++i) {
    const float x = float_of(static_cast<uint32_t>(random.next_u64()));
    if (!std::isfinite(x)) continue;
    const float r = round_to_bf16(x);
    ASSERT_EQ(bits_of(r) & 0xffffu, 0u) << x;
    // The two bfloat16 numbers around x, by truncation, in double: r must be the nearer one,
    // the one with an even last bit on a tie, or infinity past the largest.
    const uint32_t down_bits = bits_of(x) & 0xffff0000u;
    const uint32_t up_bits = down_bits + 0x10000u;  // one bfloat16 step away from zero
    const double down = float_of(down_bits);
    // Past the largest bfloat16, "up" is 2^128 for the distance, infinity for the result.
    const bool overflows = (up_bits & 0x7f800000u) == 0x7f800000u;
    const double up = overflows ? std::copysign(0x1.0p128, x) : float_of(up_bits);
    const double error_down = std::fabs(static_cast<double>(x) - down), error_up = std::fabs(static_cast<double>(x) - up);
    const bool pick_up = error_up < error_down || (error_up == error_down && ((down_bits >> 16) & 1u) == 1);
    const double expected = !pick_up ? down : overflows ? std::copysign(INFINITY, x) : up;
    ASSERT_EQ(static_cast<double>(r), expected) << "x = " << x;
  }
}

TEST(Bf16Rounding, SpecialValues) {
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + 0x1.0p-8f), 1.0f);                  // a tie to the even 1
  EXPECT_EQ(round_to_bf16(1.0f + 3 * 0x1.0p-8f), 1.0f + 0x1.0p-6f);  // a tie to the even 1 + 2^-6
  EXPECT_EQ(round_to_bf16(-2.5f), -2.5f);
  EXPECT_TRUE(std::signbit(round_to_bf16(-0.0f)));
  EXPECT_EQ(round_to_bf16(INFINITY), INFINITY);
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::max()), INFINITY);
  const float nan = round_to_bf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(nan));
  EXPECT_TRUE(std::isnan(round_to_bf16(float_of(0x7f800001u)))) << "a signalling NaN must not become infinity";
}

TEST(Precision, NamesRoundTripAndBadOnesAreRefused) {
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::bf16_emulated})
    EXPECT_EQ(parse_precision(to_string(p)), p);
  try {
    parse_precision("fp16");
    FAIL() << "fp16 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp32, bf16 or bf16-emulated"), std::string::npos) << e.what();
  }
}

TEST(Precision, DetectionAgreesWithTheCompilerAndRefusesClearly) {
  const CpuBf16Support support = cpu_bf16_support();
  // GCC's libgcc also checks XCR0 before it reports an AVX-512 feature: the two views must agree.
  EXPECT_EQ(support.avx512_bf16, __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f") &&
                                     __builtin_cpu_supports("avx512bw"));
  EXPECT_EQ(cpu_precision_unavailable_reason(Precision::fp32), "");
  EXPECT_EQ(cpu_precision_unavailable_reason(Precision::bf16_emulated), "");
  const std::string reason = cpu_precision_unavailable_reason(Precision::bf16);
  EXPECT_EQ(reason.empty(), support.avx512_bf16) << reason;
  if (!reason.empty()) {
    EXPECT_NE(reason.find("AVX512-BF16"), std::string::npos) << reason;
    EXPECT_NE(reason.find("bf16-emulated"), std::string::npos) << reason;
  }
  std::printf("this CPU: AVX512-BF16 %s, AMX-BF16 %s\n", support.avx512_bf16 ? "yes" : "no",
              support.amx_bf16 ? "yes" : "no");
}

INSTANTIATE_TEST_SUITE_P(, Bf16Kernels,
                         ::testing::Values(KernelSource{bf16_gemm::Isa::avx512_bf16, false},
                                           KernelSource{bf16_gemm::Isa::amx_bf16, false},
                                           KernelSource{bf16_gemm::Isa::avx512_bf16, true},
                                           KernelSource{bf16_gemm::Isa::amx_bf16, true}),
                         [](const ::testing::TestParamInfo<KernelSource>& source) {
                           const bool amx = source.param.isa == bf16_gemm::Isa::amx_bf16;
                           return std::string(amx ? "Amx" : "Avx512Bf16") + (source.param.model ? "Model" : "");
                         });

TEST(Bf16KernelChoice, AmxFirstThenAvx512Bf16AndATestsKernelOnlyWhileSet) {
  const CpuBf16Support support = cpu_bf16_support();
  const std::string native = bf16_gemm::kernel_name();
  const char* expected = bf16_gemm::native_kernel(bf16_gemm::Isa::amx_bf16)      ? "amx-bf16"
                         : bf16_gemm::native_kernel(bf16_gemm::Isa::avx512_bf16) ? "avx512-bf16"
                                                                                 : "none";
  if (std::getenv("ENHANCED_BF16_KERNEL") == nullptr) {
    EXPECT_EQ(native, expected);
  }
  EXPECT_EQ(bf16_gemm::native_kernel(bf16_gemm::Isa::avx512_bf16) != nullptr, support.avx512_bf16);
  if (!support.amx_bf16) {
    EXPECT_EQ(bf16_gemm::native_kernel(bf16_gemm::Isa::amx_bf16), nullptr);
  }
  EXPECT_EQ(bf16_gemm::available(), native != "none");
  {
    testing::ScopedBf16Kernel model(testing::bf16_model_kernel(bf16_gemm::Isa::amx_bf16));
    EXPECT_TRUE(bf16_gemm::available());
    EXPECT_STREQ(bf16_gemm::kernel_name(), "a test's kernel");
  }
  EXPECT_EQ(bf16_gemm::kernel_name(), native);
  if (native == "none") {
    const float b[2] = {1, 1};
    float c = 0;
    std::vector<uint16_t> packed(bf16_gemm::packed_size(2, 1));
    bf16_gemm::pack_rows(packed.data(), 2, 0, b, 2, 1, 1, 1);
    const uint16_t a_bf16[2] = {to_bf16_bits(1), to_bf16_bits(1)};
    std::vector<uint16_t> workspace(bf16_gemm::multiply_workspace_size(2));
    EXPECT_THROW(bf16_gemm::multiply(&c, 1, a_bf16, 2, packed.data(), 1, 1, 2, false, workspace.data()), Error)
        << "a kernel ran without the instructions or a model";
  }
}

TEST_P(Bf16Kernels, MatchTheReferencePathOnRandomShapes) {
  Random random(5);
  for (int trial = 0; trial < 40; ++trial) {
    // m past 32 reaches AMX's second block of rows.
    const int m = 1 + static_cast<int>(random.below(80)), n = 1 + static_cast<int>(random.below(100));
    const int k = 1 + static_cast<int>(random.below(300));
    const bool accumulate = trial % 2 == 1;
    std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(k) * n);
    for (float& v : a) v = static_cast<float>(random.uniform(-2, 2));
    for (float& v : b) v = static_cast<float>(random.uniform(-2, 2));
    std::vector<float> a_rounded(a.size());
    // A's bfloat16 rows one element apart, that element a NaN: the kernel must keep to its rows
    // (an odd K's last pair included) and never multiply what lies past K.
    const int lda = k + 1;
    std::vector<uint16_t> a_bf16(static_cast<size_t>(m) * lda, to_bf16_bits(std::numeric_limits<float>::quiet_NaN()));
    for (size_t i = 0; i < a.size(); ++i)
      a_rounded[i] = round_to_bf16(a[i]), a_bf16[i / k * lda + i % k] = to_bf16_bits(a[i]);
    std::vector<float> packed(small_gemm::packed_size(k, n));
    small_gemm::pack(packed.data(), b.data(), k, n, 1, static_cast<size_t>(n), true);
    // NaNs where the packing must write its pads: a reused buffer holds whatever came before.
    std::vector<uint16_t> packed_bf16(bf16_gemm::packed_size(k, n),
                                      to_bf16_bits(std::numeric_limits<float>::quiet_NaN()));
    bf16_gemm::pack_rows(packed_bf16.data(), k, 0, b.data(), k, n, 1, static_cast<size_t>(n));
    // C starts random: accumulating must add onto each element's own value.
    std::vector<float> reference(static_cast<size_t>(m) * n);
    for (float& v : reference) v = static_cast<float>(random.uniform(-1, 1));
    const std::vector<float> initial = reference;
    std::vector<float> fast = reference;
    // One workspace for both calls, as a layer reuses its own.
    std::vector<uint16_t> workspace(bf16_gemm::multiply_workspace_size(k + 37));
    {  // A call on NaNs first: what a call leaves in the workspace (AMX's A block) must not leak.
      const int k_before = k + 37;
      const uint16_t nan = to_bf16_bits(std::numeric_limits<float>::quiet_NaN());
      std::vector<uint16_t> nans(static_cast<size_t>(m) * k_before, nan);
      std::vector<uint16_t> packed_zeros(bf16_gemm::packed_size(k_before, n));
      const std::vector<float> zeros(static_cast<size_t>(k_before) * n, 0.0f);
      bf16_gemm::pack_rows(packed_zeros.data(), k_before, 0, zeros.data(), k_before, n, 1, static_cast<size_t>(n));
      std::vector<float> discarded(static_cast<size_t>(m) * n);
      bf16_gemm::multiply(discarded.data(), n, nans.data(), k_before, packed_zeros.data(), m, n, k_before, false,
                          workspace.data());
    }
    small_gemm::multiply(reference.data(), n, a_rounded.data(), k, packed.data(), m, n, k, accumulate);
    bf16_gemm::multiply(fast.data(), n, a_bf16.data(), lda, packed_bf16.data(), m, n, k, accumulate, workspace.data());
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        // The products are exact in both (no subnormals at this scale); each side's sum errs by
        // at most (k + 1) FP32 roundings of sum |a b|, so the two differ by at most twice that.
        double magnitude = accumulate ? std::fabs(initial[static_cast<size_t>(i) * n + j]) : 0.0;
        for (int l = 0; l < k; ++l)
          magnitude += std::fabs(a_rounded[static_cast<size_t>(i) * k + l] * round_to_bf16(b[static_cast<size_t>(l) * n + j]));
        const size_t at = static_cast<size_t>(i) * n + j;
        ASSERT_NEAR(fast[at], reference[at], 2 * (k + 1) * 0x1.0p-24 * magnitude) << m << "x" << n << "x" << k;
      }
  }
}

// An independent BiLSTM forward in double (docs/model.md's equations, gates i, f, g, o) whose
// matrix products take their operands rounded to bfloat16, as --precision bf16 defines them.
std::vector<double> reference_bilstm_bf16(const std::vector<float>& x, const std::vector<float>& w_ih,
                                          const std::vector<float>& w_hh, const std::vector<float>& b_ih,
                                          const std::vector<float>& b_hh, int B, int T, int D, int H) {
  std::vector<double> y(static_cast<size_t>(B) * T * 2 * H);
  auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  for (int dir = 0; dir < 2; ++dir)
    for (int b = 0; b < B; ++b) {
      std::vector<double> h(H, 0), c(H, 0), gates(4 * H);
      for (int s = 0; s < T; ++s) {
        const int t = dir == 0 ? s : T - 1 - s;
        for (int j = 0; j < 4 * H; ++j) {
          const size_t row = static_cast<size_t>(dir) * 4 * H + j;
          double sum = static_cast<double>(b_ih[row]) + b_hh[row];
          for (int d = 0; d < D; ++d)
            sum += static_cast<double>(round_to_bf16(x[(static_cast<size_t>(b) * T + t) * D + d])) *
                   round_to_bf16(w_ih[row * D + d]);
          for (int k = 0; k < H; ++k)
            sum += static_cast<double>(round_to_bf16(static_cast<float>(h[k]))) * round_to_bf16(w_hh[row * H + k]);
          gates[j] = sum;
        }
        for (int k = 0; k < H; ++k) {
          const double i = sigmoid(gates[k]), f = sigmoid(gates[H + k]), g = std::tanh(gates[2 * H + k]),
                       o = sigmoid(gates[3 * H + k]);
          c[k] = f * c[k] + i * g;
          h[k] = static_cast<float>(o * std::tanh(c[k]));  // the engine keeps h in FP32
          y[(static_cast<size_t>(b) * T + t) * 2 * H + dir * H + k] = h[k];
        }
      }
    }
  return y;
}

void expect_bilstm_matches_reference(Precision precision) {
  Random random(9);
  const int B = 5, T = 7, D = 6, H = 9;
  const std::vector<float> x = random_floats(random, static_cast<size_t>(B) * T * D, 1.0);
  const std::vector<float> w_ih = random_floats(random, 8 * H * D, 0.5), w_hh = random_floats(random, 8 * H * H, 0.5);
  const std::vector<float> b_ih = random_floats(random, 8 * H, 0.5), b_hh = random_floats(random, 8 * H, 0.5);
  std::vector<float> y(static_cast<size_t>(B) * T * 2 * H), gates(static_cast<size_t>(B) * T * 8 * H),
      cell(static_cast<size_t>(B) * T * 2 * H);
  std::vector<float> workspace(bilstm_workspace_size<float>(B, T, D, H));
  BiLstmState<float> saved{gates.data(), cell.data(), workspace.data()};
  bilstm_forward(y.data(), saved, x.data(), w_ih.data(), w_hh.data(), b_ih.data(), b_hh.data(), B, T, D, H, 2,
                 precision);
  const std::vector<double> expected = reference_bilstm_bf16(x, w_ih, w_hh, b_ih, b_hh, B, T, D, H);
  double largest = 0;
  for (size_t i = 0; i < y.size(); ++i) largest = std::max(largest, std::fabs(y[i] - expected[i]));
  // FP32 accumulation and the two sides' h rounding to bf16 from slightly different floats: a
  // bfloat16 step (2^-8) at most where a rounding falls differently, FP32 noise otherwise.
  EXPECT_LT(largest, 4 * kBf16UnitRoundoff) << to_string(precision);
  size_t differ = 0;
  for (size_t i = 0; i < y.size(); ++i) differ += std::fabs(y[i] - expected[i]) > 1e-5;
  EXPECT_LT(differ, y.size() / 50) << "more than 2% of outputs off by more than FP32 noise: " << differ;
}

TEST(Bf16Lstm, EmulatedMatchesAnIndependentRoundedReference) {
  expect_bilstm_matches_reference(Precision::bf16_emulated);
}

TEST_P(Bf16Kernels, MatchAnIndependentRoundedReferenceInTheLstm) {
  expect_bilstm_matches_reference(Precision::bf16);
}

// Norm-wise relative difference of two tensors.
double relative_difference(const std::vector<float>& value, const std::vector<float>& reference) {
  double difference = 0, norm = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    difference += std::pow(static_cast<double>(value[i]) - reference[i], 2);
    norm += std::pow(static_cast<double>(reference[i]), 2);
  }
  return std::sqrt(difference / norm);
}

// The bound on a bf16 result's norm-wise relative difference from FP32's. Each operand carries a
// relative rounding error of at most u = 2^-8, a product of two 2u. The LSTM's gradients pass
// through up to three GEMMs with rounded operands (the forward's projection; the backward's
// recurrent product, then the weight gradient or dx): 3 * 2u = 6u if their errors added up in
// the worst case. That argument is first-order and leaves out what carries the error over the T
// steps and the cancellation in sums of mixed signs, so 6u is an estimate with margin, not a
// proof; measured here: 0.3u to 0.65u. The tests also ask that bf16 differ from FP32 by more than
// FP32's own noise (1e-5): the rounding really is applied.
constexpr double kBf16Bound = 6 * kBf16UnitRoundoff;
constexpr double kFp32Noise = 1e-5;


// What one forward and backward of the layer leave: y, the gates (on exit, their gradients) and
// the gradients.
struct LstmRun {
  std::vector<float> y, gates, dx, dw_ih, dw_hh, db_ih, db_hh;
};

LstmRun run_bilstm(const LstmCase& c, Precision precision, int threads) {
  const size_t P = c.positions();
  LstmRun r{std::vector<float>(P * 2 * c.H), std::vector<float>(P * 8 * c.H), std::vector<float>(P * c.D),
            std::vector<float>(c.w_ih.size()), std::vector<float>(c.w_hh.size()), std::vector<float>(c.b_ih.size()),
            std::vector<float>(c.b_hh.size())};
  std::vector<float> cell(P * 2 * c.H), workspace(bilstm_workspace_size<float>(c.B, c.T, c.D, c.H));
  BiLstmState<float> saved{r.gates.data(), cell.data(), workspace.data()};
  bilstm_forward(r.y.data(), saved, c.x.data(), c.w_ih.data(), c.w_hh.data(), c.b_ih.data(), c.b_hh.data(), c.B, c.T,
                 c.D, c.H, threads, precision);
  bilstm_backward(r.dx.data(), r.dw_ih.data(), r.dw_hh.data(), r.db_ih.data(), r.db_hh.data(), saved, r.y.data(),
                  c.dy.data(), c.x.data(), c.w_ih.data(), c.w_hh.data(), c.B, c.T, c.D, c.H, threads, precision);
  return r;
}

// The tensors two runs are compared on.
std::vector<std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>>> compared(
    const LstmRun& a, const LstmRun& b) {
  return {{"y", {&a.y, &b.y}},
          {"dx", {&a.dx, &b.dx}},
          {"dweight_ih", {&a.dw_ih, &b.dw_ih}},
          {"dweight_hh", {&a.dw_hh, &b.dw_hh}},
          {"dbias_ih", {&a.db_ih, &b.db_ih}}};
}

// The layer alone, with a fixed dy: the max-pool after it would route the gradient by an argmax
// that a rounding can flip (a different function, not an error of the arithmetic).
TEST(Bf16Lstm, GradientsMatchFp32WithinTheBf16Bound) {
  const LstmCase c = random_lstm_case(13, 4, 10, 8, 16);
  const LstmRun fp32 = run_bilstm(c, Precision::fp32, 2), bf16 = run_bilstm(c, Precision::bf16_emulated, 2);
  for (const auto& [name, pair] : compared(bf16, fp32)) {
    const double relative = relative_difference(*pair.first, *pair.second);
    std::printf("%-11s relative difference %.3g (bound %.3g)\n", name, relative, kBf16Bound);
    EXPECT_LT(relative, kBf16Bound) << name;
    EXPECT_GT(relative, kFp32Noise) << name << ": no sign of bfloat16 rounding";
  }
}

// What the backward multiplies, recomputed in double from its own outputs: on exit the gates
// hold the gate gradients, which bf16 rounds (every later use is a GEMM); the weight gradients
// and dx must then be the products of those with the rounded [x | h_{t-1}] and W_ih, to FP32
// sums' noise. An operand left unrounded would be off by up to 2^-8, far above that noise. P =
// 600 passes the fast path's 512-position chunks of the weight gradients' K.
void expect_backward_multiplies_rounded_operands(Precision precision) {
  const LstmCase c = random_lstm_case(17, 3, 200, 5, 8);
  const int B = c.B, T = c.T, D = c.D, H = c.H, G8 = 8 * H;
  const size_t P = c.positions();
  const std::vector<float>&x = c.x, &w_ih = c.w_ih;
  const LstmRun r = run_bilstm(c, precision, 1);
  const std::vector<float>&y = r.y, &gates = r.gates, &dx = r.dx, &dw_ih = r.dw_ih, &dw_hh = r.dw_hh;
  for (const float g : gates) ASSERT_EQ(bits_of(g) & 0xffffu, 0u) << "a gate gradient left unrounded: " << g;
  // expect(value, terms): value against the double sum of terms (pairs a, b), within 2 P FP32
  // roundings of sum |a b|.
  auto expect_product = [](float value, const std::vector<std::pair<double, double>>& terms, const char* what) {
    double sum = 0, magnitude = 0;
    for (const auto& [a, b] : terms) sum += a * b, magnitude += std::fabs(a * b);
    ASSERT_NEAR(value, sum, 2 * static_cast<double>(terms.size() + 1) * 0x1.0p-24 * magnitude + 1e-30) << what;
  };
  for (int dir = 0; dir < 2; ++dir)
    for (int j = 0; j < 4 * H; ++j) {
      const size_t row = static_cast<size_t>(dir) * 4 * H + j;
      for (int d = 0; d < D; ++d) {
        std::vector<std::pair<double, double>> terms;
        for (size_t p = 0; p < P; ++p) terms.push_back({gates[p * G8 + row], round_to_bf16(x[p * D + d])});
        expect_product(dw_ih[row * D + d], terms, "dweight_ih");
      }
      for (int k = 0; k < H; ++k) {
        std::vector<std::pair<double, double>> terms;
        for (int b = 0; b < B; ++b)
          for (int t = 0; t < T; ++t) {
            const int t_prev = dir == 0 ? t - 1 : t + 1;
            if (t_prev < 0 || t_prev >= T) continue;
            const size_t p = static_cast<size_t>(b) * T + t, p_prev = static_cast<size_t>(b) * T + t_prev;
            terms.push_back({gates[p * G8 + row], round_to_bf16(y[p_prev * 2 * H + dir * H + k])});
          }
        expect_product(dw_hh[row * H + k], terms, "dweight_hh");
      }
    }
  for (size_t p = 0; p < P; ++p)
    for (int d = 0; d < D; ++d) {
      std::vector<std::pair<double, double>> terms;
      for (int row = 0; row < G8; ++row) terms.push_back({gates[p * G8 + row], round_to_bf16(w_ih[static_cast<size_t>(row) * D + d])});
      expect_product(dx[p * D + d], terms, "dx");
    }
}

TEST(Bf16Lstm, BackwardMultipliesRoundedOperands) {
  expect_backward_multiplies_rounded_operands(Precision::bf16_emulated);
}

TEST_P(Bf16Kernels, MultiplyRoundedOperandsInTheBackward) {
  expect_backward_multiplies_rounded_operands(Precision::bf16);
}

// The fast kernels against the reference path through a whole forward and backward, on a shape
// whose dx halves pass the kernels' 256-row conversion chunks and whose D is odd. The two differ
// by FP32 sums' order, VDPBF16PS's flushing of subnormals and the rare bfloat16 rounding of h
// that falls the other way after that: an engineering margin of 2^-10 norm-wise, a quarter of u.
TEST_P(Bf16Kernels, MatchTheReferenceThroughTheLstmsForwardAndBackward) {
  const LstmCase c = random_lstm_case(19, 8, 70, 7, 16);
  const LstmRun fast = run_bilstm(c, Precision::bf16, 2), reference = run_bilstm(c, Precision::bf16_emulated, 2);
  for (const auto& [name, pair] : compared(fast, reference))
    EXPECT_LT(relative_difference(*pair.first, *pair.second), 0x1.0p-10) << name;
}

// The whole model's logits: the forward through the LSTM (one rounded GEMM a step, the error
// carried by h) and the dense layer, within the same bound.
TEST(Bf16Engine, LogitsMatchFp32WithinTheBf16Bound) {
  ModelConfig config;
  config.vocab_size = 40;
  config.embedding_dim = 8;
  config.hidden = 16;
  config.seq_len = 12;
  config.num_labels = 5;
  ParameterBuffer<float> params(config);
  initialize_parameters(params, 21);
  Random random(4);
  const Batch batch = testing::random_batch(6, config.seq_len, static_cast<int>(config.vocab_size), config.num_labels,
                                            random);
  auto logits_in = [&](Precision precision) {
    EngineOptions options{batch.size, 2};
    options.precision = precision;
    const std::unique_ptr<Engine> engine = make_engine(Device::cpu, params, nullptr, options);
    std::vector<float> logits(static_cast<size_t>(batch.size) * config.num_labels);
    engine->forward(batch, logits.data());
    return logits;
  };
  const std::vector<float> fp32 = logits_in(Precision::fp32), bf16 = logits_in(Precision::bf16_emulated);
  const double relative = relative_difference(bf16, fp32);
  std::printf("logits relative difference %.3g (bound %.3g)\n", relative, kBf16Bound);
  EXPECT_LT(relative, kBf16Bound);
  EXPECT_GT(relative, kFp32Noise) << "no sign of bfloat16 rounding";
}

TEST(Bf16Engine, Bf16IsRefusedWhereTheCpuHasNoBf16Instructions) {
  if (cpu_bf16_support().avx512_bf16) GTEST_SKIP() << "this CPU has AVX512-BF16: --precision bf16 runs here";
  ModelConfig config;
  config.vocab_size = 10;
  config.seq_len = 4;
  config.num_labels = 2;
  ParameterBuffer<float> params(config);
  EngineOptions options{4, 1};
  options.precision = Precision::bf16;
  try {
    make_engine(Device::cpu, params, nullptr, options);
    FAIL() << "--precision bf16 accepted on a CPU without AVX512-BF16";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16-emulated"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace enhanced
