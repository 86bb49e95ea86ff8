// The float pointwise pass uses its own vectorizable exp/tanh: it must agree with the double
// pass (C library exp/tanh) to float precision over the whole range gates take, saturation included.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "enhanced/precision.h"
#include "enhanced/random.h"
#include "layers/cpu/lstm_pointwise.h"

namespace enhanced {
namespace {

TEST(LstmPointwise, FloatMatchesDoubleToFloatPrecision) {
  const int H = 67;  // odd: exercises the vector loops' tails
  Random random(9);
  for (const double range : {0.01, 1.0, 8.0, 100.0}) {
    std::vector<float> gates(4 * H), cell(H), h(H), prev(H);
    std::vector<double> gates_d(4 * H), cell_d(H), h_d(H), prev_d(H);
    for (int k = 0; k < 4 * H; ++k) gates_d[k] = gates[k] = static_cast<float>(random.uniform(-range, range));
    for (int k = 0; k < H; ++k) prev_d[k] = prev[k] = static_cast<float>(random.uniform(-2, 2));
    std::vector<float> bias(4 * H);
    std::vector<double> bias_d(4 * H);
    // The double reference sees the float-rounded sums gates + bias: the float pass adds in float,
    // and at |x| ~ 50 that rounding alone moves sigmoid(x) by ~1e-6 relative.
    for (int k = 0; k < 4 * H; ++k) {
      bias[k] = static_cast<float>(random.uniform(-0.5, 0.5));
      gates_d[k] = static_cast<double>(gates[k] + bias[k]);
      bias_d[k] = 0.0;
    }
    lstm_pointwise::forward(gates.data(), cell.data(), h.data(), nullptr, prev.data(), bias.data(), H, false);
    lstm_pointwise::forward(gates_d.data(), cell_d.data(), h_d.data(), nullptr, prev_d.data(), bias_d.data(), H,
                            false);
    for (int k = 0; k < 4 * H; ++k) EXPECT_NEAR(gates[k], gates_d[k], 4e-7 * std::fabs(gates_d[k]) + 1e-30) << range;
    for (int k = 0; k < H; ++k) {
      EXPECT_NEAR(cell[k], cell_d[k], 1e-6 * std::fabs(cell_d[k]) + 1e-7) << range;
      EXPECT_NEAR(h[k], h_d[k], 1e-6 * std::fabs(h_d[k]) + 1e-7) << range;
    }
    // Backward from these activations, no previous cell (first step) and with one.
    std::vector<float> dh(H), dh_rec(H), dc(H);
    std::vector<double> dh_d(H), dh_rec_d(H), dc_d(H);
    for (int k = 0; k < H; ++k) {
      dh_d[k] = dh[k] = static_cast<float>(random.uniform(-1, 1));
      dh_rec_d[k] = dh_rec[k] = static_cast<float>(random.uniform(-1, 1));
      dc_d[k] = dc[k] = static_cast<float>(random.uniform(-1, 1));
    }
    for (int k = 0; k < 4 * H; ++k) gates_d[k] = gates[k];  // same activations in
    std::vector<float> dbias(4 * H, 1.0f);
    std::vector<double> dbias_d(4 * H, 1.0);
    lstm_pointwise::backward(gates.data(), dc.data(), dbias.data(), cell.data(), nullptr, dh.data(), dh_rec.data(), H,
                             false);
    lstm_pointwise::backward(gates_d.data(), dc_d.data(), dbias_d.data(), cell_d.data(), nullptr, dh_d.data(),
                             dh_rec_d.data(), H, false);
    for (int k = 0; k < 4 * H; ++k) EXPECT_NEAR(dbias[k], 1.0 + gates_d[k], 2e-6 * std::fabs(gates_d[k]) + 2e-7) << range;
    for (int k = 0; k < 4 * H; ++k) EXPECT_NEAR(gates[k], gates_d[k], 2e-6 * std::fabs(gates_d[k]) + 2e-7) << range;
    for (int k = 0; k < H; ++k) EXPECT_NEAR(dc[k], dc_d[k], 2e-6 * std::fabs(dc_d[k]) + 2e-7) << range;
  }
}

TEST(LstmPointwise, ExtremePreActivationsStayFinite) {
  const int H = 16;
  std::vector<float> gates(4 * H), cell(H), h(H), bias(4 * H, 0.0f);
  for (int k = 0; k < 4 * H; ++k) gates[k] = (k % 2 ? 1.0f : -1.0f) * 1e30f;
  lstm_pointwise::forward(gates.data(), cell.data(), h.data(), nullptr, nullptr, bias.data(), H, false);
  for (int k = 0; k < 4 * H; ++k) {
    EXPECT_TRUE(std::isfinite(gates[k])) << k;
    EXPECT_GE(gates[k], -1.0f);
    EXPECT_LE(gates[k], 1.0f);
  }
  for (int k = 0; k < H; ++k) EXPECT_TRUE(std::isfinite(h[k]));
}

// The copies a pass writes for the next product (h for the next step's operand, the gate
// gradients for the backward's products) are the plain pass's values, as they are or rounded to
// bfloat16, bit for bit; the bias gradient sums the unrounded gradients.
TEST(LstmPointwise, CopiesForTheProductsAreThePlainValuesRounded) {
  const int H = 37;
  Random random(4);
  std::vector<float> pre(4 * H), bias(4 * H), prev(H), dh(H), dh_rec(H), dc(H);
  for (auto* v : {&pre, &bias}) for (float& e : *v) e = static_cast<float>(random.uniform(-3, 3));
  for (auto* v : {&prev, &dh, &dh_rec, &dc}) for (float& e : *v) e = static_cast<float>(random.uniform(-1, 1));
  std::vector<float> gates = pre, cell(H), h(H), copy(H), rounded(H), g2 = pre, g3 = pre, c2(H), h2(H);
  std::vector<uint16_t> bits(H), gate_bits(4 * H);
  lstm_pointwise::forward(gates.data(), cell.data(), h.data(), copy.data(), prev.data(), bias.data(), H, false);
  lstm_pointwise::forward(g2.data(), c2.data(), h2.data(), rounded.data(), prev.data(), bias.data(), H, true);
  lstm_pointwise::forward(g3.data(), c2.data(), h2.data(), bits.data(), prev.data(), bias.data(), H);
  for (int k = 0; k < H; ++k) {
    EXPECT_EQ(copy[k], h[k]);
    EXPECT_EQ(h2[k], h[k]);
    EXPECT_EQ(rounded[k], round_to_bf16(h[k]));
    EXPECT_EQ(bits[k], to_bf16_bits(h[k]));
  }
  std::vector<float> dgates = gates, d_round = gates, d_bits = gates, dc1 = dc, dc2 = dc, dc3 = dc;
  std::vector<float> db1(4 * H, 0.0f), db2(4 * H, 0.0f), db3(4 * H, 0.0f);
  lstm_pointwise::backward(dgates.data(), dc1.data(), db1.data(), cell.data(), prev.data(), dh.data(), dh_rec.data(), H,
                           false);
  lstm_pointwise::backward(d_round.data(), dc2.data(), db2.data(), cell.data(), prev.data(), dh.data(), dh_rec.data(),
                           H, true);
  lstm_pointwise::backward(d_bits.data(), gate_bits.data(), dc3.data(), db3.data(), cell.data(), prev.data(), dh.data(),
                           dh_rec.data(), H);
  for (int j = 0; j < 4 * H; ++j) {
    EXPECT_EQ(d_round[j], round_to_bf16(dgates[j]));
    EXPECT_EQ(d_bits[j], round_to_bf16(dgates[j]));
    EXPECT_EQ(gate_bits[j], to_bf16_bits(dgates[j]));
    EXPECT_EQ(db2[j], dgates[j]);
    EXPECT_EQ(db3[j], dgates[j]);
  }
  for (int k = 0; k < H; ++k) EXPECT_EQ(dc2[k], dc1[k]);
}

}  // namespace
}  // namespace enhanced
