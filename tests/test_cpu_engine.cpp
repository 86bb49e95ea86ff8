// The CPU engine's contract beside the GPU's. The caller owns buffers and a hot loop allocates
// nothing: once the CPU engine has taken its
// first steps, further steps (FP32, bf16 where the CPU runs it, Adam and SGD) fault in no new
// pages. A step that released a large buffer to the kernel and took it back (memory past glibc's
// mmap threshold) would fault every 4 KiB page of it again, each one zeroed by the kernel.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <memory>

#include "enhanced/engine.h"
#include "enhanced/precision.h"
#include "cuda_test_util.h"
#include "gradcheck.h"

namespace enhanced {
namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

void expect_steps_fault_no_pages(Precision precision, OptimizerKind kind) {
  ModelConfig config;
  config.vocab_size = 2000;
  config.embedding_dim = 16;
  config.hidden = 32;
  config.seq_len = 64;
  config.num_labels = 7;
  ParameterBuffer<float> params(config);
  initialize_parameters(params, 5);
  OptimizerConfig optimizer_config;
  optimizer_config.kind = kind;
  OptimizerState optimizer(optimizer_config, config);
  Random random(9);
  const Batch batch = testing::random_batch(16, config.seq_len, 2000, config.num_labels, random);
  EngineOptions options{batch.size, 2};
  options.precision = precision;
  const std::unique_ptr<Engine> engine = make_engine(Device::cpu, params, &optimizer, options);
  for (int step = 0; step < 3; ++step) engine->enqueue_train_step(batch, 1e-3f);  // threads, first touch
  engine->collect();
  const long before = minor_faults();
  for (int step = 0; step < 10; ++step) engine->enqueue_train_step(batch, 1e-3f);
  engine->collect();
  engine->forward(batch, nullptr);
  // The activations alone are some 400 pages: a step that re-faulted them would show here.
  EXPECT_LE(minor_faults() - before, 16) << to_string(precision);
}

TEST(CpuEngine, StepsAfterTheFirstFaultInNoPages) {
  expect_steps_fault_no_pages(Precision::fp32, OptimizerKind::adam);
  expect_steps_fault_no_pages(Precision::fp32, OptimizerKind::sgd);
  expect_steps_fault_no_pages(Precision::bf16_emulated, OptimizerKind::adam);
  if (cpu_bf16_support().avx512_bf16) expect_steps_fault_no_pages(Precision::bf16, OptimizerKind::adam);
}

TEST(CpuEngine, BadBatchesAreErrors) {
  testing::expect_bad_batches_refused(Device::cpu, EngineOptions{});  // as CudaParity.BadBatchesAreErrors
}

}  // namespace
}  // namespace enhanced
