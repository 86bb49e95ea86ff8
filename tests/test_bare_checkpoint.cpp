// A safetensors file without the engine's metadata (PyTorch's save_file(model.state_dict())):
// read by its tensors' shapes in enhanced-predict, enhanced-eval and enhanced-train --init-from,
// with --blend and --pool from flags, giving what the original checkpoint gives; and every
// mismatch named with both numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "app_runner.h"
#include "data_test_util.h"
#include "enhanced/checkpoint.h"
#include "enhanced/safetensors.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;
using test_util::error_of;

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
using Tensors = std::map<std::string, Tensor>;

Tensors tensors_of(const std::string& checkpoint) {
  const SafetensorsReader file(checkpoint);
  Tensors out;
  for (const auto& [name, tensor] : file.tensors()) out[name] = {tensor.shape, file.floats(name, tensor.shape)};
  return out;
}

// The tensors as a safetensors file with no metadata at all, as torch's save_file writes it.
std::string write_bare(const std::string& path, const Tensors& tensors) {
  SafetensorsWriter writer;
  for (const auto& [name, tensor] : tensors) writer.add(name, tensor.values.data(), tensor.shape);
  writer.write(path);
  test_util::drop_fuzz_seed("safetensors", path);
  return path;
}

class BareCheckpoint : public test_util::SmallDemoSuite {
 protected:
  static void SetUpTestSuite() {
    SmallDemoSuite::SetUpTestSuite();
    const std::string flags = testing::small_train_flags(files_) + "--device cpu --steps 5 --out ";
    for (const auto& [name, extra] : std::map<std::string, std::string>{
             {"feature", ""}, {"time", " --pool time"}, {"scalar", " --blend scalar-mean"}}) {
      ASSERT_EQ(testing::run_app("enhanced-train", flags + (root_ / name).string() + extra).exit_code, 0) << name;
      write_bare(bare(name), tensors_of(original(name)));
    }
  }

  static std::string original(const std::string& name) { return (root_ / name / "last.safetensors").string(); }
  static std::string bare(const std::string& name) { return (root_ / (name + ".bare.safetensors")).string(); }
  static std::string path(const std::string& name) { return (root_ / name).string(); }
  // enhanced-predict's CSV (stdout) and logits for a checkpoint.
  static std::pair<std::string, std::string> predictions(const std::string& checkpoint, const std::string& flags = "") {
    const auto run = testing::run_app("enhanced-predict", "--device cpu --threads 2 --quiet --top-k 2 --data " +
                                                              files_.test_ebin + " --checkpoint " + checkpoint +
                                                              " --logits " + path("z.npy") + " " + flags);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    return {run.output, testing::read_bytes(path("z.npy"))};
  }
};

TEST_F(BareCheckpoint, PredictAndEvalGiveTheOriginalsResults) {
  EXPECT_EQ(predictions(bare("feature")), predictions(original("feature")));
  EXPECT_EQ(predictions(bare("time"), "--pool time"), predictions(original("time")));
  EXPECT_EQ(predictions(bare("scalar"), "--blend scalar-mean"), predictions(original("scalar")));
  EXPECT_NE(predictions(bare("scalar")).second, predictions(original("scalar")).second)
      << "the default blend (mean) should compute something else";
  EXPECT_EQ(predictions(original("time"), "--pool time --blend mean"), predictions(original("time")))
      << "flags that agree with the metadata are accepted";
  const std::string eval = "--device cpu --threads 2 --json --data " + files_.test_ebin + " --checkpoint ";
  const auto a = testing::run_app("enhanced-eval", eval + bare("time") + " --pool time 2>/dev/null");
  const auto b = testing::run_app("enhanced-eval", eval + original("time") + " 2>/dev/null");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(nlohmann::json::parse(a.output), nlohmann::json::parse(b.output));
}

