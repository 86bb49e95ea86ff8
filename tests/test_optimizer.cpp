// Optimizer semantics: dense vs lazy embedding updates, SGD momentum, clipping, non-finite guard,
// a learning rate per step.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <limits>
#include <memory>

#include "cuda_test_util.h"
#include "enhanced/common.h"
#include "enhanced/engine.h"
#include "layers/optimizer.h"

namespace enhanced {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 6;
  c.embedding_dim = 2;
  c.hidden = 1;
  c.seq_len = 3;
  c.num_labels = 2;
  return c;
}

// Two Adam steps: the first touches rows {1, 4}, the second only {4}. With dense semantics row 1
// keeps moving on its decaying moments; with lazy updates it stays where the first step left it.
TEST(Optimizer, LazyAdamLeavesRowsOutsideTheBatchAloneDenseAdamDoesNot) {
  const ModelConfig c = small_config();
  for (const bool lazy : {false, true}) {
    OptimizerConfig oc;
    oc.kind = OptimizerKind::adam;
    oc.learning_rate = 0.1f;
    oc.lazy_embedding = lazy;
    OptimizerState optimizer(oc, c);
    ParameterBuffer<float> params(c), grads(c);
    grads.embedding[1 * 2] = 1.0f;
    grads.embedding[4 * 2 + 1] = -2.0f;
    optimizer_step(params, optimizer, grads, {1, 4}, optimizer.config.learning_rate);
    const float row1_after_first = params.embedding[1 * 2];
    EXPECT_LT(row1_after_first, 0.0f);
    EXPECT_EQ(params.embedding[0], 0.0f) << "a row never touched has zero moments either way";
    zero_gradients(grads, {1, 4});
    grads.embedding[4 * 2 + 1] = -2.0f;
    optimizer_step(params, optimizer, grads, {4}, optimizer.config.learning_rate);
    if (lazy) EXPECT_EQ(params.embedding[1 * 2], row1_after_first);
    else EXPECT_LT(params.embedding[1 * 2], row1_after_first);
  }
}

TEST(Optimizer, SgdMomentumFollowsPyTorch) {
  const ModelConfig c = small_config();
  OptimizerConfig oc;
  oc.kind = OptimizerKind::sgd;
  oc.learning_rate = 0.5f;
  oc.momentum = 0.9f;
  OptimizerState optimizer(oc, c);
  ParameterBuffer<float> params(c), grads(c);
  grads.dense_bias[0] = 1.0f;
  optimizer_step(params, optimizer, grads, {}, optimizer.config.learning_rate);  // v = g = 1, w = -0.5
  optimizer_step(params, optimizer, grads, {}, optimizer.config.learning_rate);  // v = 1.9, w = -0.5 - 0.95
  EXPECT_FLOAT_EQ(params.dense_bias[0], -1.45f);
}

TEST(Optimizer, ClippingScalesTheWholeGradientToTheNorm) {
  const ModelConfig c = small_config();
  OptimizerConfig oc;
  oc.kind = OptimizerKind::sgd;
  oc.learning_rate = 1.0f;
  oc.clip_norm = 1.0f;
  OptimizerState optimizer(oc, c);
  ParameterBuffer<float> params(c), grads(c);
  grads.dense_bias[0] = 30.0f;
  grads.embedding[3 * 2] = 40.0f;  // norm 50
  const double norm = optimizer_step(params, optimizer, grads, {3}, optimizer.config.learning_rate);
  EXPECT_DOUBLE_EQ(norm, 50.0);
  EXPECT_NEAR(params.dense_bias[0], -0.6f, 1e-6f);
  EXPECT_NEAR(params.embedding[3 * 2], -0.8f, 1e-6f);
}

TEST(Optimizer, NonFiniteGradientIsReturnedAndLeavesWeightsUnchanged) {
  const ModelConfig c = small_config();
  OptimizerState optimizer(OptimizerConfig{}, c);
  ParameterBuffer<float> params(c), grads(c);
  params.dense_bias[1] = 0.25f;
  const ParameterBuffer<float> before = params;
  grads.dense_weight[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(optimizer_step(params, optimizer, grads, {}, optimizer.config.learning_rate)));
  EXPECT_TRUE(std::equal(params.data.begin(), params.data.end(), before.data.begin()));
  EXPECT_EQ(optimizer.steps, 0);
}

