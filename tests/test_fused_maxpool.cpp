// The max-pool fused into the BiLSTM (bilstm_maxpool_forward and _backward, layers/cpu/lstm_pool.h)
// against the layers apart (bilstm_forward, maxpool_forward, maxpool_backward, bilstm_backward):
// pooled, argmax and every gradient bit for bit, in both pooling modes, in FP32, bf16 (emulated,
// and on the CPU's AVX512-BF16 where it has it) and double, with ties, rows of equal values, -0.0
// and +0.0, and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "enhanced/random.h"
#include "layers/cpu/bf16_gemm.h"
#include "layers/cpu/lstm_fp32.h"
#include "layers/cpu/lstm_pool.h"
#include "layers/cpu/lstm_steps.h"
#include "layers/lstm.h"
#include "layers/maxpool.h"
#include "layers/maxpool_steps.h"

namespace enhanced::testing {
namespace {

// "" when a and b hold the same bits, else where they first differ.
template <class T>
std::string bit_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0)
      return "element " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
  return "";
}

const char* name(PoolMode mode) { return mode == PoolMode::feature ? "feature" : "time"; }

// ---- The rules alone, on a given y (B, T, 2H) ----

// pooled, argmax (B, F) as the fused forward finds them: each direction's rows taken in the order
// its steps produce them (forward t = 0 up, reverse T - 1 down), feature mode's combined after.
template <class Real>
void fused_pool(std::vector<Real>& pooled, std::vector<int32_t>& argmax, const std::vector<Real>& y, int B, int T,
                int H, PoolMode mode) {
  std::vector<Real> reverse_max(static_cast<size_t>(B) * T);
  std::vector<int32_t> reverse_index(reverse_max.size());
  for (int direction = 0; direction < 2; ++direction) {
    lstm_pool::DirectionPool<Real> pool{pooled.data(), argmax.data(), mode, direction, T, H};
    if (mode == PoolMode::feature && direction == 1) pool.max = reverse_max.data(), pool.index = reverse_index.data();
    for (int step = 0; step < T; ++step) {
      const int t = lstm_steps::step_time(direction, step, T);
      for (int b = 0; b < B; ++b) pool.take(b, t, step, &y[(static_cast<size_t>(b) * T + t) * 2 * H + direction * H]);
    }
  }
  if (mode == PoolMode::feature)
    lstm_pool::combine_features(pooled.data(), argmax.data(), reverse_max.data(), reverse_index.data(),
                                reverse_max.size(), H);
}

// dy (B, T, 2H) as the fused backward reads it, row by row.
template <class Real>
std::vector<Real> fused_dy(const std::vector<int32_t>& argmax, const std::vector<Real>& dpooled, int B, int T, int H,
                           PoolMode mode) {
  std::vector<Real> dy(static_cast<size_t>(B) * T * 2 * H), row(H);
  for (int direction = 0; direction < 2; ++direction) {
    const lstm_pool::DirectionGradient<Real> gradient{row.data(), argmax.data(), dpooled.data(), mode, direction, T, H};
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        const Real* r = gradient.at(b, t);
        std::memcpy(&dy[(static_cast<size_t>(b) * T + t) * 2 * H + direction * H], r, H * sizeof(Real));
      }
  }
  return dy;
}

// y drawn from a few values, so that ties, -0.0 against +0.0, -inf, NaN and whole rows of one
// value are common.
template <class Real>
std::vector<Real> tied_values(Random& random, size_t n) {
  const Real nan = std::numeric_limits<Real>::quiet_NaN(), inf = std::numeric_limits<Real>::infinity();
  const Real values[] = {-inf, Real(-1), Real(-0.0), Real(0), Real(1), Real(2), nan};
  const uint64_t spread = random.below(7) + 1;  // some cases from the low values only: more rows all one value
  std::vector<Real> y(n);
  for (Real& v : y) v = values[random.below(spread)];
  return y;
}

