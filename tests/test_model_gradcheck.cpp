// The whole model's backward against finite differences in double precision, on shapes with
// empty identifier lists, T = 1, H = 1, B = 1, both blend modes and both pooling modes.
#include <gtest/gtest.h>

#include "engine/cpu_model.h"
#include "gradcheck.h"

namespace enhanced {
namespace {

struct ModelCase {
  int batch, seq_len, dim, hidden, labels;
  BlendMode blend;
  PoolMode pool;
};

class ModelGradient : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ModelGradient, EveryParameterMatchesFiniteDifferences) {
  const ModelCase m = GetParam();
  ModelConfig config;
  config.vocab_size = 17;
  config.embedding_dim = m.dim;
  config.hidden = m.hidden;
  config.seq_len = m.seq_len;
  config.num_labels = m.labels;
  config.blend = m.blend;
  config.pool = m.pool;
  Random random(static_cast<uint64_t>(m.batch * 97 + m.seq_len * 13 + m.hidden));
  const Batch batch = testing::random_batch(m.batch, m.seq_len, 17, m.labels, random);
  ParameterBuffer<double> params(config), grads(config);
  for (double& v : params.data) v = random.uniform(-0.6, 0.6);
  Activations<double> activations;
  activations.reserve(config, m.batch);
  auto loss = [&] { return model_forward(activations, params, batch, 2, false); };
  model_forward(activations, params, batch, 2, true);
  model_backward(grads, activations, params, batch, 2);
  for (const TensorSlot& slot : parameter_layout(config)) {
    testing::check_tensor(loss, params.data.data() + slot.offset, grads.data.data() + slot.offset, slot.numel,
                          slot.name, random, 60);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ModelGradient,
    ::testing::Values(ModelCase{3, 6, 4, 3, 4, BlendMode::mean, PoolMode::feature},
                      ModelCase{3, 6, 4, 3, 4, BlendMode::scalar_mean, PoolMode::feature},
                      ModelCase{2, 5, 3, 4, 3, BlendMode::mean, PoolMode::time},
                      ModelCase{2, 5, 3, 4, 3, BlendMode::scalar_mean, PoolMode::time},
                      ModelCase{1, 1, 2, 1, 2, BlendMode::mean, PoolMode::feature},
                      ModelCase{1, 4, 3, 1, 5, BlendMode::mean, PoolMode::time},
                      ModelCase{2, 1, 5, 2, 3, BlendMode::scalar_mean, PoolMode::feature}));

}  // namespace
}  // namespace enhanced