// SGD's L2 weight decay (torch.optim.SGD(weight_decay=)) on one step, by hand: w -= lr * (g + wd * w).
// The table decays only with weight_decay_embedding; then plain SGD visits (and decays) every row,
// except with lazy updates, where only the batch's rows move.
TEST(Optimizer, SgdWeightDecayByHandWithAndWithoutTheTable) {
  const ModelConfig c = small_config();
  struct Want {
    bool table, lazy;
    double untouched_row, touched_row;
  };
  const double lr = 0.1, wd = 0.01;
  const double decayed_touched = 0.25 - lr * (2 + wd * 0.25);
  const Want wants[] = {Want{false, false, 0.5, 0.25 - lr * 2}, Want{true, false, 0.5 - lr * wd * 0.5, decayed_touched},
                        Want{true, true, 0.5, decayed_touched}};
  for (const Want& want : wants) {
    OptimizerConfig oc;
    oc.kind = OptimizerKind::sgd;
    oc.learning_rate = static_cast<float>(lr);
    oc.weight_decay = static_cast<float>(wd);
    oc.weight_decay_embedding = want.table;
    oc.lazy_embedding = want.lazy;
    EXPECT_EQ(rows_only(oc), !want.table || want.lazy);
    OptimizerState optimizer(oc, c);
    ParameterBuffer<float> params(c), grads(c);
    params.dense_bias[0] = 0.5f;
    grads.dense_bias[0] = 1.0f;
    params.embedding[2 * 2] = 0.5f;   // row 2: not in the batch
    params.embedding[1 * 2] = 0.25f;  // row 1: in the batch
    grads.embedding[1 * 2] = 2.0f;
    optimizer_step(params, optimizer, grads, {1}, oc.learning_rate);
    EXPECT_FLOAT_EQ(params.dense_bias[0], static_cast<float>(0.5 - lr * (1 + wd * 0.5)));
    EXPECT_FLOAT_EQ(params.embedding[2 * 2], static_cast<float>(want.untouched_row)) << want.table << want.lazy;
    EXPECT_FLOAT_EQ(params.embedding[1 * 2], static_cast<float>(want.touched_row)) << want.table << want.lazy;
    EXPECT_EQ(params.embedding[0], 0.0f) << "zero weights decay to zero";
  }
}

// Momentum on the decayed, clipped gradient (torch: clip_grad_norm_, then d = g + wd * w, then
// v = mu * v + d), three steps by hand in double.
TEST(Optimizer, SgdMomentumWeightDecayAfterClippingByHand) {
  const ModelConfig c = small_config();
  OptimizerConfig oc;
  oc.kind = OptimizerKind::sgd;
  oc.learning_rate = 0.1f;
  oc.momentum = 0.9f;
  oc.weight_decay = 0.1f;
  oc.clip_norm = 0.5f;
  OptimizerState optimizer(oc, c);
  ParameterBuffer<float> params(c), grads(c);
  params.dense_weight[1] = 0.5f;
  grads.dense_weight[1] = 1.0f;  // the only gradient: norm 1, clipped to 0.5
  double w = 0.5, v = 0;
  for (int step = 1; step <= 3; ++step) {
    optimizer_step(params, optimizer, grads, {}, oc.learning_rate);
    const double d = 1.0 * (0.5 / (1.0 + 1e-6)) + 0.1 * w;
    v = step == 1 ? d : 0.9 * v + d;
    w -= 0.1 * v;
    EXPECT_NEAR(params.dense_weight[1], w, 1e-6) << "step " << step;
  }
}

// AdamW (torch.optim.AdamW): w *= 1 - lr * wd, then the Adam update, three steps by hand in
// double; a table row outside the batch decays only with weight_decay_embedding and dense updates.
TEST(Optimizer, AdamWeightDecayIsDecoupledLikeAdamW) {
  const ModelConfig c = small_config();
  for (const bool table : {false, true}) {
    OptimizerConfig oc;
    oc.learning_rate = 0.1f;
    oc.weight_decay = 0.2f;
    oc.weight_decay_embedding = table;
    OptimizerState optimizer(oc, c);
    ParameterBuffer<float> params(c), grads(c);
    params.dense_bias[1] = 0.5f;
    grads.dense_bias[1] = -1.0f;
    params.embedding[3 * 2 + 1] = 0.5f;  // never in a batch
    double w = 0.5, m = 0, v = 0, row = 0.5;
    for (int t = 1; t <= 3; ++t) {
      optimizer_step(params, optimizer, grads, {}, oc.learning_rate);
      const double b1 = oc.beta1, b2 = oc.beta2, g = -1.0;
      w *= 1 - 0.1 * 0.2;
      if (table) row *= 1 - 0.1 * 0.2;
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
      const double step_size = 0.1 / (1 - std::pow(b1, t));
      w -= step_size * m / (std::sqrt(v) / std::sqrt(1 - std::pow(b2, t)) + oc.epsilon);
      EXPECT_NEAR(params.dense_bias[1], w, 1e-6) << "step " << t;
      EXPECT_NEAR(params.embedding[3 * 2 + 1], row, 1e-7) << "step " << t << ", table decays: " << table;
    }
  }
}

