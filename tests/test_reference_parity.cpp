// The engine against the independent PyTorch implementation in tests/reference/: same
// checkpoint, same batch; the loss, logits, every gradient, and the weights after several SGD
// (momentum) and Adam steps must agree to a relative error of 1e-4 in float32. The
// training controls' cases add class weights (CrossEntropyLoss(weight=)), weight decay (torch SGD's weight_decay,
// torch.optim.AdamW, with and without the embedding) and a learning rate per step (torch:
// param_group['lr'] before each step).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "enhanced/checkpoint.h"
#include "enhanced/engine.h"
#include "gradcheck.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;

// What a case adds to the plain one (defaults: none of it).
struct CaseOptions {
  std::vector<float> class_weights;  // empty: unweighted
  float sgd_weight_decay = 0;
  float adam_weight_decay = -1;      // < 0: plain Adam (no key written); >= 0: AdamW
  bool weight_decay_embedding = false;
  std::vector<float> sgd_rates, adam_rates;  // empty: the config's rate at every step
};

std::string text_of(float value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(value));
  return text;
}

std::string list_of(const std::vector<float>& values) {
  std::string out;
  for (const float v : values) {
    if (!out.empty()) out += ',';
    out += text_of(v);
  }
  return out;
}

// Runs `steps` training steps of the CPU engine on the same batch from `start` (step s at
// rates[s] when given); returns the final weights.
ParameterBuffer<float> train_on_batch(const ParameterBuffer<float>& start, const OptimizerConfig& config,
                                      const Batch& batch, int steps, const std::vector<float>& rates,
                                      const std::vector<float>& class_weights) {
  ParameterBuffer<float> params = start;
  OptimizerState optimizer(config, start.config);
  const std::unique_ptr<Engine> engine =
      make_engine(Device::cpu, params, &optimizer, EngineOptions{batch.size, 2, {}, class_weights});
  for (int s = 0; s < steps; ++s)
    engine->enqueue_train_step(batch, rates.empty() ? config.learning_rate : rates[static_cast<size_t>(s)]);
  EXPECT_EQ(engine->collect().steps, steps);
  engine->sync_to_host();
  return params;
}

void write_case(const fs::path& dir, const ModelConfig& config, uint64_t seed, const CaseOptions& o = {}) {
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
  const std::unique_ptr<Engine> engine =
      make_engine(Device::cpu, weights, nullptr, EngineOptions{B, 2, {}, o.class_weights});
  const float loss = static_cast<float>(engine->compute_gradients(batch, logits.data()));
  engine->download_gradients(grads);

  SafetensorsWriter expected;
  expected.add("loss", &loss, {1});
  expected.add("logits", logits.data(), {B, config.num_labels});
  for (const TensorSlot& slot : parameter_layout(config)) expected.add("grad." + slot.name, grads.data.data() + slot.offset, slot.shape);
  if (!o.class_weights.empty()) expected.add("class_weights", o.class_weights.data(), {config.num_labels});

  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.learning_rate = 0.1f;
  sgd.momentum = 0.9f;
  sgd.weight_decay = o.sgd_weight_decay;
  sgd.weight_decay_embedding = o.weight_decay_embedding;
  OptimizerConfig adam;
  adam.kind = OptimizerKind::adam;
  adam.learning_rate = 0.01f;
  adam.weight_decay = o.adam_weight_decay > 0 ? o.adam_weight_decay : 0.0f;
  adam.weight_decay_embedding = o.weight_decay_embedding;
  const int steps = 4;
  const ParameterBuffer<float> after_sgd = train_on_batch(params, sgd, batch, steps, o.sgd_rates, o.class_weights);
  const ParameterBuffer<float> after_adam = train_on_batch(params, adam, batch, steps, o.adam_rates, o.class_weights);
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
  if (o.sgd_weight_decay > 0) expected.set_metadata("sgd_weight_decay", text_of(o.sgd_weight_decay));
  if (o.adam_weight_decay >= 0) expected.set_metadata("adam_weight_decay", text_of(o.adam_weight_decay));
  if (o.weight_decay_embedding) expected.set_metadata("weight_decay_embedding", "1");
  if (!o.sgd_rates.empty()) expected.set_metadata("sgd_lrs", list_of(o.sgd_rates));
  if (!o.adam_rates.empty()) expected.set_metadata("adam_lrs", list_of(o.adam_rates));
  expected.write((dir / "expected.safetensors").string());
}

ModelConfig case_config(BlendMode blend, PoolMode pool) {
  ModelConfig config;
  config.vocab_size = 40;
  config.embedding_dim = 6;
  config.hidden = 5;
  config.seq_len = 9;
  config.num_labels = 4;
  config.blend = blend;
  config.pool = pool;
  return config;
}

int run_parity(const std::string& dirs) {
  const std::string command = "/usr/bin/python3 '" ENHANCED_SOURCE_DIR "/tests/reference/parity.py'" + dirs;
  const int status = std::system(command.c_str());
  EXPECT_TRUE(WIFEXITED(status)) << command;
  return WEXITSTATUS(status);
}

TEST(ReferenceParity, PyTorchAgreesOnLossLogitsGradientsAndOptimizerSteps) {
  const fs::path root = fs::path(ENHANCED_TEST_TMP) / "parity";
  fs::remove_all(root);
  std::string dirs;
  uint64_t seed = 100;
  for (BlendMode blend : {BlendMode::mean, BlendMode::scalar_mean}) {
    for (PoolMode pool : {PoolMode::feature, PoolMode::time}) {
      const fs::path dir = root / (std::string(to_string(blend)) + "-" + to_string(pool));
      write_case(dir, case_config(blend, pool), seed++);
      dirs += " '" + dir.string() + "'";
    }
  }
  EXPECT_EQ(run_parity(dirs), 0) << "PyTorch parity failed (see the table above)";
}

// Class weights, weight decay (the table excluded, then included: plain SGD momentum and AdamW
// over every row) and a rate per step, each against torch after 4 steps.
TEST(ReferenceParity, PyTorchAgreesOnClassWeightsWeightDecayAndPerStepRates) {
  const fs::path root = fs::path(ENHANCED_TEST_TMP) / "parity-training-controls";
  fs::remove_all(root);
  CaseOptions weighted;
  weighted.class_weights = {0.5f, 2.0f, 1.25f, 0.0f};
  CaseOptions decay;
  decay.sgd_weight_decay = 0.05f;
  decay.adam_weight_decay = 0.2f;
  CaseOptions decay_table = decay;
  decay_table.weight_decay_embedding = true;
  CaseOptions scheduled;
  scheduled.sgd_rates = {0.02f, 0.1f, 0.05f, 0.0125f};
  scheduled.adam_rates = {0.001f, 0.01f, 0.03f, 0.004f};
  CaseOptions all = decay_table;
  all.class_weights = {1.5f, 0.25f, 1.0f, 3.0f};
  all.sgd_rates = scheduled.sgd_rates;
  all.adam_rates = scheduled.adam_rates;
  std::string dirs;
  uint64_t seed = 200;
  for (const auto& [name, options] : {std::pair{"weighted", weighted}, std::pair{"decay", decay},
                                      std::pair{"decay-table", decay_table}, std::pair{"scheduled", scheduled},
                                      std::pair{"all", all}}) {
    const fs::path dir = root / name;
    write_case(dir, case_config(BlendMode::mean, PoolMode::feature), seed++, options);
    dirs += " '" + dir.string() + "'";
  }
  EXPECT_EQ(run_parity(dirs), 0) << "PyTorch parity failed (see the table above)";
}

}  // namespace
}  // namespace enhanced