template <class Real>
void check_rules(uint64_t seed) {
  Random random(seed);
  const int B = 1 + static_cast<int>(random.below(3)), T = 1 + static_cast<int>(random.below(6));
  const int H = 1 + static_cast<int>(random.below(20));
  const std::vector<Real> y = tied_values<Real>(random, static_cast<size_t>(B) * T * 2 * H);
  for (PoolMode mode : {PoolMode::feature, PoolMode::time}) {
    const size_t F = static_cast<size_t>(B) * (mode == PoolMode::feature ? T : 2 * H);
    std::vector<Real> pooled(F), fused(F), dpooled(F);
    std::vector<int32_t> argmax(F), fused_argmax(F);
    maxpool_forward(pooled.data(), argmax.data(), y.data(), B, T, 2 * H, mode);
    fused_pool(fused, fused_argmax, y, B, T, H, mode);
    const std::string where = std::string(name(mode)) + " seed " + std::to_string(seed) + " B " + std::to_string(B) +
                              " T " + std::to_string(T) + " H " + std::to_string(H);
    EXPECT_EQ(bit_difference(argmax, fused_argmax), "") << where;
    EXPECT_EQ(bit_difference(pooled, fused), "") << where;
    for (Real& d : dpooled) d = static_cast<Real>(random.uniform(-1, 1));
    std::vector<Real> dy(y.size());
    maxpool_backward(dy.data(), argmax.data(), dpooled.data(), B, T, 2 * H, mode);
    EXPECT_EQ(bit_difference(dy, fused_dy(argmax, dpooled, B, T, H, mode)), "") << where;
  }
}

TEST(FusedMaxPool, RulesMatchMaxPoolWithTiesZerosAndNaN) {
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    check_rules<float>(seed);
    check_rules<double>(seed);
  }
}

// The rule both pools share (maxpool_steps::first_maximum, vectorised over 16 lanes) against the
// strict scan it stands for, on rows of 1 to 70 elements (no whole block, blocks and a tail)
// drawn from tied values, -0.0 and +0.0, -inf and NaN.
template <class Real>
void check_first_maximum() {
  Random random(11);
  for (int trial = 0; trial < 4000; ++trial) {
    const int n = 1 + trial % 70;
    const std::vector<Real> row = tied_values<Real>(random, static_cast<size_t>(n));
    int strict = 0;
    for (int k = 1; k < n; ++k)
      if (row[k] > row[strict]) strict = k;
    ASSERT_EQ(maxpool_steps::first_maximum(row.data(), n), strict) << "n " << n << " trial " << trial;
  }
}

TEST(FusedMaxPool, FirstMaximumIsTheStrictScans) {
  check_first_maximum<float>();
  check_first_maximum<double>();
}

// The cases the random ones may miss, spelled out: B = 1, T = 3, H = 2 (channels 0, 1 forward).
TEST(FusedMaxPool, RulesMatchMaxPoolOnChosenRows) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::vector<float>> cases = {
      {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},          // every element equal: channel 0, t = 0
      {nan, 1, 2, 3, 0, nan, nan, nan, 5, 5, 5, 5},  // NaN first wins a row; a NaN half loses
      {0, 1, nan, 3, -0.0f, 0, 0, -0.0f, 0, 0, 0, 0},  // the reverse half's NaN first never wins
      {-0.0f, 0, 0, -0.0f, 0, -0.0f, -0.0f, 0, 1, 2, 2, 1},  // -0 and +0 tie: the first kept
      {1, 2, 3, nan, 1, 2, 3, 3, nan, nan, 3, 3},    // time: reverse ties and NaN at t = T - 1
  };
  for (const std::vector<float>& y : cases)
    for (PoolMode mode : {PoolMode::feature, PoolMode::time}) {
      const size_t F = mode == PoolMode::feature ? 3 : 4;
      std::vector<float> pooled(F), fused(F);
      std::vector<int32_t> argmax(F), fused_argmax(F);
      maxpool_forward(pooled.data(), argmax.data(), y.data(), 1, 3, 4, mode);
      fused_pool(fused, fused_argmax, y, 1, 3, 2, mode);
      EXPECT_EQ(bit_difference(argmax, fused_argmax), "") << name(mode) << " row " << &y - cases.data();
      EXPECT_EQ(bit_difference(pooled, fused), "") << name(mode) << " row " << &y - cases.data();
    }
}

// ---- The layer: fused against apart ----

template <class Real>
struct LayerCase {
  int B, T, D, H;
  std::vector<Real> x, w_ih, w_hh, b_ih, b_hh;
};

