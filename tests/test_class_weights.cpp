// Class weights: scikit-learn's "balanced" rule, the weights file and its errors, and the engine's
// use of them (the training loss weighted, divided by the total weight or by B, evaluation's
// forward not), also in a data-parallel step's shards.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>

#include "app_runner.h"
#include "cuda_test_util.h"
#include "data_test_util.h"
#include "enhanced/common.h"
#include "enhanced/cpu.h"
#include "enhanced/data_parallel.h"
#include "enhanced/engine.h"
#include "layers/softmax_xent.h"
#include "train/class_weights.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;

TEST(ClassWeights, BalancedIsScikitLearnsRuleAndAnAbsentClassWeighsZero) {
  // n = 8 samples, L = 4: w_c = 8 / (4 * count_c).
  const std::vector<float> w = balanced_class_weights({3, 1, 0, 4});
  ASSERT_EQ(w.size(), 4u);
  EXPECT_FLOAT_EQ(w[0], 8.0f / 12.0f);
  EXPECT_FLOAT_EQ(w[1], 2.0f);
  EXPECT_EQ(w[2], 0.0f);
  EXPECT_FLOAT_EQ(w[3], 0.5f);
  // Balanced classes weigh 1 each.
  for (const float x : balanced_class_weights({5, 5, 5})) EXPECT_FLOAT_EQ(x, 1.0f);
}

