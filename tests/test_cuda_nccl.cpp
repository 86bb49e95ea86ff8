// The CUDA engine's data-parallel path (NCCL, docs/distributed.md) on one GPU: NCCL refuses two
// ranks on one device, so these run a communicator of ONE rank, which still takes every step of
// the path: the shard (all of the batch), the whole batch's loss denominators read on the device,
// the packing of the touched rows, the NCCL group (dense all-reduce, loss and correct sums, the
// two all-gathers), the merge in rank order, the union of the rows, the two graphs around the
// collectives. With one rank each of those is exact (a sum over one rank is a copy, a row added
// to zero is itself, the same denominators divide, the union is the rank's own sorted rows), so
// the tolerance is zero: the weights, moments and totals must equal the plain CUDA engine's
// bit for bit. The merge of several ranks is checked without NCCL by ExchangeKernelsMergeRanks*.
//
// Written once, compiled where the CUDA backend is (tests/CMakeLists.txt lists these names in a
// build without it, each SKIPPED with the reason); without a usable GPU each test is SKIPPED with
// the reason, and so is each NCCL one without NCCL in the build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "enhanced/communicator.h"
#include "enhanced/optimizer_config.h"
#include "enhanced/random.h"

#include "engine/cuda_exchange.h"
#include "kernels/row_exchange.cuh"

