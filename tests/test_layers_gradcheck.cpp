// Every layer's backward against central finite differences in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "gradcheck.h"
#include "layers/dense.h"
#include "layers/embedding_blend.h"
#include "layers/lstm.h"
#include "layers/maxpool.h"
#include "layers/softmax_xent.h"

namespace enhanced {
namespace {

using testing::check_tensor;
using testing::random_batch;
using testing::random_vector;

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

class BlendGradient : public ::testing::TestWithParam<BlendMode> {};

TEST_P(BlendGradient, MatchesFiniteDifferences) {
  Random random(11);
  const int B = 3, T = 4, V = 13, D = 5;
  const Batch batch = random_batch(B, T, V, 2, random);
  const int P = B * T;
  std::vector<double> table = random_vector(static_cast<size_t>(V) * D, random);
  const std::vector<double> projection = random_vector(static_cast<size_t>(P) * D, random);
  std::vector<double> x(static_cast<size_t>(P) * D);
  auto loss = [&] {
    embedding_blend_forward(x.data(), batch.identifier_offsets.data(), batch.identifier_ids.data(),
                            batch.cur_word_ids.data(), table.data(), P, D, GetParam());
    return dot(x, projection);
  };
  std::vector<double> dtable(table.size(), 0.0);
  embedding_blend_backward(dtable.data(), projection.data(), batch.identifier_offsets.data(),
                           batch.identifier_ids.data(), batch.cur_word_ids.data(), P, D, GetParam());
  check_tensor(loss, table.data(), dtable.data(), table.size(), "dE", random);
  // Rows not named in the batch get exactly zero.
  std::vector<int32_t> rows;
  embedding_touched_rows(rows, batch.identifier_ids.data(), static_cast<int64_t>(batch.identifier_ids.size()),
                         batch.cur_word_ids.data(), P);
  for (int v = 0; v < V; ++v) {
    if (std::binary_search(rows.begin(), rows.end(), v)) continue;
    for (int d = 0; d < D; ++d) EXPECT_EQ(dtable[static_cast<size_t>(v) * D + d], 0.0) << "row " << v;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, BlendGradient, ::testing::Values(BlendMode::mean, BlendMode::scalar_mean));

TEST(Blend, EmptyIdentifierCopiesCurWordAndMeanModesDiffer) {
  const int D = 2;
  const std::vector<double> table = {1, 2, 3, 5, 10, 20};  // rows 0, 1, 2
  const std::vector<int32_t> offsets = {0, 0, 2}, ids = {1, 2}, cur = {0, 0};
  std::vector<double> x(4);
  embedding_blend_forward(x.data(), offsets.data(), ids.data(), cur.data(), table.data(), 2, D, BlendMode::mean);
  EXPECT_EQ(x, (std::vector<double>{1, 2, 0.5 * 6.5 + 0.5, 0.5 * 12.5 + 1}));
  embedding_blend_forward(x.data(), offsets.data(), ids.data(), cur.data(), table.data(), 2, D,
                          BlendMode::scalar_mean);
  EXPECT_EQ(x, (std::vector<double>{1, 2, 0.5 * 9.5 + 0.5, 0.5 * 9.5 + 1}));
}

struct LstmShape {
  int batch, seq_len, input, hidden, threads;
};

class LstmGradient : public ::testing::TestWithParam<LstmShape> {};

TEST_P(LstmGradient, MatchesFiniteDifferences) {
  const auto [B, T, D, H, threads] = GetParam();
  Random random(static_cast<uint64_t>(B * 1000 + T * 100 + H));
  const size_t P = static_cast<size_t>(B) * T;
  std::vector<double> x = random_vector(P * D, random);
  std::vector<double> w_ih = random_vector(8 * static_cast<size_t>(H) * D, random, 0.5);
  std::vector<double> w_hh = random_vector(8 * static_cast<size_t>(H) * H, random, 0.5);
  std::vector<double> b_ih = random_vector(8 * static_cast<size_t>(H), random, 0.5);
  std::vector<double> b_hh = random_vector(8 * static_cast<size_t>(H), random, 0.5);
  const std::vector<double> projection = random_vector(P * 2 * H, random);
  std::vector<double> y(P * 2 * H), gates(P * 8 * H), cell(P * 2 * H);
  std::vector<double> workspace(bilstm_workspace_size<double>(B, T, D, H));
  BiLstmState<double> saved{gates.data(), cell.data(), workspace.data()};
  auto loss = [&] {
    bilstm_forward(y.data(), saved, x.data(), w_ih.data(), w_hh.data(), b_ih.data(), b_hh.data(), B, T, D, H, threads);
    return dot(y, projection);
  };
  loss();
  std::vector<double> dx(x.size()), dw_ih(w_ih.size(), 0.0), dw_hh(w_hh.size(), 0.0), db_ih(b_ih.size(), 0.0),
      db_hh(b_hh.size(), 0.0);
  bilstm_backward(dx.data(), dw_ih.data(), dw_hh.data(), db_ih.data(), db_hh.data(), saved, y.data(), projection.data(),
                  x.data(), w_ih.data(), w_hh.data(), B, T, D, H, threads);
  check_tensor(loss, x.data(), dx.data(), x.size(), "dx", random);
  check_tensor(loss, w_ih.data(), dw_ih.data(), w_ih.size(), "dW_ih", random);
  check_tensor(loss, w_hh.data(), dw_hh.data(), w_hh.size(), "dW_hh", random);
  check_tensor(loss, b_ih.data(), db_ih.data(), b_ih.size(), "db_ih", random);
  check_tensor(loss, b_hh.data(), db_hh.data(), b_hh.size(), "db_hh", random);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LstmGradient,
                         ::testing::Values(LstmShape{2, 5, 3, 4, 1}, LstmShape{2, 5, 3, 4, 2},
                                           LstmShape{1, 1, 2, 3, 1}, LstmShape{3, 4, 2, 1, 2},
                                           LstmShape{1, 7, 4, 5, 2}));

TEST(Lstm, ThreadedEqualsSerialBitForBit) {
  const int B = 4, T = 9, D = 6, H = 8;
  Random random(5);
  const size_t P = static_cast<size_t>(B) * T;
  const std::vector<float> x(P * D, 0.25f);
  std::vector<float> w_ih(8 * H * D), w_hh(8 * H * H), b(8 * H);
  for (float& v : w_ih) v = static_cast<float>(random.uniform(-0.3, 0.3));
  for (float& v : w_hh) v = static_cast<float>(random.uniform(-0.3, 0.3));
  for (float& v : b) v = static_cast<float>(random.uniform(-0.3, 0.3));
  std::vector<float> y1(P * 2 * H), y2(P * 2 * H), gates(P * 8 * H), cell(P * 2 * H);
  std::vector<float> workspace(bilstm_workspace_size<float>(B, T, D, H));
  BiLstmState<float> saved{gates.data(), cell.data(), workspace.data()};
  bilstm_forward(y1.data(), saved, x.data(), w_ih.data(), w_hh.data(), b.data(), b.data(), B, T, D, H, 1);
  bilstm_forward(y2.data(), saved, x.data(), w_ih.data(), w_hh.data(), b.data(), b.data(), B, T, D, H, 2);
  EXPECT_EQ(y1, y2);
}

class PoolGradient : public ::testing::TestWithParam<PoolMode> {};

TEST_P(PoolGradient, MatchesFiniteDifferences) {
  Random random(3);
  const int B = 2, T = 5, C = 6;
  const PoolMode mode = GetParam();
  const size_t F = static_cast<size_t>(B) * (mode == PoolMode::feature ? T : C);
  std::vector<double> y = random_vector(static_cast<size_t>(B) * T * C, random);
  const std::vector<double> projection = random_vector(F, random);
  std::vector<double> pooled(F);
  std::vector<int32_t> argmax(F);
  auto loss = [&] {
    maxpool_forward(pooled.data(), argmax.data(), y.data(), B, T, C, mode);
    return dot(pooled, projection);
  };
  loss();
  std::vector<double> dy(y.size(), 7.0);  // overwritten, not accumulated
  maxpool_backward(dy.data(), argmax.data(), projection.data(), B, T, C, mode);
  check_tensor(loss, y.data(), dy.data(), y.size(), "dy", random);
}

TEST_P(PoolGradient, TiesSendTheGradientToTheFirstMaximum) {
  const PoolMode mode = GetParam();
  const int B = 1, T = 3, C = 2;
  // Every element equal: feature pooling picks k = 0 at each t, time pooling t = 0 for each k.
  const std::vector<double> y(6, 1.5);
  const size_t F = mode == PoolMode::feature ? T : C;
  std::vector<double> pooled(F), dpooled(F, 1.0), dy(6);
  std::vector<int32_t> argmax(F);
  maxpool_forward(pooled.data(), argmax.data(), y.data(), B, T, C, mode);
  maxpool_backward(dy.data(), argmax.data(), dpooled.data(), B, T, C, mode);
  const std::vector<double> expected =
      mode == PoolMode::feature ? std::vector<double>{1, 0, 1, 0, 1, 0} : std::vector<double>{1, 1, 0, 0, 0, 0};
  EXPECT_EQ(dy, expected);
}

// The vectorised scan gives the strict scalar scan's answer ("if (row[k] > row[best]) best = k")
// on rows built to trip it: few distinct values (ties), -0.0 beside +0.0, NaNs anywhere (first
// included), at the model's width and at one that leaves a tail.
TEST_P(PoolGradient, EqualsTheStrictScanWithTiesSignedZerosAndNaNs) {
  const PoolMode mode = GetParam();
  Random random(11);
  const float values[] = {-1.0f, -0.0f, 0.0f, 0.5f, 0.5f, 2.0f, std::nanf("")};
  for (const int C : {256, 37}) {
    const int B = 3, T = 40;
    std::vector<float> y(static_cast<size_t>(B) * T * C);
    for (float& v : y) v = values[random.below(random.uniform() < 0.02 ? 7 : 6)];
    for (size_t p = 3; p < static_cast<size_t>(B) * T; p += 7) y[p * C] = std::nanf("");  // a NaN first in feature rows
    for (size_t k = 2; k < static_cast<size_t>(C); k += 7) y[k] = std::nanf("");            // and in time columns
    const size_t F = static_cast<size_t>(B) * (mode == PoolMode::feature ? T : C);
    std::vector<float> pooled(F);
    std::vector<int32_t> argmax(F);
    maxpool_forward(pooled.data(), argmax.data(), y.data(), B, T, C, mode);
    const int items = mode == PoolMode::feature ? T : C, length = mode == PoolMode::feature ? C : T;
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < items; ++i) {
        auto at = [&](int j) -> const float& {  // element j of item i's scan
          return mode == PoolMode::feature ? y[(static_cast<size_t>(b) * T + i) * C + j]
                                           : y[(static_cast<size_t>(b) * T + j) * C + i];
        };
        int best = 0;
        for (int j = 1; j < length; ++j)
          if (at(j) > at(best)) best = j;
        const size_t f = static_cast<size_t>(b) * items + i;
        ASSERT_EQ(argmax[f], best) << "C=" << C << " b=" << b << " item " << i;
        ASSERT_EQ(std::memcmp(&pooled[f], &at(best), sizeof(float)), 0) << "the same bits, -0.0 and NaN included";
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, PoolGradient, ::testing::Values(PoolMode::feature, PoolMode::time));

TEST(Dense, MatchesFiniteDifferences) {
  Random random(4);
  const int B = 3, F = 7, L = 4;
  std::vector<double> in = random_vector(B * F, random), w = random_vector(L * F, random), b = random_vector(L, random);
  const std::vector<double> projection = random_vector(B * L, random);
  std::vector<double> out(B * L);
  auto loss = [&] {
    dense_forward(out.data(), in.data(), w.data(), b.data(), B, F, L);
    return dot(out, projection);
  };
  std::vector<double> din(in.size()), dw(w.size(), 0.0), db(b.size(), 0.0);
  dense_backward(din.data(), dw.data(), db.data(), projection.data(), in.data(), w.data(), B, F, L);
  check_tensor(loss, in.data(), din.data(), in.size(), "din", random);
  check_tensor(loss, w.data(), dw.data(), w.size(), "dW", random);
  check_tensor(loss, b.data(), db.data(), b.size(), "db", random);
}

TEST(SoftmaxCrossEntropy, MatchesFiniteDifferencesAndIsStable) {
  Random random(6);
  const int B = 4, L = 5;
  std::vector<double> logits = random_vector(B * L, random, 3.0);
  const std::vector<int32_t> labels = {0, 4, 2, 2};
  // The mean loss alone, as the gradient check's objective.
  const auto mean_loss = [](const auto* values, const int32_t* targets, int batch, int labels_count) {
    using Real = std::remove_cv_t<std::remove_pointer_t<decltype(values)>>;
    double out = 0;
    softmax_cross_entropy<Real>(nullptr, nullptr, &out, values, targets, nullptr, batch, labels_count);
    return out;
  };
  auto loss = [&] { return mean_loss(logits.data(), labels.data(), B, L); };
  std::vector<double> dlogits(logits.size());
  double unused = 0;
  softmax_cross_entropy(dlogits.data(), static_cast<double*>(nullptr), &unused, logits.data(), labels.data(), nullptr,
                        B, L);
  check_tensor(loss, logits.data(), dlogits.data(), logits.size(), "dlogits", random);
  // Huge logits stay finite: loss of a confident right answer ~ 0, of a wrong one ~ the gap.
  const std::vector<float> big = {1000.0f, -1000.0f};
  const std::vector<int32_t> right = {0}, wrong = {1};
  EXPECT_NEAR(mean_loss(big.data(), right.data(), 1, 2), 0.0, 1e-6);
  EXPECT_NEAR(mean_loss(big.data(), wrong.data(), 1, 2), 2000.0, 1e-3);
}

// torch's CrossEntropyLoss(weight=w): sum_b w[y_b] * nll_b / sum_b w[y_b], its gradient against
// central differences in double; a batch whose weights sum to 0 has loss 0 and no gradient.
TEST(SoftmaxCrossEntropy, ClassWeightedMatchesFiniteDifferencesAndTheDefinition) {
  Random random(8);
  const int B = 5, L = 4;
  std::vector<double> logits = random_vector(B * L, random, 3.0);
  const std::vector<int32_t> labels = {0, 3, 2, 2, 1};
  const std::vector<float> weights = {0.5f, 2.0f, 1.25f, 0.0f};  // class 3 weighs nothing
  auto loss = [&] {
    double out = 0;
    softmax_cross_entropy<double>(nullptr, nullptr, &out, logits.data(), labels.data(), weights.data(), B, L);
    return out;
  };
  std::vector<double> dlogits(logits.size()), losses(B);
  double weighted = 0;
  softmax_cross_entropy(dlogits.data(), losses.data(), &weighted, logits.data(), labels.data(), weights.data(), B, L);
  check_tensor(loss, logits.data(), dlogits.data(), logits.size(), "dlogits", random);
  double numerator = 0, denominator = 0;
  for (int b = 0; b < B; ++b) {
    numerator += weights[labels[b]] * losses[b];  // sample_losses stay unweighted
    denominator += weights[labels[b]];
  }
  EXPECT_NEAR(weighted, numerator / denominator, 1e-12);
  for (int l = 0; l < L; ++l) EXPECT_EQ(dlogits[1 * L + l], 0.0) << "a sample of weight 0 has no gradient";
  // Equal weights are the unweighted loss.
  const std::vector<float> ones(L, 3.0f);
  double equal = 0, plain = 0;
  softmax_cross_entropy<double>(nullptr, nullptr, &equal, logits.data(), labels.data(), ones.data(), B, L);
  softmax_cross_entropy<double>(nullptr, nullptr, &plain, logits.data(), labels.data(), nullptr, B, L);
  EXPECT_NEAR(equal, plain, 1e-12);
  // Only weight-0 samples: loss 0, zero gradient (torch: 0 / 0).
  const std::vector<int32_t> nothing = {3, 3, 3, 3, 3};
  double zero = 1;
  softmax_cross_entropy(dlogits.data(), losses.data(), &zero, logits.data(), nothing.data(), weights.data(), B, L);
  EXPECT_EQ(zero, 0.0);
  for (double g : dlogits) EXPECT_EQ(g, 0.0);
}

// Keras' class_weight (ClassWeightMean::batch): per-sample weights w[y_b] under the
// "sum_over_batch_size" reduction, sum_b w[y_b] * nll_b / B; its gradient against central
// differences in double, its value against that formula, and, for a batch whose weights do not
// sum to B, different from torch's.
TEST(SoftmaxCrossEntropy, KerasBatchMeanMatchesFiniteDifferencesAndTheDefinition) {
  Random random(9);
  const int B = 5, L = 4;
  std::vector<double> logits = random_vector(B * L, random, 3.0);
  const std::vector<int32_t> labels = {0, 3, 2, 2, 1};
  const std::vector<float> weights = {0.5f, 2.0f, 1.5f, 0.0f};  // class 3 weighs nothing; they sum to 5.5
  const auto batch_mean = ClassWeightMean::batch;
  auto loss = [&] {
    double out = 0;
    softmax_cross_entropy<double>(nullptr, nullptr, &out, logits.data(), labels.data(), weights.data(), B, L, nullptr,
                                  batch_mean);
    return out;
  };
  std::vector<double> dlogits(logits.size()), losses(B);
  double keras = 0;
  softmax_cross_entropy(dlogits.data(), losses.data(), &keras, logits.data(), labels.data(), weights.data(), B, L,
                        nullptr, batch_mean);
  check_tensor(loss, logits.data(), dlogits.data(), logits.size(), "dlogits", random);
  double numerator = 0, weight_sum = 0;
  for (int b = 0; b < B; ++b) {
    numerator += weights[labels[b]] * losses[b];
    weight_sum += weights[labels[b]];
  }
  ASSERT_NE(weight_sum, static_cast<double>(B)) << "the batch must tell the two denominators apart";
  EXPECT_NEAR(keras, numerator / B, 1e-12);
  double torch = 0;
  softmax_cross_entropy<double>(nullptr, nullptr, &torch, logits.data(), labels.data(), weights.data(), B, L);
  EXPECT_NEAR(torch, numerator / weight_sum, 1e-12) << "ClassWeightMean::weights stays the default";
  // Gradient rows: w[y_b] * (softmax - onehot) / B, straight from the softmax.
  std::vector<double> probabilities(logits.size());
  softmax_forward(probabilities.data(), logits.data(), B, L);
  for (int b = 0; b < B; ++b)
    for (int l = 0; l < L; ++l) {
      const double onehot = l == labels[b] ? 1.0 : 0.0;
      EXPECT_NEAR(dlogits[b * L + l], weights[labels[b]] * (probabilities[b * L + l] - onehot) / B, 1e-12)
          << "row " << b << " label " << l;
    }
  // Weights of 1 are the unweighted mean (the denominator is B either way).
  const std::vector<float> ones(L, 1.0f);
  double unit = 0, plain = 0;
  softmax_cross_entropy<double>(nullptr, nullptr, &unit, logits.data(), labels.data(), ones.data(), B, L, nullptr,
                                batch_mean);
  softmax_cross_entropy<double>(nullptr, nullptr, &plain, logits.data(), labels.data(), nullptr, B, L);
  EXPECT_NEAR(unit, plain, 1e-12);
  // Only weight-0 samples: loss 0 and no gradient, as Keras' 0 / B.
  const std::vector<int32_t> nothing = {3, 3, 3, 3, 3};
  double zero = 1;
  softmax_cross_entropy(dlogits.data(), losses.data(), &zero, logits.data(), nothing.data(), weights.data(), B, L,
                        nullptr, batch_mean);
  EXPECT_EQ(zero, 0.0);
  for (double g : dlogits) EXPECT_EQ(g, 0.0);
}

}  // namespace
}  // namespace enhanced