TEST(Optimizer, RowsOnlyRule) {
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  EXPECT_TRUE(rows_only(sgd)) << "plain SGD moves only rows with a gradient";
  sgd.weight_decay = 0.1f;
  EXPECT_TRUE(rows_only(sgd)) << "the table does not decay by default";
  sgd.weight_decay_embedding = true;
  EXPECT_FALSE(rows_only(sgd)) << "a decaying table moves every row";
  sgd.lazy_embedding = true;
  EXPECT_TRUE(rows_only(sgd)) << "lazy: only the batch's rows, decay included";
  OptimizerConfig momentum;
  momentum.kind = OptimizerKind::sgd;
  momentum.momentum = 0.9f;
  EXPECT_FALSE(rows_only(momentum));
  OptimizerConfig adam;
  adam.weight_decay = 0.1f;
  EXPECT_FALSE(rows_only(adam));
  adam.lazy_embedding = true;
  EXPECT_TRUE(rows_only(adam));
  OptimizerConfig bad;
  bad.weight_decay = -1e-3f;
  EXPECT_THROW(bad.validate(), Error);
}

// A run with its own rate at each step (a schedule) equals, bit for bit, the same steps run one
// at a time by engines whose config's learning_rate is that step's rate, carrying the weights,
// moments and step count from one to the next.
TEST(Optimizer, PerStepLearningRateEqualsConfigRateStepByStep) {
  const ModelConfig config = testing::small_config(BlendMode::mean, PoolMode::feature, 3);
  const std::vector<Batch> batches = testing::training_batches(config, 6, 5);
  const float rates[] = {1e-3f, 3e-2f, 1e-4f, 7e-3f, 2e-2f, 5e-4f};
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.momentum = 0.9f;
  OptimizerConfig adam;
  OptimizerConfig lazy = adam;
  lazy.lazy_embedding = true;
  for (const OptimizerConfig& base : {sgd, adam, lazy}) {
    ParameterBuffer<float> initial(config);
    initialize_parameters(initial, 3);
    ParameterBuffer<float> scheduled = initial;
    OptimizerState scheduled_state(base, config);
    const std::unique_ptr<Engine> engine =
        make_engine(Device::cpu, scheduled, &scheduled_state, EngineOptions{4, 1, {}});
    ParameterBuffer<float> stepped = initial;
    OptimizerState stepped_state(base, config);
    for (size_t i = 0; i < batches.size(); ++i) {
      engine->enqueue_train_step(batches[i], rates[i]);
      OptimizerConfig at_rate = base;
      at_rate.learning_rate = rates[i];
      OptimizerState state(at_rate, config);
      state.steps = stepped_state.steps;
      state.moments = stepped_state.moments;
      const std::unique_ptr<Engine> one = make_engine(Device::cpu, stepped, &state, EngineOptions{4, 1, {}});
      one->enqueue_train_step(batches[i], state.config.learning_rate);
      ASSERT_EQ(one->collect().steps, 1);
      stepped_state.steps = state.steps;
      stepped_state.moments = state.moments;
    }
    ASSERT_EQ(engine->collect().steps, static_cast<int64_t>(batches.size()));
    EXPECT_EQ(scheduled_state.steps, stepped_state.steps);
    EXPECT_TRUE(scheduled.data == stepped.data) << to_string(base.kind) << ": weights differ";
    for (size_t m = 0; m < scheduled_state.moments.size(); ++m)
      EXPECT_TRUE(scheduled_state.moments[m].data == stepped_state.moments[m].data) << "moment " << m;
    EXPECT_TRUE(scheduled.data != initial.data) << "the steps did not move the weights";
  }
}

TEST(Optimizer, NegativeOrNonFiniteStepLearningRateIsAnError) {
  const ModelConfig c = small_config();
  OptimizerState optimizer(OptimizerConfig{}, c);
  ParameterBuffer<float> params(c), grads(c);
  EXPECT_THROW(optimizer_step(params, optimizer, grads, {}, -1e-3f), Error);
  EXPECT_THROW(optimizer_step(params, optimizer, grads, {}, std::numeric_limits<float>::infinity()), Error);
  EXPECT_EQ(optimizer.steps, 0);
}

}  // namespace
}  // namespace enhanced