// Random weights; tied: one unit's weights for every unit, the same in both directions, and x
// symmetric in time, so that a direction's channels tie at every position and both directions'
// at the middle time (T odd): a whole row of one value. nan_at >= 0: x[nan_at] is NaN.
template <class Real>
LayerCase<Real> layer_case(uint64_t seed, bool tied, long nan_at = -1, int batch = 3, int seq_len = 5,
                           int hidden = 6) {
  Random random(seed);
  LayerCase<Real> c{batch, seq_len, 4, hidden, {}, {}, {}, {}, {}};
  auto fill = [&](std::vector<Real>& v, size_t n, double scale) {
    v.resize(n);
    for (Real& e : v) e = static_cast<Real>(random.uniform(-scale, scale));
  };
  fill(c.x, static_cast<size_t>(c.B) * c.T * c.D, 1.0);
  fill(c.w_ih, 8 * c.H * c.D, 0.5);
  fill(c.w_hh, 8 * c.H * c.H, 0.5);
  fill(c.b_ih, 8 * c.H, 0.5);
  fill(c.b_hh, 8 * c.H, 0.5);
  if (tied) {
    for (int row = 0; row < 8 * c.H; ++row) {  // row (direction, gate, unit) <- (0, gate, 0)
      const int source = (row % (4 * c.H)) / c.H * c.H;
      for (int d = 0; d < c.D; ++d) c.w_ih[row * c.D + d] = c.w_ih[source * c.D + d];
      for (int k = 0; k < c.H; ++k) c.w_hh[row * c.H + k] = c.w_hh[source * c.H + k];
      c.b_ih[row] = c.b_ih[source], c.b_hh[row] = c.b_hh[source];
    }
    for (int b = 0; b < c.B; ++b)
      for (int t = 0; t < c.T / 2; ++t)
        for (int d = 0; d < c.D; ++d)
          c.x[(static_cast<size_t>(b) * c.T + c.T - 1 - t) * c.D + d] =
              c.x[(static_cast<size_t>(b) * c.T + t) * c.D + d];
  }
  if (nan_at >= 0) c.x[nan_at] = std::numeric_limits<Real>::quiet_NaN();
  return c;
}

template <class Real>
struct LayerRun {
  std::vector<Real> y, pooled, dx, dw_ih, dw_hh, db_ih, db_hh;
  std::vector<int32_t> argmax;
};

// Forward and backward, fused or apart; with_y: the fused forward writes y as well.
template <class Real>
LayerRun<Real> run_layer(const LayerCase<Real>& c, PoolMode mode, Precision precision, int threads, bool fused,
                         bool with_y = false) {
  const size_t P = static_cast<size_t>(c.B) * c.T;
  const size_t F = c.B * static_cast<size_t>(mode == PoolMode::feature ? c.T : 2 * c.H);
  LayerRun<Real> r{std::vector<Real>(P * 2 * c.H), std::vector<Real>(F), std::vector<Real>(P * c.D),
                   std::vector<Real>(c.w_ih.size()), std::vector<Real>(c.w_hh.size()), std::vector<Real>(c.b_ih.size()),
                   std::vector<Real>(c.b_hh.size()), std::vector<int32_t>(F)};
  std::vector<Real> gates(P * 8 * c.H), cell(P * 2 * c.H), dy(P * 2 * c.H), dpooled(F);
  std::vector<Real> workspace(bilstm_workspace_size<Real>(c.B, c.T, c.D, c.H));
  Random random(99);
  for (Real& d : dpooled) d = static_cast<Real>(random.uniform(-1, 1));
  BiLstmState<Real> saved{gates.data(), cell.data(), workspace.data()};
  if (fused) {
    bilstm_maxpool_forward(r.pooled.data(), r.argmax.data(), with_y ? r.y.data() : nullptr, saved, c.x.data(),
                           c.w_ih.data(), c.w_hh.data(), c.b_ih.data(), c.b_hh.data(), c.B, c.T, c.D, c.H, mode,
                           threads, precision);
    bilstm_maxpool_backward(r.dx.data(), r.dw_ih.data(), r.dw_hh.data(), r.db_ih.data(), r.db_hh.data(), saved,
                            r.argmax.data(), dpooled.data(), c.x.data(), c.w_ih.data(), c.w_hh.data(), c.B, c.T, c.D,
                            c.H, mode, threads, precision);
  } else {
    bilstm_forward(r.y.data(), saved, c.x.data(), c.w_ih.data(), c.w_hh.data(), c.b_ih.data(), c.b_hh.data(), c.B,
                   c.T, c.D, c.H, threads, precision);
    maxpool_forward(r.pooled.data(), r.argmax.data(), r.y.data(), c.B, c.T, 2 * c.H, mode);
    maxpool_backward(dy.data(), r.argmax.data(), dpooled.data(), c.B, c.T, 2 * c.H, mode);
    bilstm_backward(r.dx.data(), r.dw_ih.data(), r.dw_hh.data(), r.db_ih.data(), r.db_hh.data(), saved, r.y.data(),
                    dy.data(), c.x.data(), c.w_ih.data(), c.w_hh.data(), c.B, c.T, c.D, c.H, threads, precision);
  }
  return r;
}