TEST_F(BareCheckpoint, InitFromTakesItAndTheFlags) {
  const std::string flags = "--data " + files_.train_ebin + " --device cpu --quiet --steps 1 --batch-size 16 --out ";
  const auto run = testing::run_app("enhanced-train", flags + path("from-bare") + " --init-from " + bare("time") + " --pool time");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const ParameterBuffer<float> params = load_checkpoint(path("from-bare/last.safetensors"));
  EXPECT_EQ(params.config.pool, PoolMode::time);
  EXPECT_EQ(params.config.hidden, 6);
  EXPECT_EQ(params.config.embedding_dim, 8);
  EXPECT_EQ(params.config.vocab_size, 128);
  EXPECT_EQ(params.config.seq_len, 16);
  const auto wrong = testing::run_app("enhanced-train", flags + path("from-bare-2") + " --init-from " + bare("time"));
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.output.find("error: " + bare("time") + ": checkpoint has T = 12, " + files_.train_ebin + " has T = 16"),
            std::string::npos)
      << wrong.output;
  const auto hidden = testing::run_app("enhanced-train", flags + path("from-bare-3") + " --init-from " + bare("feature") +
                                                             " --hidden 7");
  EXPECT_NE(hidden.output.find("error: --hidden 7 conflicts with " + bare("feature") + ", whose model has 6"),
            std::string::npos)
      << hidden.output;
  // Without the flag, enhanced-predict says what T the bare file gave and why.
  const auto predict = testing::run_app("enhanced-predict", "--device cpu --quiet --data " + files_.test_ebin +
                                                                " --checkpoint " + bare("time"));
  EXPECT_NE(predict.output.find("error: " + files_.test_ebin + ": T = 16 but " + bare("time") +
                                " was trained with T = 12 (without metadata, T is dense.weight's columns under feature "
                                "pooling: --pool time?)"),
            std::string::npos)
      << predict.output;
}

TEST_F(BareCheckpoint, ShapesThatDoNotFitAreNamedWithBothNumbers) {
  const Tensors good = tensors_of(original("feature"));
  const auto load = [&](const std::function<void(Tensors&)>& edit, const BareModelChoice& choice = {}) {
    Tensors t = good;
    edit(t);
    const std::string file = write_bare(path("edited.safetensors"), t);
    return error_of([&] { load_checkpoint(file, choice); });
  };
  EXPECT_EQ(load([](Tensors&) {}), "<no error>");
  EXPECT_CONTAINS(load([](Tensors& t) { t.erase("dense.bias"); }),
                  "edited.safetensors: no engine metadata, and the tensors are not the model's: missing 'dense.bias'");
  EXPECT_CONTAINS(load([](Tensors& t) { t["extra.weight"] = {{1}, {0.f}}; }), "the tensors are not the model's: unknown 'extra.weight'");
  EXPECT_CONTAINS(load([](Tensors& t) {
                    t.erase("lstm.bias_hh_l0");
                    t["lstm.bias_hh"] = {{1}, {0.f}};
                  }),
                  "missing 'lstm.bias_hh_l0'; unknown 'lstm.bias_hh'");
  EXPECT_CONTAINS(load([](Tensors& t) { t["lstm.weight_hh_l0"] = {{20, 6}, std::vector<float>(120)}; }),
                  "tensor 'lstm.weight_hh_l0' is (20, 6): (4H, H) needs 20 rows = 4 x 6 = 24");
  EXPECT_CONTAINS(load([](Tensors& t) { t["lstm.weight_ih_l0_reverse"] = {{24, 5}, std::vector<float>(120)}; }),
                  "tensor 'lstm.weight_ih_l0_reverse' has shape [24, 5], expected [24, 8] (the model its shapes give: "
                  "V = 128, D = 8, H = 6, T = 16, L = 4, feature pooling)");
  EXPECT_CONTAINS(load([](Tensors& t) { t["dense.bias"] = {{3}, std::vector<float>(3)}; }),
                  "tensor 'dense.bias' has shape [3], expected [4]");
  EXPECT_CONTAINS(load([](Tensors&) {}, {BlendMode::mean, PoolMode::time, 16}),
                  "tensor 'dense.weight' has 16 columns; time pooling needs 2H = 12 (H = 6 from lstm.weight_hh_l0)");
  EXPECT_CONTAINS(load([](Tensors& t) { t["embedding.weight"].shape = {128 * 8}; }),
                  "tensor 'embedding.weight' has 1 dimensions, expected 2 (V, D)");
  EXPECT_CONTAINS(load([](Tensors& t) { t["embedding.weight"] = {{0, 8}, {}}; }), "vocabulary size must be positive, got 0");
  EXPECT_CONTAINS(load([](Tensors& t) { t["dense.weight"].values[3] = std::nanf(""); }),
                  "tensor 'dense.weight' element 3 is nan");
}

}  // namespace
}  // namespace enhanced
