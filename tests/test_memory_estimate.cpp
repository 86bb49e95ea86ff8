// The memory estimate against the CPU engine's real allocations, and the refusal's wording.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/cpu_engine.h"
#include "engine/cpu_model.h"
#include "enhanced/carve.h"
#include "enhanced/common.h"
#include "enhanced/memory.h"
#include "enhanced/optimizer_config.h"
#include "layers/dense.h"
#include "layers/lstm.h"

namespace enhanced {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 300;
  c.embedding_dim = 8;
  c.hidden = 12;
  c.seq_len = 10;
  c.num_labels = 5;
  return c;
}

// Parameters, gradients, moments and activations are what the engine allocates, to the byte.
// The workspace (the LSTM's thread_local packing buffers) cannot be observed from here and is
// held to its bounds: at least one packed copy of each direction's weights, and at most four
// for this shape, whose N = D = 8 and N = H = 12 are padded to 32-column panels.
TEST(MemoryEstimate, MatchesTheCpuEnginesAllocations) {
  for (const PoolMode pool : {PoolMode::feature, PoolMode::time}) {
    ModelConfig c = small_config();
    c.pool = pool;
    const int batch = 7;
    OptimizerConfig adam;
    ParameterBuffer<float> params(c), grads(c);
    OptimizerState state(adam, c);
    Activations<float> activations;
    activations.reserve(c, batch);
    const MemoryEstimate m = estimate_memory(c, &adam, batch, Device::cpu);
    EXPECT_EQ(m.parameters, params.data.size() * sizeof(float));
    EXPECT_EQ(m.gradients, grads.data.size() * sizeof(float));
    EXPECT_EQ(m.optimizer, (state.moments[0].data.size() + state.moments[1].data.size()) * sizeof(float));
    // The layers' workspaces are carved from the activations' one allocation: the two parts are it.
    EXPECT_EQ(m.activations + m.workspace, (activations.data.size() + activations.argmax_data.size()) * sizeof(float));
    const size_t lstm = bilstm_workspace_size<float>(batch, c.seq_len, c.embedding_dim, c.hidden);
    const size_t dense = dense_workspace_size<float>(batch, c.pooled_features(), c.num_labels);
    EXPECT_GE(m.workspace, (lstm + dense) * sizeof(float)) << "less than the layers' own sizes";
    // Each of the two is a carved piece, padded to the carve's boundary (enhanced/carve.h).
    EXPECT_LE(m.workspace, (carved_count(lstm, sizeof(float)) + carved_count(dense, sizeof(float))) * sizeof(float))
        << "more than the layers' sizes and their alignment";
    const double lstm_weights = 2.0 * 4 * c.hidden * (c.embedding_dim + c.hidden) * sizeof(float);  // both directions
    EXPECT_GE(static_cast<double>(m.workspace), lstm_weights) << "no room for the packed weights";
  }
}

// The engine sizes the workspaces once, for its largest batch, and carves each smaller batch at
// that batch's own size: so each size must grow with the batch (a smaller batch whose carving
// were larger would write past the allocation).
TEST(MemoryEstimate, TheLayersWorkspacesGrowWithTheBatch) {
  for (const int seq_len : {1, 2, 20, 64})
    for (const int hidden : {1, 16, 128}) {
      size_t lstm = 0, dense = 0;
      for (int batch = 1; batch <= 600; ++batch) {
        const size_t lstm_now = bilstm_workspace_size<float>(batch, seq_len, 32, hidden);
        const size_t dense_now = dense_workspace_size<float>(batch, 2 * hidden, 104);
        ASSERT_GE(lstm_now, lstm) << "T " << seq_len << " H " << hidden << " B " << batch;
        ASSERT_GE(dense_now, dense) << "H " << hidden << " B " << batch;
        lstm = lstm_now, dense = dense_now;
      }
    }
}

TEST(MemoryEstimate, InferenceAndTheGpuHostSideHoldLess) {
  const ModelConfig c = small_config();
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  const MemoryEstimate inference = estimate_memory(c, nullptr, 4, Device::cpu);
  EXPECT_EQ(inference.gradients, 0u);
  EXPECT_EQ(inference.optimizer, 0u);
  EXPECT_GT(inference.activations, 0u);
  EXPECT_EQ(estimate_memory(c, &sgd, 4, Device::cpu).optimizer, 0u);  // plain SGD keeps no moments
  const MemoryEstimate gpu = estimate_memory(c, &sgd, 4, Device::cuda);
  EXPECT_EQ(gpu.total(), gpu.parameters);
}

