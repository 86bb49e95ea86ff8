// The CUDA training pipeline: pipelined steps replayed from CUDA graphs against synchronous eager
// steps (bit for bit), the device-side loss/accuracy totals, the halt on a non-finite loss,
// every cuDNN LSTM algorithm against the CPU, and enhanced-train / enhanced-eval on the GPU
// against the CPU run, with resume bit for bit.
//
// Why bit for bit: a graph replays the same kernels on the same data as the eager step; the
// one difference, the embedding sort padded to a fixed size, provably leaves every row's
// segment (and so its sum) unchanged (CudaParity.EmbeddingBlendMatchesCpu checks that too).
//
// Written once, compiled where the CUDA backend is (tests/CMakeLists.txt lists these names in a
// build without it, each SKIPPED with the reason); without a usable GPU each test is SKIPPED with
// the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <span>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <unistd.h>

#include "app_runner.h"
#include "state_compare.h"
#include "cuda_test_util.h"
#include "enhanced/checkpoint.h"
#include "enhanced/common.h"
#include "enhanced/demo.h"
#include "engine/cpu_model.h"
#include "enhanced/safetensors.h"

namespace enhanced {
namespace {

using testing::small_config;
using testing::training_batches;

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

using testing::EngineRun;
using testing::gpu_options;
using testing::graph_replays;

// A batch whose positions hold 10 identifier ids each: more than the model's initial room
// (4 per position), so the id buffers grow and every captured graph is recaptured.
Batch dense_batch(const ModelConfig& config, uint64_t seed) {
  Random random(seed);
  Batch batch = testing::random_batch(4, config.seq_len, static_cast<int>(config.vocab_size), config.num_labels,
                                      random);
  batch.identifier_ids.clear();
  batch.identifier_offsets.assign(1, 0);
  for (int p = 0; p < batch.positions(); ++p) {
    for (int j = 0; j < 10; ++j)
      batch.identifier_ids.push_back(static_cast<int32_t>(random.below(config.vocab_size)));
    batch.identifier_offsets.push_back(static_cast<int32_t>(batch.identifier_ids.size()));
  }
  return batch;
}

void check_pipeline(const OptimizerConfig& optimizer, const char* name) {
  const ModelConfig config = small_config(BlendMode::mean, PoolMode::feature, 6);
  std::vector<Batch> batches = training_batches(config, 40, 71);
  batches[23] = dense_batch(config, 72);
  ParameterBuffer<float> initial(config);
  initialize_parameters(initial, 8);
  CudaOptions eager_options;
  eager_options.graphs = false;
  eager_options.rnn_algorithm = RnnAlgorithm::standard;
  CudaOptions graph_options = eager_options;
  graph_options.graphs = true;
  EngineRun eager(Device::cuda, initial, optimizer, gpu_options(eager_options));
  EngineRun piped(Device::cuda, initial, optimizer, gpu_options(graph_options));
  constexpr size_t kInterval = 10;
  TrainTotals want;
  for (size_t step = 0; step < batches.size(); ++step) {
    const Batch& batch = batches[step];
    // Each eager step waited for alone; the host adds their totals in step order, which is the
    // device's order and rounding (loss_sum + loss * B, each step's product already rounded).
    const TrainTotals one = eager.step(batch, optimizer.learning_rate);
    ASSERT_EQ(one.halted, Halt::none) << name << " step " << step + 1;
    want.loss_sum += one.loss_sum;
    want.samples += one.samples;
    want.correct += one.correct;
    want.steps += one.steps;
    piped.engine->enqueue_train_step(batch, optimizer.learning_rate);
    if ((step + 1) % kInterval == 0) {
      const TrainTotals got = piped.engine->collect();
      // Summed on the device in the same order with the same roundings: equal, not close.
      EXPECT_EQ(got.loss_sum, want.loss_sum) << name << " interval ending at step " << step + 1;
      EXPECT_EQ(got.samples, want.samples) << name;
      EXPECT_EQ(got.correct, want.correct) << name;
      EXPECT_EQ(got.steps, want.steps) << name;
      EXPECT_EQ(got.halted, Halt::none) << name;
      want = TrainTotals{};
    }
  }
  eager.sync();
  piped.sync();
  EXPECT_EQ(piped.state.steps, eager.state.steps);
  EXPECT_EQ(piped.state.steps, static_cast<int64_t>(batches.size()));
  // 40 steps over (batch 4 | 2) x 2 slots, each shape eager once and captured once, recaptured
  // after the buffers grew: most steps are replays.
  std::string note;
  EXPECT_GT(graph_replays(*piped.engine, &note), 20) << name << ": " << note;
  EXPECT_EQ(graph_replays(*eager.engine, &note), -1) << name << ": " << note;
  EXPECT_TRUE(same_bits(eager.params.data, piped.params.data)) << name << ": graph replays changed the weights";
  ASSERT_EQ(eager.state.moments.size(), piped.state.moments.size());
  for (size_t m = 0; m < eager.state.moments.size(); ++m)
    EXPECT_TRUE(same_bits(eager.state.moments[m].data, piped.state.moments[m].data)) << name << ": moment " << m;
  EXPECT_FALSE(same_bits(piped.params.data, initial.data)) << name << ": training did not move the weights";
}

TEST(CudaPipeline, GraphReplayedStepsMatchSynchronousEagerStepsBitForBit) {
  SKIP_WITHOUT_GPU();
  OptimizerConfig adam;
  adam.learning_rate = 3e-3f;
  check_pipeline(adam, "adam");
  OptimizerConfig lazy = adam;
  lazy.lazy_embedding = true;
  lazy.clip_norm = 0.05f;
  check_pipeline(lazy, "lazy adam, clipped");
  OptimizerConfig momentum;
  momentum.kind = OptimizerKind::sgd;
  momentum.learning_rate = 0.02f;
  momentum.momentum = 0.9f;
  check_pipeline(momentum, "sgd momentum");
}

TEST(CudaPipeline, NonFiniteLossHaltsAndKeepsTheLastGoodWeights) {
  SKIP_WITHOUT_GPU();
  const ModelConfig config = small_config(BlendMode::mean, PoolMode::feature, 6);
  // Ids below V - 1, except one cur word of batch 5: row V - 1 is NaN and first read there.
  std::vector<Batch> batches = training_batches(config, 9, 81, config.vocab_size - 1);
  batches[5].cur_word_ids[0] = static_cast<int32_t>(config.vocab_size - 1);
  ParameterBuffer<float> initial(config);
  initialize_parameters(initial, 4);
  for (int d = 0; d < config.embedding_dim; ++d)
    initial.embedding[(config.vocab_size - 1) * config.embedding_dim + d] = std::numeric_limits<float>::quiet_NaN();
  OptimizerConfig adam;
  CudaOptions options;
  options.rnn_algorithm = RnnAlgorithm::standard;  // both engines: the same arithmetic
  EngineRun reference(Device::cuda, initial, adam, gpu_options(options));
  EngineRun piped(Device::cuda, initial, adam, gpu_options(options));
  int64_t good_samples = 0;
  for (int step = 0; step < 5; ++step) {
    ASSERT_EQ(reference.step(batches[step], adam.learning_rate).halted, Halt::none);
    good_samples += batches[step].size;
  }
  for (int step = 0; step < 8; ++step) piped.engine->enqueue_train_step(batches[step], adam.learning_rate);
  const TrainTotals totals = piped.engine->collect();
  EXPECT_EQ(totals.halted, Halt::loss);
  EXPECT_EQ(totals.halted_step, 6);
  EXPECT_TRUE(std::isnan(totals.halted_value));
  EXPECT_EQ(totals.steps, 5);
  EXPECT_EQ(totals.samples, good_samples);
  piped.sync();
  reference.sync();
  EXPECT_EQ(piped.state.steps, 5);
  EXPECT_TRUE(same_bits(piped.params.data, reference.params.data))
      << "the halted step or the ones after it changed the weights";
  // The halt stays in force (the trainer stops): later steps change nothing.
  piped.engine->enqueue_train_step(batches[8], adam.learning_rate);
  const TrainTotals later = piped.engine->collect();
  EXPECT_EQ(later.halted, Halt::loss);
  EXPECT_EQ(later.steps, 0);
  piped.sync();
  EXPECT_EQ(piped.state.steps, 5);
  EXPECT_TRUE(same_bits(piped.params.data, reference.params.data));
}

// Each algorithm cuDNN accepts for this shape gives the CPU's loss and gradients; standard must
// be accepted; automatic picks one of them and says what it measured. The chosen algorithm runs
// batches of the engine's full size only (any other size runs standard), so the batch is that.
TEST(CudaPipeline, EveryLstmAlgorithmCudnnAcceptsMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const ModelConfig config = small_config(BlendMode::mean, PoolMode::feature, 8);
  const int full_batch = gpu_options(CudaOptions{}).max_batch;
  Random random(91);
  const Batch batch = testing::random_batch(full_batch, config.seq_len, static_cast<int>(config.vocab_size),
                                            config.num_labels, random);
  ParameterBuffer<float> params(config);
  initialize_parameters(params, 6);
  ParameterBuffer<double> params_d(config), grads_d(config);
  std::copy(params.data.begin(), params.data.end(), params_d.data.begin());
  Activations<double> activations;
  activations.reserve(config, full_batch);
  const double loss = model_forward(activations, params_d, batch, 1, true);
  model_backward(grads_d, activations, params_d, batch, 1);
  double scale = 1e-6;
  for (double g : grads_d.data) scale = std::max(scale, std::fabs(g));
  for (RnnAlgorithm algorithm :
       {RnnAlgorithm::standard, RnnAlgorithm::persistent, RnnAlgorithm::persistent_small_h, RnnAlgorithm::automatic}) {
    CudaOptions options;
    options.rnn_algorithm = algorithm;
    std::unique_ptr<EngineRun> run;
    try {
      run = std::make_unique<EngineRun>(Device::cuda, params, OptimizerConfig{}, gpu_options(options));
    } catch (const Error& e) {
      ASSERT_NE(algorithm, RnnAlgorithm::standard) << e.what();
      ASSERT_NE(algorithm, RnnAlgorithm::automatic) << e.what();
      std::printf("[ info ] %s: not accepted here: %s\n", to_string(algorithm), e.what());
      continue;
    }
    Engine& engine = *run->engine;
    std::printf("[ info ] %s: %s; ran %s at batch %d (the engine's full batch)\n", to_string(algorithm),
                engine.summary().c_str(), to_string(engine.rnn_algorithm()), batch.size);
    if (algorithm == RnnAlgorithm::automatic) EXPECT_NE(engine.rnn_algorithm(), RnnAlgorithm::automatic);
    else EXPECT_EQ(engine.rnn_algorithm(), algorithm);
    const double gpu_loss = engine.compute_gradients(batch, nullptr);
    EXPECT_NEAR(gpu_loss, loss, 1e-4 * std::max(1.0, loss)) << to_string(algorithm);
    ParameterBuffer<float> grads(config);
    engine.download_gradients(grads);
    for (size_t i = 0; i < grads.size(); ++i)
      ASSERT_NEAR(grads.data[i], grads_d.data[i], 2e-4 * scale) << to_string(algorithm) << " gradient " << i;
  }
}

// ---- the apps on the GPU ------------------------------------------------------------------------

namespace fs = std::filesystem;
using testing::run_app;

class CudaTrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(ENHANCED_TEST_TMP) / ("cuda_train_cli." + std::to_string(::getpid()));
    fs::remove_all(root_);
    files_ = testing::write_small_demo(root_ / "data");
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string flags() const { return testing::small_train_flags(files_) + "--log-every 3 "; }

