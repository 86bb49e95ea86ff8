// Optimizer semantics: dense vs lazy embedding updates, SGD momentum, clipping, non-finite guard.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <limits>

#include "enhanced/common.h"
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
    optimizer_step(params, optimizer, grads, {1, 4});
    const float row1_after_first = params.embedding[1 * 2];
    EXPECT_LT(row1_after_first, 0.0f);
    EXPECT_EQ(params.embedding[0], 0.0f) << "a row never touched has zero moments either way";
    zero_gradients(grads, {1, 4});
    grads.embedding[4 * 2 + 1] = -2.0f;
    optimizer_step(params, optimizer, grads, {4});
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
  optimizer_step(params, optimizer, grads, {});  // v = g = 1, w = -0.5
  optimizer_step(params, optimizer, grads, {});  // v = 0.9 + 1 = 1.9, w = -0.5 - 0.95 = -1.45
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
  const double norm = optimizer_step(params, optimizer, grads, {3});
  EXPECT_DOUBLE_EQ(norm, 50.0);
  EXPECT_NEAR(params.dense_bias[0], -0.6f, 1e-6f);
  EXPECT_NEAR(params.embedding[3 * 2], -0.8f, 1e-6f);
}

TEST(Optimizer, NonFiniteGradientThrowsAndLeavesWeightsUnchanged) {
  const ModelConfig c = small_config();
  OptimizerState optimizer(OptimizerConfig{}, c);
  ParameterBuffer<float> params(c), grads(c);
  params.dense_bias[1] = 0.25f;
  const ParameterBuffer<float> before = params;
  grads.dense_weight[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(optimizer_step(params, optimizer, grads, {}), Error);
  EXPECT_TRUE(std::equal(params.data.begin(), params.data.end(), before.data.begin()));
  EXPECT_EQ(optimizer.steps, 0);
}

}  // namespace
}  // namespace enhanced