// An inference's forward (nothing saved), fused or apart: pooled and argmax.
template <class Real>
LayerRun<Real> run_inference(const LayerCase<Real>& c, PoolMode mode, Precision precision, bool fused,
                             int threads = 2) {
  LayerRun<Real> r = run_layer(c, mode, precision, 2, fused);  // sizes
  std::vector<Real> workspace(bilstm_workspace_size<Real>(c.B, c.T, c.D, c.H));
  BiLstmState<Real> nothing{nullptr, nullptr, workspace.data()};
  if (fused) {
    bilstm_maxpool_forward(r.pooled.data(), r.argmax.data(), static_cast<Real*>(nullptr), nothing, c.x.data(),
                           c.w_ih.data(), c.w_hh.data(), c.b_ih.data(), c.b_hh.data(), c.B, c.T, c.D, c.H, mode,
                           threads, precision);
  } else {
    bilstm_forward(r.y.data(), nothing, c.x.data(), c.w_ih.data(), c.w_hh.data(), c.b_ih.data(), c.b_hh.data(), c.B,
                   c.T, c.D, c.H, threads, precision);
    maxpool_forward(r.pooled.data(), r.argmax.data(), r.y.data(), c.B, c.T, 2 * c.H, mode);
  }
  return r;
}

template <class Real>
void expect_same_run(const LayerRun<Real>& apart, const LayerRun<Real>& fused, const std::string& where) {
  EXPECT_EQ(bit_difference(apart.argmax, fused.argmax), "") << where << ": argmax";
  EXPECT_EQ(bit_difference(apart.pooled, fused.pooled), "") << where << ": pooled";
  EXPECT_EQ(bit_difference(apart.dx, fused.dx), "") << where << ": dx";
  EXPECT_EQ(bit_difference(apart.dw_ih, fused.dw_ih), "") << where << ": dweight_ih";
  EXPECT_EQ(bit_difference(apart.dw_hh, fused.dw_hh), "") << where << ": dweight_hh";
  EXPECT_EQ(bit_difference(apart.db_ih, fused.db_ih), "") << where << ": dbias_ih";
  EXPECT_EQ(bit_difference(apart.db_hh, fused.db_hh), "") << where << ": dbias_hh";
}

template <class Real>
void check_layer(const LayerCase<Real>& c, Precision precision, const std::string& label) {
  for (PoolMode mode : {PoolMode::feature, PoolMode::time})
    for (int threads : {1, 2}) {
      const std::string where = label + " " + name(mode) + " " + to_string(precision) + " threads " +
                                std::to_string(threads);
      const LayerRun<Real> apart = run_layer(c, mode, precision, threads, false);
      expect_same_run(apart, run_layer(c, mode, precision, threads, true), where);
      const LayerRun<Real> with_y = run_layer(c, mode, precision, threads, true, true);
      expect_same_run(apart, with_y, where + " with y");
      EXPECT_EQ(bit_difference(apart.y, with_y.y), "") << where << ": y";
      const LayerRun<Real> inferred = run_inference(c, mode, precision, false);
      const LayerRun<Real> fused_inferred = run_inference(c, mode, precision, true);
      EXPECT_EQ(bit_difference(inferred.argmax, fused_inferred.argmax), "") << where << " inference: argmax";
      EXPECT_EQ(bit_difference(inferred.pooled, fused_inferred.pooled), "") << where << " inference: pooled";
    }
}

std::vector<Precision> float_precisions() {
  std::vector<Precision> out = {Precision::fp32, Precision::bf16_emulated};
  if (bf16_gemm::available()) out.push_back(Precision::bf16);
  return out;
}

TEST(FusedMaxPool, LayerMatchesApartInFloat) {
  for (Precision precision : float_precisions()) {
    check_layer(layer_case<float>(5, false), precision, "random");
    check_layer(layer_case<float>(6, true), precision, "tied");
    check_layer(layer_case<float>(7, false, 2 * 4 + 1), precision, "NaN at b 0, t 2");
  }
}

TEST(FusedMaxPool, LayerMatchesApartInDouble) {
  check_layer(layer_case<double>(5, false), Precision::fp32, "random");
  check_layer(layer_case<double>(6, true), Precision::fp32, "tied");
  check_layer(layer_case<double>(7, false, 2 * 4 + 1), Precision::fp32, "NaN at b 0, t 2");
}