  fs::path root_;
  DemoFiles files_;
};

TEST_F(CudaTrainCli, TrainsLikeTheCpuAndResumesBitForBit) {
  SKIP_WITHOUT_GPU();
  const fs::path gpu = root_ / "gpu", cpu = root_ / "cpu", cut = root_ / "cut";
  // Stopped mid-epoch (5 batches an epoch) with the LSTM algorithm chosen by timing; the resumed
  // run reads the choice from the state file.
  const auto first = run_app("enhanced-train", flags() + "--steps 7 --device cuda --out " + cut.string());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("replayed from CUDA graphs"), std::string::npos) << first.output;
  const SafetensorsReader state((cut / "optimizer.safetensors").string());
  const std::string algorithm = nlohmann::json::parse(state.metadata_value("run_options"))["rnn_algorithm"];
  EXPECT_NE(algorithm, "auto") << "the chosen LSTM algorithm is not recorded";
  const auto resumed = run_app("enhanced-train", "--resume --epochs 3 --quiet --device cuda --out " + cut.string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  // The uninterrupted run with that algorithm: the same bits.
  const auto trained = run_app("enhanced-train", flags() + "--epochs 3 --device cuda --rnn-algorithm " + algorithm +
                                                     " --out " + gpu.string());
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_TRUE(testing::read_bytes(gpu / "last.safetensors") == testing::read_bytes(cut / "last.safetensors"));
  EXPECT_TRUE(testing::same_state_apart_from_metrics(gpu / "optimizer.safetensors", cut / "optimizer.safetensors"));
  // And close to the CPU's run: rounding differences only.
  ASSERT_EQ(run_app("enhanced-train", flags() + "--epochs 3 --device cpu --out " + cpu.string()).exit_code, 0);
  const ParameterBuffer<float> a = load_checkpoint((gpu / "last.safetensors").string());
  const ParameterBuffer<float> b = load_checkpoint((cpu / "last.safetensors").string());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a.data[i], b.data[i], 1e-3) << "parameter " << i;
  // The GPU's checkpoint evaluates on either device to the same loss.
  const std::string eval = "--json --data " + files_.test_ebin + " --checkpoint " + (gpu / "last.safetensors").string();
  const auto on_gpu = run_app("enhanced-eval", eval + " --device cuda");
  const auto on_cpu = run_app("enhanced-eval", eval + " --device cpu");
  ASSERT_EQ(on_gpu.exit_code, 0) << on_gpu.output;
  ASSERT_EQ(on_cpu.exit_code, 0) << on_cpu.output;
  const double gpu_loss = nlohmann::json::parse(on_gpu.output)["loss"].get<double>();
  const double cpu_loss = nlohmann::json::parse(on_cpu.output)["loss"].get<double>();
  EXPECT_NEAR(gpu_loss, cpu_loss, 1e-4 * std::max(1.0, cpu_loss));
}