// An inference engine allocates no gradients (the estimate says none) until compute_gradients
// asks for them, which still works.
TEST(MemoryEstimate, AnInferenceEngineMakesItsGradientsOnlyWhenAsked) {
  const ModelConfig c = small_config();
  ParameterBuffer<float> params(c);
  initialize_parameters(params, 1);
  const auto engine = make_cpu_engine(params, nullptr, EngineOptions{1, 1, {}});
  Batch batch;
  batch.size = 1;
  batch.seq_len = c.seq_len;
  batch.identifier_offsets.assign(static_cast<size_t>(c.seq_len) + 1, 0);
  batch.cur_word_ids.assign(static_cast<size_t>(c.seq_len), 3);
  batch.labels = {2};
  batch.sample_indices = {0};
  const double loss = engine->forward(batch, nullptr);
  EXPECT_EQ(engine->compute_gradients(batch, nullptr), loss);
  ParameterBuffer<float> grads;
  engine->download_gradients(grads);
  EXPECT_EQ(grads.size(), params.size());
}

TEST(MemoryEstimate, RefusalNamesTheEstimateItsPartsAndWhatIsAvailable) {
  MemoryEstimate m;
  m.parameters = 3ull << 30;
  m.optimizer = 6ull << 30;
  m.activations = (1ull << 29) + (1ull << 28);  // 0.75 GiB
  const AvailableMemory small{2ull << 30, "test"};
  try {
    check_fits_memory(m, "--hidden 9", small);
    FAIL() << "not refused";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--hidden 9 needs about 9.8 GiB (parameters 3.0, optimizer 6.0, activations 0.8); this machine "
                           "has 2.0 GiB available (test)");
  }
  EXPECT_NO_THROW(check_fits_memory(m, "x", AvailableMemory{10ull << 30, "test"}));
  EXPECT_NO_THROW(check_fits_memory(m, "x", AvailableMemory{7ull << 30, "test"}, 3ull << 30));  // weights loaded
  EXPECT_NO_THROW(check_fits_memory(m, "x", AvailableMemory{}));  // unknown: nothing refused
  EXPECT_EQ(memory_text(48ull << 20), "48.0 MiB");
  EXPECT_EQ(parse_meminfo_available("MemTotal:  100 kB\nMemFree: 5 kB\nMemAvailable:   2048 kB\n"), 2048u * 1024);
  EXPECT_EQ(parse_meminfo_available("MemTotal: 100 kB\n"), 0u);
  EXPECT_GT(available_memory().bytes, 0u) << "this machine's /proc/meminfo";
}

// A cgroup v2 tree: the job's group is limited to 8 GiB and has 3 GiB charged, 1 GiB of it page
// cache; its parent's 6 GiB limit leaves less. v1 lines and "max" limits are ignored.
TEST(MemoryEstimate, ReadsTheTightestCgroupLimitUpTheTree) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(ENHANCED_TEST_TMP) / ("cgroup." + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "jobs" / "one");
  auto write = [](const fs::path& path, const std::string& text) { std::ofstream(path) << text; };
  write(root / "jobs" / "one" / "memory.max", std::to_string(8ull << 30) + "\n");
  write(root / "jobs" / "one" / "memory.current", std::to_string(3ull << 30) + "\n");
  write(root / "jobs" / "one" / "memory.stat", "anon 2147483648\nfile 1073741824\nkernel 0\n");
  write(root / "jobs" / "memory.max", std::to_string(6ull << 30) + "\n");
  write(root / "jobs" / "memory.current", std::to_string(5ull << 30) + "\n");  // no memory.stat: all counted
  const std::string self = "4:memory:/elsewhere\n0::/jobs/one\n";
  const AvailableMemory tight = cgroup_available(self, root.string());
  EXPECT_EQ(tight.bytes, 1ull << 30);
  EXPECT_EQ(tight.source, (root / "jobs" / "memory.max").string());
  write(root / "jobs" / "memory.max", "max\n");
  EXPECT_EQ(cgroup_available(self, root.string()).bytes, 6ull << 30);  // 8 - (3 - 1)
  EXPECT_EQ(cgroup_available("4:memory:/x\n", root.string()).bytes, 0u);  // no v2 line: unknown
  fs::remove_all(root);
}

}  // namespace
}  // namespace enhanced
