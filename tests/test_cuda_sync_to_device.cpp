// Engine::sync_to_device, the GPU twin of the CPU engine's no-op: parameters written on the host
// between steps (a training observer's write_parameters: Keras's set_weights during fit) are what
// the device's next step starts from, as the CPU engine's steps start from its host buffer; the
// optimizer's moments stay the device's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "enhanced/device.h"
#include "enhanced/engine.h"

namespace enhanced {
namespace {

using testing::small_config;
using testing::training_batches;

TEST(CudaSyncToDevice, WrittenParametersAreWhatTheNextStepsStartFromAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  const ModelConfig config = small_config(BlendMode::mean, PoolMode::feature, 6);
  const std::vector<Batch> batches = training_batches(config, 20, 17);
  ParameterBuffer<float> initial(config);
  initialize_parameters(initial, 5);
  OptimizerConfig optimizer;
  optimizer.learning_rate = 0.02f;
  testing::EngineRun cpu(Device::cpu, initial, optimizer, EngineOptions{4, 1});
  testing::EngineRun gpu(Device::cuda, initial, optimizer, testing::gpu_options(CudaOptions{}));
  for (size_t step = 0; step < 10; ++step) {
    cpu.step(batches[step], optimizer.learning_rate);
    gpu.step(batches[step], optimizer.learning_rate);
  }
  // Both back at the initial weights, the moments of ten steps kept.
  cpu.params.data = initial.data;
  cpu.engine->sync_to_device();
  gpu.sync();
  gpu.params.data = initial.data;
  gpu.engine->sync_to_device();
  gpu.params.data.assign(gpu.params.size(), 0.0f);
  gpu.sync();  // the device's copy, read back: exactly what was written
  ASSERT_TRUE(gpu.params.data == initial.data);
  for (size_t step = 10; step < batches.size(); ++step) {
    cpu.step(batches[step], optimizer.learning_rate);
    gpu.step(batches[step], optimizer.learning_rate);
  }
  gpu.sync();
  double moved = 0;
  for (size_t i = 0; i < cpu.params.size(); ++i) {
    ASSERT_NEAR(gpu.params.data[i], cpu.params.data[i], 1e-3) << "parameter " << i;
    moved = std::max(moved, static_cast<double>(std::fabs(cpu.params.data[i] - initial.data[i])));
  }
  EXPECT_GT(moved, 1e-2) << "training barely moved the weights: the comparison would be vacuous";
}

}  // namespace
}  // namespace enhanced