// The device's halt through the trainer: reported with the same step (and, for a loss, epoch and
// batch) whether the totals are collected after every step or only at the epoch's end, no
// checkpoint after it. Which comes first on this GPU, a non-finite loss (exit 3) or a non-finite
// gradient with a finite loss (exit 1), is the arithmetic's business: both runs must agree.
TEST_F(CudaTrainCli, DivergenceStopsWithTheStepAndKeepsTheLastGoodCheckpoint) {
  SKIP_WITHOUT_GPU();
  // flags() sets --log-every, which the two runs set themselves.
  const std::string base = testing::small_train_flags(files_) +
                           "--optimizer sgd --lr 1e38 --epochs 3 --device cuda --rnn-algorithm standard ";
  const auto each = run_app("enhanced-train", base + "--log-every 1 --out " + (root_ / "each").string());
  const auto late = run_app("enhanced-train", base + "--log-every 1000 --out " + (root_ / "late").string());
  EXPECT_TRUE(each.exit_code == 3 || each.exit_code == 1) << each.output;
  EXPECT_EQ(late.exit_code, each.exit_code) << late.output;
  const auto message = testing::halt_message;
  ASSERT_FALSE(message(each.output).empty()) << each.output;
  EXPECT_EQ(message(late.output), message(each.output));
  EXPECT_FALSE(fs::exists(root_ / "late" / "last.safetensors")) << late.output;
}