class ClassWeightsFile : public ::testing::Test {
 protected:
  fs::path write(const std::string& text) {
    fs::create_directories(ENHANCED_TEST_TMP);  // this test may be the first to run
    const fs::path path = fs::path(ENHANCED_TEST_TMP) / ("weights." + std::to_string(::getpid()) + ".txt");
    std::ofstream(path, std::ios::trunc) << text;
    paths_.push_back(path);
    test_util::drop_fuzz_seed("class_weights", path.string(), cat(".", paths_.size()));
    return path;
  }
  void TearDown() override {
    for (const fs::path& path : paths_) fs::remove(path);
  }
  // The error message of reading `text` as L = 4 weights ("" when it reads).
  std::string error_of(const std::string& text) {
    try {
      read_class_weights(write(text).string(), 4);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::vector<fs::path> paths_;
};

TEST_F(ClassWeightsFile, ReadsWhitespaceAndCommaSeparatedNumbers) {
  const std::vector<float> w = read_class_weights(write("1, 2.5\n0\t3e-1\n").string(), 4);
  EXPECT_EQ(w, (std::vector<float>{1.0f, 2.5f, 0.0f, 0.3f}));
}

TEST_F(ClassWeightsFile, ErrorsNameTheFileAndThePosition) {
  const std::string bad = error_of("1 2\n0.5 x7\n");
  EXPECT_NE(bad.find("weights."), std::string::npos) << bad;
  EXPECT_NE(bad.find(":2:5: class weight 3"), std::string::npos) << bad;
  EXPECT_NE(bad.find("'x7' is not a number"), std::string::npos) << bad;
  EXPECT_NE(error_of("1,2,-3,4").find(":1:5: class weight 2: -3 is negative"), std::string::npos);
  EXPECT_NE(error_of("1 2 3 nan").find("class weight 3: nan is not a finite float"), std::string::npos);
  EXPECT_NE(error_of("1 2 3 1e39").find("class weight 3: 1e39 does not fit a float (at most 3.40282e+38)"),
            std::string::npos);
  EXPECT_NE(error_of("1 2 3").find("3 class weights, the model has 4 labels"), std::string::npos);
  EXPECT_NE(error_of("1 2 3 4 5").find(":1:9: class weight 4: more than 4 numbers"), std::string::npos);
  EXPECT_THROW(read_class_weights("/nonexistent/weights.txt", 4), Error);
}

// L = 4 weights are at most 4 lines of 64 bytes: a file one byte longer is refused by its size.
TEST_F(ClassWeightsFile, AFileLongerThanLNumbersCanBeIsRefused) {
  const std::string padded = "1 2 3 4" + std::string(256 - 7, ' ');
  EXPECT_EQ(error_of(padded), "");
  EXPECT_NE(error_of(padded + " ").find(": 257 bytes, longer than the 256 that 4 class weights can be (4 lines of a "
                                        "number, at most 64 bytes each)"),
            std::string::npos);
}

// --class-weights /dev/zero grew to 1.2 GB; a 1 GiB file (sparse) is refused by its size under
// an address-space limit that reading it whole could not pass, and a device is not read at all.
TEST(ClassWeightsApp, ADeviceOrAHugeFileIsRefusedBeforeItIsRead) {
  const fs::path dir = fs::path(ENHANCED_TEST_TMP) / ("weights-app." + std::to_string(::getpid()));
  fs::remove_all(dir);
  const DemoFiles files = testing::write_small_demo(dir / "data");
  const std::string big = (dir / "big.txt").string();
  std::ofstream(big) << "1 1 1 1\n";
  fs::resize_file(big, uint64_t{1} << 30);
  const std::string flags = testing::small_train_flags(files) + "--device cpu --steps 1 --out " + (dir / "run").string();
  const auto huge = testing::run_app("enhanced-train", flags + " --class-weights " + big, 1536);
  EXPECT_EQ(huge.exit_code, 1) << huge.output;
  EXPECT_NE(huge.output.find("error: " + big + ": 1073741824 bytes, longer than the 256 that 4 class weights can be"),
            std::string::npos)
      << huge.output;
  const auto device = testing::run_app("enhanced-train", flags + " --class-weights /dev/zero", 1536, 60);
  EXPECT_EQ(device.exit_code, 1) << device.output;
  EXPECT_NE(device.output.find("error: /dev/zero: not a regular file (a character device)"), std::string::npos)
      << device.output;
  fs::remove_all(dir);
}

// The batch's class-weighted sum of losses and its sum of weights, by hand from the logits.
struct WeightedSums {
  double weighted_nll = 0, weights = 0;
};
WeightedSums weighted_sums(const std::vector<float>& logits, const Batch& batch, const std::vector<float>& weights,
                           int num_labels) {
  std::vector<float> probabilities(logits.size());
  softmax_probabilities(probabilities.data(), logits.data(), batch.size, num_labels);
  WeightedSums sums;
  for (int b = 0; b < batch.size; ++b) {
    const double w = weights[batch.labels[b]];
    sums.weighted_nll -= w * std::log(probabilities[static_cast<size_t>(b) * num_labels + batch.labels[b]]);
    sums.weights += w;
  }
  return sums;
}

// A small model, one training batch and four class weights, for the engine's weighted loss.
class WeightedEngine : public ::testing::Test {
 protected:
  const ModelConfig config = testing::small_config(BlendMode::mean, PoolMode::feature, 3);
  const std::vector<Batch> batches = testing::training_batches(config, 1, 21);
  const Batch& batch = batches[0];
  ParameterBuffer<float> params{config};
  OptimizerState state{OptimizerConfig{}, config};
  const std::vector<float> weights = {0.5f, 2.0f, 1.0f, 0.25f};
  void SetUp() override { initialize_parameters(params, 4); }
};

TEST_F(WeightedEngine, WeighsTrainingLossesNotEvaluation) {
  const std::unique_ptr<Engine> plain = make_engine(Device::cpu, params, &state, EngineOptions{4, 1, {}});
  const std::unique_ptr<Engine> weighted = make_engine(Device::cpu, params, &state, EngineOptions{4, 1, {}, weights});
  std::vector<float> logits(static_cast<size_t>(batch.size) * config.num_labels);
  const double unweighted = plain->forward(batch, logits.data());
  const WeightedSums sums = weighted_sums(logits, batch, weights, config.num_labels);
  EXPECT_NEAR(weighted->compute_gradients(batch, nullptr), sums.weighted_nll / sums.weights, 1e-5);
  EXPECT_EQ(weighted->forward(batch, nullptr), unweighted) << "evaluation stays unweighted";
  EXPECT_THROW(make_engine(Device::cpu, params, &state, EngineOptions{4, 1, {}, {1.0f, 2.0f}}), Error);
  EXPECT_THROW(make_engine(Device::cpu, params, &state, EngineOptions{4, 1, {}, {1.0f, -2.0f, 1.0f, 1.0f}}), Error);
}

// Keras' class_weight (ClassWeightMean::batch): the training loss is sum_b w[y_b] * nll_b / B,
// not torch's / sum_b w[y_b]; evaluation stays unweighted.
TEST_F(WeightedEngine, DividesByTheBatchSizeForKeras) {
  EngineOptions options{4, 1, {}, weights};
  options.class_weight_mean = ClassWeightMean::batch;
  const std::unique_ptr<Engine> plain = make_engine(Device::cpu, params, &state, EngineOptions{4, 1, {}});
  const std::unique_ptr<Engine> keras = make_engine(Device::cpu, params, &state, options);
  std::vector<float> logits(static_cast<size_t>(batch.size) * config.num_labels);
  const double unweighted = plain->forward(batch, logits.data());
  const WeightedSums sums = weighted_sums(logits, batch, weights, config.num_labels);
  ASSERT_GT(std::fabs(sums.weighted_nll / sums.weights - sums.weighted_nll / batch.size), 1e-3)
      << "the batch must tell them apart";
  EXPECT_NEAR(keras->compute_gradients(batch, nullptr), sums.weighted_nll / batch.size, 1e-5);
  EXPECT_EQ(keras->forward(batch, nullptr), unweighted) << "evaluation stays unweighted";
}

// A data-parallel step's shards (take_shard over 3 ranks) divide by the whole batch's
// denominator in either mode: their loss shares sum to the whole batch's loss, and each shard's
// gradient rows are the whole batch's rows.
TEST(ClassWeights, ShardsDivideByTheWholeBatchsDenominatorInEitherMode) {
  Random random(31);
  const int B = 7, L = 4, T = 3, ranks = 3;
  const Batch batch = testing::random_batch(B, T, 11, L, random);
  std::vector<double> logits(static_cast<size_t>(B) * L);
  for (double& x : logits) x = random.uniform(-3, 3);
  const std::vector<float> weights = {0.5f, 2.0f, 1.25f, 0.0f};
  for (const ClassWeightMean mean : {ClassWeightMean::weights, ClassWeightMean::batch}) {
    SCOPED_TRACE(to_string(mean));
    std::vector<double> whole_rows(logits.size()), losses(B);
    double whole_loss = 0;
    softmax_cross_entropy(whole_rows.data(), losses.data(), &whole_loss, logits.data(), batch.labels.data(),
                          weights.data(), B, L, nullptr, mean);
    double shares = 0;
    for (int rank = 0; rank < ranks; ++rank) {
      Batch part;
      LossDenominator whole;
      const Shard shard = take_shard(part, batch, rank, ranks, weights.data(), &whole, mean);
      EXPECT_EQ(whole.batch, B);
      double expected_denominator = B;
      if (mean == ClassWeightMean::weights) {
        expected_denominator = 0;
        for (int b = 0; b < B; ++b) expected_denominator += weights[batch.labels[b]];
      }
      EXPECT_EQ(whole.weighted, expected_denominator);
      std::vector<double> rows(static_cast<size_t>(shard.count) * L), part_losses(shard.count);
      double share = 0;
      const double* part_logits = logits.data() + static_cast<size_t>(shard.first) * L;
      softmax_cross_entropy(rows.data(), part_losses.data(), &share, part_logits, part.labels.data(), weights.data(),
                            shard.count, L, &whole);
      shares += share;
      for (size_t i = 0; i < rows.size(); ++i)
        EXPECT_EQ(rows[i], whole_rows[static_cast<size_t>(shard.first) * L + i]) << "rank " << rank;
    }
    EXPECT_NEAR(shares, whole_loss, 1e-12);
  }
}

}  // namespace
}  // namespace enhanced
