// The training controls' arithmetic on the GPU against the CPU engine: a learning rate per
// step (read from the step's scalars, so replayed CUDA graphs must pick up each step's rate),
// weight decay, class weights (the training loss weighted, evaluation not).
//
// Written once, compiled where the CUDA backend is (tests/CMakeLists.txt lists these names in a
// build without it, each SKIPPED with the reason); without a usable GPU each test is SKIPPED with
// the reason. Tolerances as in test_cuda_parity.cpp's training tests: trajectories drift apart by
// rounding only, so after the run every parameter agrees to 1e-3 absolute and every interval's
// loss to 1e-4 relative, and each test checks that the weights moved far more than that.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "cuda_test_util.h"
#include "enhanced/device.h"
#include "enhanced/engine.h"

namespace enhanced {
namespace {

using testing::small_config;
using testing::training_batches;

// A schedule-like rate that changes at every step: warm-up, then a decaying wave.
float rate_of(float base, size_t step) {
  const float warm = std::min(1.0f, static_cast<float>(step + 1) / 5.0f);
  return base * warm * (1.0f + 0.5f * std::sin(static_cast<float>(step))) / (1.0f + 0.05f * static_cast<float>(step));
}

struct ScheduledCase {
  const char* name;
  OptimizerConfig optimizer;
  std::vector<float> class_weights = {};
  ClassWeightMean class_weight_mean = ClassWeightMean::weights;
};

// The engines' options for a case: batches of up to 4, its class weights and their mean.
EngineOptions case_options(const ScheduledCase& c, Device device, const CudaOptions& cuda) {
  EngineOptions options = device == Device::cpu ? EngineOptions{4, 1, {}, c.class_weights}
                                                : testing::gpu_options(cuda, c.class_weights);
  options.class_weight_mean = c.class_weight_mean;
  return options;
}

// The same batches and rates through the CPU engine and the CUDA engine with graphs on; the
// totals are read every 10 steps, as the trainer does.
void check_scheduled(const ScheduledCase& c) {
  const ModelConfig config = small_config(BlendMode::mean, PoolMode::feature, 6);
  const std::vector<Batch> batches = training_batches(config, 40, 91);
  ParameterBuffer<float> initial(config);
  initialize_parameters(initial, 13);
  CudaOptions options;
  options.graphs = true;
  testing::EngineRun cpu(Device::cpu, initial, c.optimizer, case_options(c, Device::cpu, options));
  testing::EngineRun gpu(Device::cuda, initial, c.optimizer, case_options(c, Device::cuda, options));
  for (size_t step = 0; step < batches.size(); ++step) {
    const float lr = rate_of(c.optimizer.learning_rate, step);
    cpu.engine->enqueue_train_step(batches[step], lr);
    gpu.engine->enqueue_train_step(batches[step], lr);
    if ((step + 1) % 10 == 0) {
      const TrainTotals want = cpu.engine->collect(), got = gpu.engine->collect();
      ASSERT_EQ(got.halted, Halt::none) << c.name;
      ASSERT_EQ(got.steps, want.steps) << c.name;
      ASSERT_EQ(got.samples, want.samples) << c.name;
      ASSERT_NEAR(got.loss_sum, want.loss_sum, 1e-4 * std::max(1.0, std::fabs(want.loss_sum)))
          << c.name << ", interval ending at step " << step + 1;
    }
  }
  std::string note;
  EXPECT_GT(testing::graph_replays(*gpu.engine, &note), 0) << c.name << ": " << note;
  gpu.sync();
  double moved = 0;
  for (size_t i = 0; i < cpu.params.size(); ++i) {
    ASSERT_NEAR(gpu.params.data[i], cpu.params.data[i], 1e-3) << c.name << " parameter " << i;
    moved = std::max(moved, static_cast<double>(std::fabs(cpu.params.data[i] - initial.data[i])));
  }
  EXPECT_GT(moved, 1e-2) << c.name << ": training barely moved the weights, the comparison would be vacuous";
  // From the same weights: compute_gradients is weighted like the steps, forward is not.
  ParameterBuffer<float> same = cpu.params;
  const std::unique_ptr<Engine> fresh =
      make_engine(Device::cuda, same, nullptr, case_options(c, Device::cuda, options));
  const double cpu_gradients_loss = cpu.engine->compute_gradients(batches[0], nullptr);
  const double cpu_forward_loss = cpu.engine->forward(batches[0], nullptr);
  EXPECT_NEAR(fresh->compute_gradients(batches[0], nullptr), cpu_gradients_loss,
              1e-4 * std::max(1.0, cpu_gradients_loss))
      << c.name;
  EXPECT_NEAR(fresh->forward(batches[0], nullptr), cpu_forward_loss, 1e-4 * std::max(1.0, cpu_forward_loss)) << c.name;
}

TEST(CudaTrainingParity, PerStepLearningRateWithGraphReplayMatchesCpu) {
  SKIP_WITHOUT_GPU();
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.learning_rate = 0.05f;
  OptimizerConfig momentum = sgd;
  momentum.momentum = 0.9f;
  momentum.learning_rate = 0.02f;
  OptimizerConfig adam;
  adam.learning_rate = 3e-3f;
  OptimizerConfig lazy = adam;
  lazy.lazy_embedding = true;
  for (const ScheduledCase& c : {ScheduledCase{"sgd", sgd}, ScheduledCase{"sgd+momentum", momentum},
                                 ScheduledCase{"adam", adam}, ScheduledCase{"lazy adam", lazy}})
    check_scheduled(c);
}

// Weight decay on both devices: SGD's L2 with and without the table (plain SGD with a decaying
// table visits every row on the device too), AdamW dense and lazy, with the table, under a
// changing rate (AdamW's factor 1 - lr_t * wd is a per-step scalar too).
TEST(CudaTrainingParity, WeightDecayMatchesCpu) {
  SKIP_WITHOUT_GPU();
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.learning_rate = 0.05f;
  sgd.weight_decay = 0.05f;
  OptimizerConfig sgd_table = sgd;
  sgd_table.weight_decay_embedding = true;
  OptimizerConfig momentum = sgd_table;
  momentum.momentum = 0.9f;
  momentum.learning_rate = 0.02f;
  OptimizerConfig adamw;
  adamw.learning_rate = 3e-3f;
  adamw.weight_decay = 0.1f;
  OptimizerConfig adamw_table = adamw;
  adamw_table.weight_decay_embedding = true;
  OptimizerConfig lazy = adamw_table;
  lazy.lazy_embedding = true;
  lazy.clip_norm = 0.05f;
  for (const ScheduledCase& c : {ScheduledCase{"sgd decay", sgd}, ScheduledCase{"sgd decay with table", sgd_table},
                                 ScheduledCase{"sgd+momentum decay with table", momentum},
                                 ScheduledCase{"adamw", adamw}, ScheduledCase{"adamw with table", adamw_table},
                                 ScheduledCase{"lazy adamw with table, clipped", lazy}})
    check_scheduled(c);
}

// Class weights (one class weighing 0) under Adam and SGD: the weighted loss's gradient on
// the device, in replayed graphs, against the CPU engine.
TEST(CudaTrainingParity, ClassWeightedTrainingMatchesCpu) {
  SKIP_WITHOUT_GPU();
  OptimizerConfig adam;
  adam.learning_rate = 3e-3f;
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.learning_rate = 0.05f;
  sgd.momentum = 0.9f;
  const std::vector<float> weights = {0.5f, 2.0f, 0.0f, 1.25f};
  const ClassWeightMean keras = ClassWeightMean::batch;
  for (const ScheduledCase& c : {ScheduledCase{"adam, weighted", adam, weights},
                                 ScheduledCase{"sgd+momentum, weighted", sgd, weights},
                                 ScheduledCase{"adam, weighted, Keras' batch mean", adam, weights, keras},
                                 ScheduledCase{"sgd+momentum, weighted, Keras' batch mean", sgd, weights, keras}})
    check_scheduled(c);
}

}  // namespace
}  // namespace enhanced