// The trainer's schedule and early stopping on the GPU: the rate of every step reaches the device
// (a plateau run differs from a constant one, and follows the CPU's run of the same schedule),
// and a run killed after a checkpoint resumes to the uninterrupted GPU run's files.
TEST_F(CudaTrainCli, SchedulesReachTheDeviceAndResumeExactly) {
  SKIP_WITHOUT_GPU();
  const std::string base = flags() + "--optimizer sgd --lr 0.2 --momentum 0.9 --epochs 3 --rnn-algorithm standard ";
  const std::string scheduled = base + "--lr-schedule step --lr-step-size 2 --lr-factor 0.5 --warmup-steps 2 ";
  for (const std::string device : {"cuda", "cpu"}) {
    const auto run = run_app("enhanced-train", scheduled + "--device " + device + " --out " + (root_ / device).string());
    ASSERT_EQ(run.exit_code, 0) << run.output;
  }
  ASSERT_EQ(run_app("enhanced-train", base + "--device cuda --out " + (root_ / "constant").string()).exit_code, 0);
  const ParameterBuffer<float> gpu = load_checkpoint((root_ / "cuda" / "last.safetensors").string());
  const ParameterBuffer<float> cpu = load_checkpoint((root_ / "cpu" / "last.safetensors").string());
  const ParameterBuffer<float> constant = load_checkpoint((root_ / "constant" / "last.safetensors").string());
  double gpu_cpu = 0, gpu_constant = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    gpu_cpu = std::max(gpu_cpu, static_cast<double>(std::fabs(gpu.data[i] - cpu.data[i])));
    gpu_constant = std::max(gpu_constant, static_cast<double>(std::fabs(gpu.data[i] - constant.data[i])));
  }
  EXPECT_LT(gpu_cpu, 1e-3);
  EXPECT_GT(gpu_constant, 100 * gpu_cpu) << "the schedule did not change the GPU's steps";
  // Killed after its third file write (a checkpoint mid-epoch), then resumed on the GPU.
  ::setenv("ENHANCED_TEST_EXIT_AFTER_WRITE", "3", 1);
  const auto killed = run_app("enhanced-train", scheduled + "--device cuda --checkpoint-every 2 --out " +
                                                    (root_ / "killed").string());
  ::unsetenv("ENHANCED_TEST_EXIT_AFTER_WRITE");
  ASSERT_EQ(killed.exit_code, 137) << killed.output;
  const auto whole = run_app("enhanced-train", scheduled + "--device cuda --checkpoint-every 2 --out " +
                                                   (root_ / "whole").string());
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto resumed = run_app("enhanced-train", "--resume --quiet --device cuda --out " + (root_ / "killed").string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  for (const char* file : {"last.safetensors", "optimizer.safetensors"})
    EXPECT_TRUE(testing::read_bytes(root_ / "whole" / file) == testing::read_bytes(root_ / "killed" / file)) << file;
}

}  // namespace
}  // namespace enhanced