// On four threads and more each direction's rows run in slices (FP32; the double and bf16 paths
// keep one slice a direction), then the bias gradient in parts of the gates and dx in parts of
// the positions: every result the same bits as on one thread. B = 37 cuts into up to 4 slices
// (of 8, 8, 8 and 13 rows), 4H = 24 into up to 3 parts; the forward alone (an inference) too.
// T = 5 and T = 136: the weight gradients' K = B T below and above OpenBLAS's blocks (there dW
// stays whole: OpenBLAS's small-matrix path would sum a part of its rows otherwise than the
// whole, lstm_fp32::weight_gradient_parts); in double also H = 16, whose dx (K = 8H = 128) BLAS
// sums otherwise when cut into other rows than the two halves.
template <class Real>
void check_thread_counts(const LayerCase<Real>& c, Precision precision) {
  openblas_set_num_threads(1);  // as configure_cpu_threads runs it: a threaded OpenBLAS sums otherwise
  for (PoolMode mode : {PoolMode::feature, PoolMode::time}) {
    const LayerRun<Real> one = run_layer(c, mode, precision, 1, true, true);
    const LayerRun<Real> one_apart = run_layer(c, mode, precision, 1, false);
    for (int threads : {2, 3, 4, 6, 9}) {
      const std::string where = std::string(name(mode)) + " " + to_string(precision) + " threads " +
                                std::to_string(threads);
      const LayerRun<Real> fused = run_layer(c, mode, precision, threads, true, true);
      expect_same_run(one, fused, where);
      EXPECT_EQ(bit_difference(one.y, fused.y), "") << where << ": y";
      expect_same_run(one_apart, run_layer(c, mode, precision, threads, false), where + " apart");
      for (bool fused_inference : {true, false}) {
        const LayerRun<Real> inferred = run_inference(c, mode, precision, fused_inference, threads);
        EXPECT_EQ(bit_difference(one.argmax, inferred.argmax), "") << where << " inference: argmax";
        EXPECT_EQ(bit_difference(one.pooled, inferred.pooled), "") << where << " inference: pooled";
      }
    }
  }
}

TEST(FusedMaxPool, EveryThreadCountGivesTheSameBitsInFloat) {
  for (Precision precision : float_precisions())
    for (int seq_len : {5, 136}) check_thread_counts(layer_case<float>(11, false, -1, 37, seq_len), precision);
}

// The weight gradients in parts of their rows, one OpenBLAS GEMM each (FP32 and the bf16
// reference): H = 32 and T = 500 put every part (4H = 128 rows in up to 4) far above OpenBLAS's
// small-matrix path; the cases above keep dW whole (it would sum otherwise there).
TEST(FusedMaxPool, EveryThreadCountGivesTheSameBitsWithTheWeightGradientsCut) {
  const LayerCase<float> c = layer_case<float>(13, false, -1, 37, 500, 32);
  const int gate_rows = 4 * c.H, columns = c.D + c.H, positions = c.B * c.T;
  ASSERT_EQ(lstm_fp32::weight_gradient_parts(9, gate_rows, columns, positions), 4);
  ASSERT_EQ(lstm_fp32::weight_gradient_parts(6, gate_rows, columns, positions), 3);
  ASSERT_EQ(lstm_fp32::weight_gradient_parts(3, gate_rows, columns, positions), 1);
  ASSERT_EQ(lstm_fp32::weight_gradient_parts(9, 4 * 6, 4 + 6, 37 * 136), 1);  // the cases above
  for (Precision precision : {Precision::fp32, Precision::bf16_emulated}) check_thread_counts(c, precision);
}

TEST(FusedMaxPool, EveryThreadCountGivesTheSameBitsInDouble) {
  for (int seq_len : {5, 136}) check_thread_counts(layer_case<double>(11, false, -1, 37, seq_len), Precision::fp32);
  check_thread_counts(layer_case<double>(12, false, -1, 37, 136, 16), Precision::fp32);
}

// The tied case really ties: a direction's channels are equal at every position, and at the
// middle time the whole row of 2H is one value (argmax 0); in time mode both halves agree.
TEST(FusedMaxPool, TiedCaseHasWholeRowsOfOneValue) {
  const LayerCase<float> c = layer_case<float>(6, true);
  const LayerRun<float> run = run_layer(c, PoolMode::feature, Precision::fp32, 2, false);
  const int C = 2 * c.H, middle = c.T / 2;
  for (int b = 0; b < c.B; ++b) {
    const float* row = &run.y[(static_cast<size_t>(b) * c.T + middle) * C];
    for (int k = 1; k < C; ++k) EXPECT_EQ(std::memcmp(row, row + k, sizeof(float)), 0) << "b " << b << " k " << k;
    EXPECT_EQ(run.argmax[static_cast<size_t>(b) * c.T + middle], 0);
  }
}

}  // namespace
}  // namespace enhanced::testing