namespace enhanced {
namespace {

using testing::small_config;
using testing::standard_lstm_options;
using testing::training_batches;

#define SKIP_WITHOUT_NCCL()                                                                         \
  do {                                                                                              \
    SKIP_WITHOUT_GPU();                                                                             \
    if (!built_with_nccl()) GTEST_SKIP() << "NCCL: " << nccl_version();                             \
  } while (0)

struct OneRankCase {
  const char* name;
  OptimizerConfig optimizer;
  std::vector<float> class_weights = {};
  bool graphs = true;
  PoolMode pool = PoolMode::feature;
  size_t collect_every = 5;  // steps between two reads of the totals
  ClassWeightMean class_weight_mean = ClassWeightMean::weights;
};

std::vector<OneRankCase> one_rank_cases() {
  std::vector<OneRankCase> cases;
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.learning_rate = 0.2f;
  sgd.momentum = 0.9f;
  cases.push_back({"SGD with momentum, dense", sgd});
  OptimizerConfig adam;
  adam.learning_rate = 0.02f;
  cases.push_back({"Adam, dense, time pooling", adam, {}, true, PoolMode::time});
  OptimizerConfig lazy = adam;
  lazy.lazy_embedding = true;
  lazy.clip_norm = 0.05f;
  cases.push_back({"lazy Adam, clipped, class weights", lazy, {0.5f, 2.0f, 1.0f, 0.25f}});
  cases.push_back({"lazy Adam without graphs", lazy, {}, false});
  // Each step's totals alone: its loss is the whole batch's, read back from the reduced sums.
  cases.push_back({"Adam, class weights, totals every step", adam, {1.0f, 0.5f, 3.0f, 1.0f}, true,
                   PoolMode::feature, 1});
  cases.push_back({"Adam, class weights divided by B (Keras), totals every step", adam, {1.0f, 0.5f, 3.0f, 1.0f},
                   true, PoolMode::feature, 1, ClassWeightMean::batch});
  return cases;
}

// 20 training steps of batches of 4 and 2 (graphs captured and replayed), through Engine on
// both: the plain CUDA engine, and one that takes the data-parallel path alone (exchange_alone).
void check_one_rank(const OneRankCase& c) {
  SCOPED_TRACE(c.name);
  ModelConfig config = small_config(BlendMode::mean, c.pool, 6);
  const std::vector<Batch> batches = training_batches(config, 20, 57);
  ParameterBuffer<float> initial(config);
  initialize_parameters(initial, 21);
  CudaOptions options = standard_lstm_options();  // both engines: the same algorithm
  options.graphs = c.graphs;
  Communicator alone;
  EngineOptions plain_options = testing::gpu_options(options, c.class_weights);
  plain_options.class_weight_mean = c.class_weight_mean;
  EngineOptions ranked_options = plain_options;
  ranked_options.communicator = &alone;
  ranked_options.exchange_alone = true;
  testing::EngineRun plain(Device::cuda, initial, c.optimizer, plain_options);
  testing::EngineRun ranked(Device::cuda, initial, c.optimizer, ranked_options);
  for (size_t step = 0; step < batches.size(); ++step) {
    const float lr = c.optimizer.learning_rate * (1.0f - 0.02f * static_cast<float>(step));
    plain.engine->enqueue_train_step(batches[step], lr);
    ranked.engine->enqueue_train_step(batches[step], lr);
    if ((step + 1) % c.collect_every == 0) {
      const TrainTotals want = plain.engine->collect(), got = ranked.engine->collect();
      ASSERT_EQ(got.halted, Halt::none);
      EXPECT_EQ(got.steps, want.steps);
      EXPECT_EQ(got.samples, want.samples);
      EXPECT_EQ(got.correct, want.correct);
      EXPECT_EQ(got.loss_sum, want.loss_sum) << "interval ending at step " << step + 1;
    }
  }
  if (c.graphs) {
    std::string note;
    EXPECT_GT(testing::graph_replays(*ranked.engine, &note), 0) << note;
  }
  const std::string summary = ranked.engine->summary();
  EXPECT_NE(summary.find("data-parallel: rank 0 of 1, NCCL"), std::string::npos) << summary;
  plain.sync();
  ranked.sync();
  testing::expect_same_bits(ranked.params, plain.params, "parameters");
  double moved = 0;
  for (size_t i = 0; i < plain.params.size(); ++i)
    moved = std::max(moved, static_cast<double>(std::fabs(plain.params.data[i] - initial.data[i])));
  EXPECT_GT(moved, 1e-2) << "training barely moved the weights: the comparison would be vacuous";
  for (size_t m = 0; m < plain.state.moments.size(); ++m)
    testing::expect_same_bits(ranked.state.moments[m], plain.state.moments[m], "moment " + std::to_string(m));
  EXPECT_EQ(ranked.state.steps, plain.state.steps);
}

TEST(CudaNccl, OneRankTrainingStepsEqualThePlainEngine) {
  SKIP_WITHOUT_NCCL();
  for (const OneRankCase& c : one_rank_cases()) check_one_rank(c);
}

// compute_gradients on a data-parallel rank writes rows into the workspace's list, which the
// next exchanged step's clear does not name: they must be cleared all the same.
TEST(CudaNccl, GradientsBetweenStepsLeaveNoRowsBehind) {
  SKIP_WITHOUT_NCCL();
  testing::expect_gradients_between_data_parallel_steps_leave_no_rows(Device::cuda,
                                                                      testing::gpu_options(standard_lstm_options()));
}

// The exchange's kernels for three ranks without NCCL: each rank's rows packed into its block of
// the gathered buffers (what ncclAllGather would leave), then merged: the sums must be the CPU
// CpuGradientExchange's (every rank's rows added to zero in rank order, float by float), the union
// its sorted distinct rows, and the packed rows of each rank's table cleared.
TEST(CudaNccl, ExchangeKernelsMergeRanksInRankOrderAsTheCpu) {
  SKIP_WITHOUT_GPU();
  const int V = 40, D = 3, ranks = 3;
  const int64_t bound = 9;
  Random random(5);
  cuda::UniqueStream stream = cuda::make_stream();
  std::vector<std::vector<int32_t>> rows(ranks);
  std::vector<std::vector<float>> tables(ranks, std::vector<float>(static_cast<size_t>(V) * D, 0.0f));
  for (int r = 0; r < ranks; ++r) {
    for (int32_t v = 0; v < V; ++v)
      if (random.uniform() < 0.15 && static_cast<int64_t>(rows[r].size()) < bound - r) rows[r].push_back(v);
    for (int32_t v : rows[r])
      for (int d = 0; d < D; ++d) tables[r][static_cast<size_t>(v) * D + d] = static_cast<float>(random.normal());
  }
  rows[1].clear();  // a rank with an empty shard
  std::fill(tables[1].begin(), tables[1].end(), 0.0f);
  // The CPU exchange's arithmetic: zero, then each rank's rows added in rank order.
  std::vector<float> want(static_cast<size_t>(V) * D, 0.0f);
  std::vector<int32_t> want_rows;
  for (int r = 0; r < ranks; ++r)
    for (int32_t v : rows[r]) {
      for (int d = 0; d < D; ++d) want[static_cast<size_t>(v) * D + d] += tables[r][static_cast<size_t>(v) * D + d];
      want_rows.push_back(v);
    }
  std::sort(want_rows.begin(), want_rows.end());
  want_rows.erase(std::unique(want_rows.begin(), want_rows.end()), want_rows.end());

  cuda::DeviceBuffer<int32_t> ids(ranks * bound), device_rows(bound), count(1);
  cuda::DeviceBuffer<float> values(ranks * bound * D), table(static_cast<size_t>(V) * D), merged(table.size());
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(merged.data(), 0, merged.bytes(), stream));
  for (int r = 0; r < ranks; ++r) {
    const int32_t n = static_cast<int32_t>(rows[r].size());
    cuda::copy_to_device(table.data(), tables[r].data(), tables[r].size(), stream);
    if (n) cuda::copy_to_device(device_rows.data(), rows[r].data(), rows[r].size(), stream);
    cuda::copy_to_device(count.data(), &n, 1, stream);
    cuda::pack_touched_rows(ids.data() + r * bound, values.data() + r * bound * D, table.data(), device_rows.data(),
                            n ? count.data() : nullptr, bound, D, V, stream);
    std::vector<float> left(table.size());
    cuda::copy_to_host(left.data(), table.data(), left.size(), stream);
    EXPECT_TRUE(std::all_of(left.begin(), left.end(), [](float x) { return x == 0.0f; }))
        << "rank " << r << ": the packed rows must be cleared";
  }
  for (int r = 0; r < ranks; ++r)
    cuda::add_packed_rows(merged.data(), ids.data() + r * bound, values.data() + r * bound * D, bound, D, V, stream);
  cuda::PackedRowUnion row_union;
  row_union.reserve(ranks * bound, V, stream);
  row_union.run(ids.data(), stream);
  std::vector<float> got(merged.size());
  cuda::copy_to_host(got.data(), merged.data(), got.size(), stream);
  int32_t union_count = -1;
  cuda::copy_to_host(&union_count, row_union.row_count(), 1, stream);
  ASSERT_EQ(union_count, static_cast<int32_t>(want_rows.size()));
  std::vector<int32_t> got_rows(static_cast<size_t>(union_count));
  if (union_count) cuda::copy_to_host(got_rows.data(), row_union.rows(), got_rows.size(), stream);
  EXPECT_EQ(got_rows, want_rows);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
  EXPECT_GT(want_rows.size(), rows[0].size()) << "the ranks' rows should overlap only in part";
}

}  // namespace
}  // namespace enhanced
