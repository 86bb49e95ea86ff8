// The bf16 kernels inside the layers: a TileSession's products, a forward that keeps nothing for
// a backward, and the dense layer's products, each on every kernel source (bf16_kernels.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

#include "amx_model.h"
#include "bf16_kernels.h"
#include "enhanced/precision.h"
#include "enhanced/random.h"
#include "layers/cpu/bf16_gemm.h"
#include "layers/dense.h"
#include "layers/lstm.h"

namespace enhanced {
namespace {

using testing::Bf16Kernels;
using testing::random_floats;

// Inside a TileSession (the AMX kernel configures its tiles once for many calls) every product
// has the bits it has alone, and the session's end releases the tiles. K a multiple of 32 with
// 32-row blocks is where the AMX kernel loads A's tiles straight from A: A's rows run on past K
// into NaNs, which it must not read.
TEST_P(Bf16Kernels, ASessionGivesEachProductItsOwnBitsAndReleasesTheTiles) {
  struct Shape {
    int m, n, k;
  };
  const Shape shapes[] = {{64, 48, 160}, {70, 32, 64}, {5, 40, 37}, {32, 512, 32}};
  Random random(29);
  const uint16_t nan = to_bf16_bits(std::numeric_limits<float>::quiet_NaN());
  std::vector<std::vector<uint16_t>> a_operands, packed_operands;
  std::vector<std::vector<float>> alone;
  std::vector<uint16_t> workspace(bf16_gemm::multiply_workspace_size(160));  // the largest K
  for (const Shape& s : shapes) {
    const int lda = s.k + 3;
    std::vector<uint16_t> a(static_cast<size_t>(s.m) * lda, nan);
    for (int i = 0; i < s.m; ++i)
      for (int j = 0; j < s.k; ++j) a[static_cast<size_t>(i) * lda + j] = to_bf16_bits(static_cast<float>(random.uniform(-1, 1)));
    const std::vector<float> b = random_floats(random, static_cast<size_t>(s.k) * s.n, 1.0);
    std::vector<uint16_t> packed(bf16_gemm::packed_size(s.k, s.n));
    bf16_gemm::pack_rows(packed.data(), s.k, 0, b.data(), s.k, s.n, 1, static_cast<size_t>(s.n));
    std::vector<float> c(static_cast<size_t>(s.m) * s.n);
    bf16_gemm::multiply(c.data(), s.n, a.data(), lda, packed.data(), s.m, s.n, s.k, false, workspace.data());
    for (const float v : c) ASSERT_FALSE(std::isnan(v)) << "a product read A past K";
    a_operands.push_back(a), packed_operands.push_back(packed), alone.push_back(c);
  }
  {
    const bf16_gemm::TileSession session;
    for (int round = 0; round < 2; ++round)
      for (size_t i = 0; i < std::size(shapes); ++i) {
        const Shape& s = shapes[i];
        std::vector<float> c(static_cast<size_t>(s.m) * s.n);
        bf16_gemm::multiply(c.data(), s.n, a_operands[i].data(), s.k + 3, packed_operands[i].data(), s.m, s.n, s.k,
                            false, workspace.data());
        ASSERT_EQ(std::memcmp(c.data(), alone[i].data(), c.size() * sizeof(float)), 0) << s.m << "x" << s.n << "x" << s.k;
      }
    if (GetParam().isa == bf16_gemm::Isa::amx_bf16 && GetParam().model) {
      EXPECT_TRUE(testing::amx_model::configured) << "the session's tiles released between its products";
    }
  }
  EXPECT_EQ(bf16_gemm::tile_session().depth, 0);
  EXPECT_EQ(bf16_gemm::tile_session().release, nullptr);
  if (GetParam().isa == bf16_gemm::Isa::amx_bf16 && GetParam().model) {
    EXPECT_FALSE(testing::amx_model::configured) << "the tiles outlived their session";
  }
}

// Line requests (the LSTM backward's next step's rows) change no bit of a product, on K with and
// without a ragged turn or AMX tile, with fewer and more lines than the product has turns.
TEST_P(Bf16Kernels, LineRequestsLeaveTheProductAlone) {
  struct Shape {
    int m, n, k;
  };
  Random random(30);
  std::vector<float> memory(4096);
  std::vector<const char*> lines;
  for (size_t i = 0; i < memory.size(); i += 16) lines.push_back(reinterpret_cast<const char*>(&memory[i]));
  std::vector<uint16_t> workspace(bf16_gemm::multiply_workspace_size(512));
  for (const Shape& s : {Shape{64, 128, 512}, Shape{70, 32, 64}, Shape{5, 40, 37}, Shape{9, 33, 17}}) {
    const std::vector<float> a_values = random_floats(random, static_cast<size_t>(s.m) * s.k, 1.0);
    std::vector<uint16_t> a(a_values.size());
    for (size_t i = 0; i < a.size(); ++i) a[i] = to_bf16_bits(a_values[i]);
    const std::vector<float> b = random_floats(random, static_cast<size_t>(s.k) * s.n, 1.0);
    std::vector<uint16_t> packed(bf16_gemm::packed_size(s.k, s.n));
    bf16_gemm::pack_rows(packed.data(), s.k, 0, b.data(), s.k, s.n, 1, static_cast<size_t>(s.n));
    for (const int count : {1, 7, static_cast<int>(lines.size())}) {
      for (const bool accumulate : {false, true}) {
        std::vector<float> plain(static_cast<size_t>(s.m) * s.n, 0.5f), requested = plain;
        bf16_gemm::multiply(plain.data(), s.n, a.data(), s.k, packed.data(), s.m, s.n, s.k, accumulate,
                            workspace.data());
        bf16_gemm::multiply(requested.data(), s.n, a.data(), s.k, packed.data(), s.m, s.n, s.k, accumulate,
                            workspace.data(), LineRequests{lines.data(), count});
        ASSERT_EQ(std::memcmp(plain.data(), requested.data(), plain.size() * sizeof(float)), 0)
            << s.m << "x" << s.n << "x" << s.k << ", " << count << " lines";
      }
    }
  }
}

// A forward that keeps nothing for a backward (saved.gates and saved.cell null: an inference)
// computes y with the same bits as one that keeps the gates and cells, in each precision.
void expect_forward_without_saving_gives_the_same_bits(Precision precision) {
  const testing::LstmCase c = testing::random_lstm_case(31, 5, 9, 6, 20);
  const int B = c.B, T = c.T, D = c.D, H = c.H;
  const std::vector<float>&x = c.x, &w_ih = c.w_ih, &w_hh = c.w_hh, &b_ih = c.b_ih, &b_hh = c.b_hh;
  const size_t P = c.positions();
  std::vector<float> kept(P * 2 * H), unkept(P * 2 * H, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> gates(P * 8 * H), cell(P * 2 * H), workspace(bilstm_workspace_size<float>(B, T, D, H));
  BiLstmState<float> saving{gates.data(), cell.data(), workspace.data()}, not_saving{nullptr, nullptr, workspace.data()};
  for (const int threads : {1, 2}) {
    bilstm_forward(kept.data(), saving, x.data(), w_ih.data(), w_hh.data(), b_ih.data(), b_hh.data(), B, T, D, H,
                   threads, precision);
    bilstm_forward(unkept.data(), not_saving, x.data(), w_ih.data(), w_hh.data(), b_ih.data(), b_hh.data(), B, T, D,
                   H, threads, precision);
    ASSERT_EQ(std::memcmp(kept.data(), unkept.data(), kept.size() * sizeof(float)), 0) << to_string(precision);
  }
}

TEST(Bf16Lstm, AForwardThatKeepsNothingGivesTheSameBits) {
  expect_forward_without_saving_gives_the_same_bits(Precision::fp32);
  expect_forward_without_saving_gives_the_same_bits(Precision::bf16_emulated);
}

TEST_P(Bf16Kernels, AForwardThatKeepsNothingGivesTheSameBits) {
  expect_forward_without_saving_gives_the_same_bits(Precision::bf16);
}

// The dense layer's three products on the kernels: each output against the double sum of its
// rounded operands' products, within 2 (K + 1) FP32 roundings of the sum of their magnitudes
// (plus what it adds onto: the bias, or the weight gradient's value before). B odd and L = 37
// leave ragged tiles and panels.
TEST_P(Bf16Kernels, DenseMultipliesRoundedOperands) {
  Random random(23);
  const int B = 7, F = 40, L = 37;
  const std::vector<float> in = random_floats(random, static_cast<size_t>(B) * F, 1.0),
                           weight = random_floats(random, static_cast<size_t>(L) * F, 0.5),
                           bias = random_floats(random, L, 0.5), dout = random_floats(random, static_cast<size_t>(B) * L, 1.0);
  std::vector<float> out(static_cast<size_t>(B) * L), din(static_cast<size_t>(B) * F), dbias(L, 0.0f);
  std::vector<float> dweight = random_floats(random, static_cast<size_t>(L) * F, 0.1);
  const std::vector<float> dweight_before = dweight;
  std::vector<float> workspace(dense_workspace_size<float>(B, F, L));
  dense_forward(out.data(), in.data(), weight.data(), bias.data(), B, F, L, Precision::bf16, workspace.data());
  dense_backward(din.data(), dweight.data(), dbias.data(), dout.data(), in.data(), weight.data(), B, F, L,
                 Precision::bf16, workspace.data());
  // value against start + sum over i of a(i) b(i), the operands rounded.
  auto expect = [](float value, double start, int k, const std::function<std::pair<float, float>(int)>& term,
                   const char* what) {
    double sum = start, magnitude = std::fabs(start);
    for (int i = 0; i < k; ++i) {
      const auto [a, b] = term(i);
      const double product = static_cast<double>(round_to_bf16(a)) * round_to_bf16(b);
      sum += product, magnitude += std::fabs(product);
    }
    ASSERT_NEAR(value, sum, 2 * (k + 1) * 0x1.0p-24 * magnitude) << what;
  };
  for (int b = 0; b < B; ++b)
    for (int l = 0; l < L; ++l)
      expect(out[b * L + l], bias[l], F, [&](int f) { return std::pair{in[b * F + f], weight[l * F + f]}; }, "out");
  for (int l = 0; l < L; ++l)
    for (int f = 0; f < F; ++f)
      expect(dweight[l * F + f], dweight_before[l * F + f], B,
             [&](int b) { return std::pair{dout[b * L + l], in[b * F + f]}; }, "dweight");
  for (int b = 0; b < B; ++b)
    for (int f = 0; f < F; ++f)
      expect(din[b * F + f], 0.0, L, [&](int l) { return std::pair{dout[b * L + l], weight[l * F + f]}; }, "din");
  for (int l = 0; l < L; ++l) {
    double sum = 0;
    for (int b = 0; b < B; ++b) sum += dout[b * L + l];
    EXPECT_NEAR(dbias[l], sum, 1e-5) << "the bias gradient is an FP32 sum";
  }
}

}  // namespace
}  // namespace enhanced
