// The engine against the independent PyTorch implementation in tests/reference/: same
// checkpoint, same batch; the loss, logits, every gradient, and the weights after several SGD
// (momentum) and Adam steps must agree to a relative error of 1e-4 in float32.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "enhanced/checkpoint.h"
#include "enhanced/engine.h"
#include "gradcheck.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;

// Runs `steps` training steps of the CPU engine on the same batch from `start`; returns the
// final weights.
ParameterBuffer<float> train_on_batch(const ParameterBuffer<float>& start, const OptimizerConfig& config,
                                      const Batch& batch, int steps) {
  ParameterBuffer<float> params = start;
  OptimizerState optimizer(config, start.config);
  const std::unique_ptr<Engine> engine = make_engine(Device::cpu, params, &optimizer, EngineOptions{batch.size, 2, {}});
  for (int s = 0; s < steps; ++s) engine->enqueue_train_step(batch, config.learning_rate);
  EXPECT_EQ(engine->collect().steps, steps);
  engine->sync_to_host();
  return params;
}

void write_case(const fs::path& dir, const ModelConfig& config, uint64_t seed) {
  fs::create_directories(dir);
  Random random(seed);
  ParameterBuffer<float> params(config);
  initialize_parameters(params, seed);
  // Larger embeddings than the 0.05 default so the blend's contribution is not lost in noise.
  for (size_t i = 0; i < params.embedding_size(); ++i) params.embedding[i] = static_cast<float>(random.uniform(-1, 1));
  const int B = 4;
  const Batch batch = testing::random_batch(B, config.seq_len, static_cast<int>(config.vocab_size), config.num_labels, random);
  save_checkpoint((dir / "checkpoint.safetensors").string(), params);
  save_batch((dir / "batch.safetensors").string(), batch);

  ParameterBuffer<float> grads(config), weights = params;
  std::vector<float> logits(static_cast<size_t>(B) * config.num_labels);
  const std::unique_ptr<Engine> engine = make_engine(Device::cpu, weights, nullptr, EngineOptions{B, 2, {}});
  const float loss = static_cast<float>(engine->compute_gradients(batch, logits.data()));
  engine->download_gradients(grads);

  SafetensorsWriter expected;
  expected.add("loss", &loss, {1});
  expected.add("logits", logits.data(), {B, config.num_labels});
  for (const TensorSlot& slot : parameter_layout(config)) expected.add("grad." + slot.name, grads.data.data() + slot.offset, slot.shape);

  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.learning_rate = 0.1f;
  sgd.momentum = 0.9f;
  OptimizerConfig adam;
  adam.kind = OptimizerKind::adam;
  adam.learning_rate = 0.01f;
  const int steps = 4;
  const ParameterBuffer<float> after_sgd = train_on_batch(params, sgd, batch, steps);
  const ParameterBuffer<float> after_adam = train_on_batch(params, adam, batch, steps);
  for (const TensorSlot& slot : parameter_layout(config)) {
    expected.add("sgd." + slot.name, after_sgd.data.data() + slot.offset, slot.shape);
    expected.add("adam." + slot.name, after_adam.data.data() + slot.offset, slot.shape);
  }
  expected.set_metadata("sgd_lr", "0.1");
  expected.set_metadata("sgd_momentum", "0.9");
  expected.set_metadata("sgd_steps", std::to_string(steps));
  expected.set_metadata("adam_lr", "0.01");
  expected.set_metadata("adam_beta1", "0.9");
  expected.set_metadata("adam_beta2", "0.999");
  expected.set_metadata("adam_eps", "1e-07");
  expected.set_metadata("adam_steps", std::to_string(steps));
  expected.write((dir / "expected.safetensors").string());
}

TEST(ReferenceParity, PyTorchAgreesOnLossLogitsGradientsAndOptimizerSteps) {
  const fs::path root = fs::path(ENHANCED_TEST_TMP) / "parity";
  fs::remove_all(root);
  std::string dirs;
  uint64_t seed = 100;
  for (BlendMode blend : {BlendMode::mean, BlendMode::scalar_mean}) {
    for (PoolMode pool : {PoolMode::feature, PoolMode::time}) {
      ModelConfig config;
      config.vocab_size = 40;
      config.embedding_dim = 6;
      config.hidden = 5;
      config.seq_len = 9;
      config.num_labels = 4;
      config.blend = blend;
      config.pool = pool;
      const fs::path dir = root / (std::string(to_string(blend)) + "-" + to_string(pool));
      write_case(dir, config, seed++);
      dirs += " '" + dir.string() + "'";
    }
  }
  const std::string command = "/usr/bin/python3 '" ENHANCED_SOURCE_DIR "/tests/reference/parity.py'" + dirs;
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << command;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "PyTorch parity failed (see the table above): " << command;
}

}  // namespace
}  // namespace enhanced
