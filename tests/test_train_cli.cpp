// enhanced-train and enhanced-eval end to end on a tiny demo set: determinism, exact resume,
// divergence handling, and one clear line for each bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include "app_runner.h"
#include "data_test_util.h"
#include "state_compare.h"
#include "enhanced/checkpoint.h"
#include "enhanced/demo.h"
#include "enhanced/precision.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::run_app;

class TrainCli : public test_util::SmallDemoSuite {
 protected:
  static std::string base_flags() { return testing::small_train_flags(files_) + "--device cpu "; }
  static fs::path dir(const std::string& name) { return root_ / name; }
};

TEST_F(TrainCli, SameCommandTwiceGivesBitIdenticalCheckpoints) {
  for (const char* run : {"det-a", "det-b"}) {
    const auto result = run_app("enhanced-train", base_flags() + "--epochs 2 --out " + dir(run).string());
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }
  for (const char* file : {"last.safetensors", "best.safetensors", "optimizer.safetensors"}) {
    const std::string a = read_bytes(dir("det-a") / file), b = read_bytes(dir("det-b") / file);
    ASSERT_FALSE(a.empty()) << file;
    EXPECT_TRUE(a == b) << file << " differs between two identical runs";
  }
  // One metrics line per log interval and per epoch, with the fields a plot needs.
  std::ifstream metrics(dir("det-a") / "metrics.jsonl");
  int epochs = 0, lines = 0;
  for (std::string line; std::getline(metrics, line); ++lines) {
    const auto json = nlohmann::json::parse(line);
    for (const char* key : {"step", "epoch", "loss", "accuracy", "lr"}) EXPECT_TRUE(json.contains(key)) << line;
    if (json["kind"] == "epoch") {
      ++epochs;
      EXPECT_TRUE(json.contains("valid_loss")) << line;
    } else {
      EXPECT_TRUE(json.contains("samples_per_s") && json.contains("seconds")) << line;
    }
  }
  EXPECT_EQ(epochs, 2);
  EXPECT_GT(lines, 2);
}

TEST_F(TrainCli, ResumeEqualsTheUninterruptedRunBitForBit) {
  const std::string flags = base_flags() + "--optimizer sgd --lr 0.05 --momentum 0.9 ";
  ASSERT_EQ(run_app("enhanced-train", flags + "--epochs 3 --out " + dir("full").string()).exit_code, 0);
  // Stopped at an epoch boundary, and in the middle of an epoch (5 batches an epoch).
  ASSERT_EQ(run_app("enhanced-train", flags + "--epochs 1 --out " + dir("cut-epoch").string()).exit_code, 0);
  ASSERT_EQ(run_app("enhanced-train", flags + "--steps 7 --out " + dir("cut-middle").string()).exit_code, 0);
  for (const char* run : {"cut-epoch", "cut-middle"}) {
    const auto result = run_app("enhanced-train", "--resume --epochs 3 --quiet --out " + dir(run).string());
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_TRUE(read_bytes(dir("full") / "last.safetensors") == read_bytes(dir(run) / "last.safetensors")) << run;
    EXPECT_TRUE(testing::same_state_apart_from_metrics(dir("full") / "optimizer.safetensors", dir(run) / "optimizer.safetensors"))
        << run;
  }
}

// --precision: a resumed run keeps the arithmetic it was recorded with (bf16-emulated rounds every
// GEMM operand, so an FP32 continuation would give other bits), and an unusable one is one line.
TEST_F(TrainCli, PrecisionIsKeptOnResumeAndRefusedInOneLineWhereTheCpuCannot) {
  const std::string flags = base_flags() + "--precision bf16-emulated ";
  ASSERT_EQ(run_app("enhanced-train", flags + "--epochs 2 --out " + dir("bf16-full").string()).exit_code, 0);
  ASSERT_EQ(run_app("enhanced-train", flags + "--steps 7 --out " + dir("bf16-cut").string()).exit_code, 0);
  const auto resumed = run_app("enhanced-train", "--resume --epochs 2 --quiet --out " + dir("bf16-cut").string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(read_bytes(dir("bf16-full") / "last.safetensors") == read_bytes(dir("bf16-cut") / "last.safetensors"));
  ASSERT_EQ(run_app("enhanced-train", base_flags() + "--epochs 2 --out " + dir("fp32-full").string()).exit_code, 0);
  EXPECT_FALSE(read_bytes(dir("fp32-full") / "last.safetensors") == read_bytes(dir("bf16-full") / "last.safetensors"))
      << "bf16-emulated trained the same bits as fp32";
  const auto unknown = run_app("enhanced-train", base_flags() + "--precision fp16 --steps 1 --out " + dir("p16").string());
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.output.find("error: --precision must be fp32, bf16 or bf16-emulated"), std::string::npos)
      << unknown.output;
  if (!cpu_bf16_support().avx512_bf16) {
    const auto refused = run_app("enhanced-train", base_flags() + "--precision bf16 --steps 1 --out " + dir("pbf").string());
    EXPECT_NE(refused.exit_code, 0);
    EXPECT_NE(refused.output.find("error: --precision bf16 needs a CPU with bfloat16 instructions"), std::string::npos)
        << refused.output;
    EXPECT_FALSE(fs::exists(dir("pbf") / "last.safetensors"));
  }
}

TEST_F(TrainCli, DivergenceStopsAndLeavesTheLastGoodCheckpointLoadable) {
  const auto result = run_app("enhanced-train", base_flags() + "--optimizer sgd --lr 1e38 --epochs 5 --checkpoint-every 1 "
                                                "--out " + dir("diverge").string());
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("non-finite"), std::string::npos) << result.output;
  ASSERT_TRUE(fs::exists(dir("diverge") / "last.safetensors")) << result.output;
  EXPECT_NO_THROW(load_checkpoint((dir("diverge") / "last.safetensors").string()));
  const auto eval = run_app("enhanced-eval", "--data " + files_.test_ebin + " --checkpoint " +
                                                 (dir("diverge") / "last.safetensors").string());
  EXPECT_EQ(eval.exit_code, 0) << eval.output;
}

// A halt is reported when the steps' totals are collected: after every step (log-every 1), or
// only at the end of the epoch (log-every 1000). Either way the message names the same
// step, epoch and batch, the exit status is 3 and no checkpoint is written after it.
TEST_F(TrainCli, DivergenceIsReportedAtTheSameStepHoweverOftenTotalsAreCollected) {
  const std::string flags = base_flags() + "--optimizer sgd --lr 1e38 --epochs 3 ";
  const auto each = run_app("enhanced-train", flags + "--log-every 1 --out " + dir("halt-each").string());
  const auto late = run_app("enhanced-train", flags + "--log-every 1000 --out " + dir("halt-late").string());
  EXPECT_EQ(each.exit_code, 3) << each.output;
  EXPECT_EQ(late.exit_code, 3) << late.output;
  const auto message = testing::halt_message;
  ASSERT_FALSE(message(each.output).empty()) << each.output;
  EXPECT_EQ(message(late.output), message(each.output));
  EXPECT_EQ(message(each.output).rfind("error: non-finite loss", 0), 0u) << each.output;
  EXPECT_NE(message(each.output).find(" at step "), std::string::npos) << each.output;
  EXPECT_NE(message(each.output).find("(epoch 1, batch "), std::string::npos) << each.output;
  EXPECT_FALSE(fs::exists(dir("halt-late") / "last.safetensors")) << late.output;
}

TEST_F(TrainCli, EvalReportsJsonAndWritesEveryPrediction) {
  ASSERT_EQ(run_app("enhanced-train", base_flags() + "--epochs 1 --out " + dir("eval").string()).exit_code, 0);
  const std::string checkpoint = (dir("eval") / "last.safetensors").string();
  const fs::path predictions = dir("eval") / "predictions.csv";
  const auto result = run_app("enhanced-eval", "--json --data " + files_.test_ebin + " --checkpoint " + checkpoint +
                                                   " --predictions " + predictions.string() + " 2>/dev/null");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto json = nlohmann::json::parse(result.output);
  EXPECT_EQ(json["samples"], 24);
  EXPECT_EQ(json["confusion"].size(), 4u);
  const double accuracy = json["accuracy"];
  EXPECT_GE(accuracy, 0.0);
  EXPECT_LE(accuracy, 1.0);
  std::ifstream csv(predictions);
  int rows = 0;
  for (std::string line; std::getline(csv, line);) ++rows;
  EXPECT_EQ(rows, 25);  // header + one row a sample
}

struct BadInput {
  const char* name;
  std::string arguments;      // appended to the training flags or given alone
  std::vector<std::string> message_parts;
};

TEST_F(TrainCli, BadInputsGiveOneClearLineAndANonZeroExit) {
  const fs::path bad = dir("bad");
  fs::create_directories(bad);
  // An embedding table with a NaN at row 3, column 2.
  std::vector<float> table(128 * 8, 0.1f);
  table[3 * 8 + 2] = std::numeric_limits<float>::quiet_NaN();
  std::ofstream(bad / "nan.bin", std::ios::binary).write(reinterpret_cast<const char*>(table.data()), 128 * 8 * 4);
  ASSERT_EQ(run_app("enhanced-train", base_flags() + "--steps 1 --out " + (bad / "ok").string()).exit_code, 0);
  std::ofstream(bad / "not-a-dir") << "x";
  // A word2vec header promising 2^62 + 1 rows (a size that wraps if multiplied unchecked).
  std::ofstream(bad / "huge.w2v", std::ios::binary) << "4611686018427387905 8\n" << std::string(64, 'x');
  // An .npy of int32 whose header mentions '<f4' elsewhere.
  {
    std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (128, 8), 'x': '<f4', }";
    header.append(118 - header.size(), ' ');
    header += '\n';
    std::ofstream npy(bad / "ints.npy", std::ios::binary);
    npy << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(header.size()) << '\x00' << header
        << std::string(128 * 8 * 4, '\0');
  }
  const std::string data = "--data " + files_.train_ebin + " --hidden 4 --quiet --steps 1 ";
  const std::vector<BadInput> cases = {
      {"id >= V", data + "--vocab-size 50 --out " + (bad / "a").string(), {files_.train_ebin, "sample", "position"}},
      {"label >= L", data + "--num-labels 2 --out " + (bad / "b").string(), {files_.train_ebin, "sample", "label"}},
      {"NaN in embeddings", data + "--pretrained " + (bad / "nan.bin").string() + " --embedding-dim 8 --out " + (bad / "c").string(),
       {"nan.bin", "row 3", "column 2"}},
      {"embedding V mismatch", data + "--pretrained " + files_.embeddings + " --embedding-dim 8 --vocab-size 100 --out " + (bad / "d").string(),
       {"emb.bin", "128", "100"}},
      {"embedding D mismatch", data + "--pretrained " + files_.embeddings + " --embedding-dim 7 --out " + (bad / "e").string(),
       {"emb.bin", "7"}},
      {"unwritable --out", data + "--out " + (bad / "not-a-dir" / "run").string(), {"not-a-dir"}},
      {"missing data", "--data " + (bad / "missing.ebin").string() + " --out " + (bad / "f").string(), {"missing.ebin"}},
      {"checkpoint is not safetensors", data + "--init-from " + files_.train_ebin + " --out " + (bad / "g").string(),
       {files_.train_ebin}},
      {"word2vec header larger than the file", data + "--pretrained " + (bad / "huge.w2v").string() + " --out " + (bad / "h").string(),
       {"huge.w2v", "4611686018427387905"}},
      {".npy of int32", data + "--pretrained " + (bad / "ints.npy").string() + " --out " + (bad / "i").string(),
       {"ints.npy", "'<i4'"}},
      {"a directory as the embedding file", data + "--pretrained " + bad.string() + " --out " + (bad / "j").string(),
       {"not a regular file"}},
      {"Adam epsilon 0", data + "--epsilon 0 --out " + (bad / "k").string(), {"epsilon"}},
      {"beta1 1", data + "--beta1 1 --out " + (bad / "l").string(), {"beta1"}},
  };
  for (const BadInput& c : cases) {
    const auto result = run_app("enhanced-train", c.arguments);
    EXPECT_NE(result.exit_code, 0) << c.name << ": " << result.output;
    const std::string line = test_util::line_starting(result.output, "error: ");
    ASSERT_FALSE(line.empty()) << c.name << ": " << result.output;
    for (const std::string& part : c.message_parts) EXPECT_NE(line.find(part), std::string::npos) << c.name << ": " << line;
  }
  // A checkpoint whose T does not match the data, at evaluation.
  DemoOptions other;
  other.train_samples = other.valid_samples = other.test_samples = 4;
  other.seq_len = 12;
  other.vocab_size = 128;
  const DemoFiles short_files = write_demo((bad / "short").string(), other);
  const auto result = run_app("enhanced-eval", "--data " + short_files.test_ebin + " --checkpoint " +
                                                   (bad / "ok" / "last.safetensors").string());
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("T = 12"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("T = 16"), std::string::npos) << result.output;
}

// Resuming reads only optimizer.safetensors (weights included), written atomically: losing or
// corrupting last.safetensors, as a crash between the two writes would, changes nothing.
TEST_F(TrainCli, ResumeNeedsOnlyTheStateFile) {
  const std::string flags = base_flags() + "--optimizer adam --lr 0.01 ";
  ASSERT_EQ(run_app("enhanced-train", flags + "--epochs 2 --out " + dir("state-full").string()).exit_code, 0);
  ASSERT_EQ(run_app("enhanced-train", flags + "--steps 3 --out " + dir("state-cut").string()).exit_code, 0);
  std::ofstream(dir("state-cut") / "last.safetensors", std::ios::trunc) << "torn";
  const auto result = run_app("enhanced-train", "--resume --epochs 2 --quiet --out " + dir("state-cut").string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(read_bytes(dir("state-full") / "last.safetensors") == read_bytes(dir("state-cut") / "last.safetensors"));
}

// Class weights (balanced, or a file) and weight decay are recorded in the run's options: a
// resumed run continues with them, bit for bit; they change what is trained.
TEST_F(TrainCli, ClassWeightsAndWeightDecayResumeBitForBit) {
  const fs::path weights = root_ / "class-weights.txt";
  std::ofstream(weights) << "0.5, 2\n1 0.25\n";
  for (const std::string& spec : {std::string("balanced"), weights.string()}) {
    const std::string name = spec == "balanced" ? "balanced" : "file";
    const std::string flags = base_flags() + "--optimizer adam --lr 0.01 --weight-decay 0.05 --weight-decay-embedding "
                                             "--class-weights " + spec + " ";
    ASSERT_EQ(run_app("enhanced-train", flags + "--epochs 2 --out " + dir(name + "-full").string()).exit_code, 0);
    ASSERT_EQ(run_app("enhanced-train", flags + "--steps 7 --out " + dir(name + "-cut").string()).exit_code, 0);
    const auto result = run_app("enhanced-train", "--resume --epochs 2 --quiet --out " + dir(name + "-cut").string());
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const fs::path full = dir(name + "-full") / "last.safetensors", cut = dir(name + "-cut") / "last.safetensors";
    EXPECT_TRUE(read_bytes(full) == read_bytes(cut)) << spec;
  }
  const std::string plain = base_flags() + "--optimizer adam --lr 0.01 --weight-decay 0.05 --weight-decay-embedding ";
  ASSERT_EQ(run_app("enhanced-train", plain + "--epochs 2 --out " + dir("unweighted").string()).exit_code, 0);
  EXPECT_FALSE(read_bytes(dir("unweighted") / "last.safetensors") == read_bytes(dir("file-full") / "last.safetensors"));
  const auto bad = run_app("enhanced-train", base_flags() + "--class-weights " + (root_ / "missing.txt").string() +
                                                 " --out " + dir("bad-weights").string());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("missing.txt: cannot open the class weights file"), std::string::npos) << bad.output;
}

// The vocabulary comes from the ids the model looks up (fields 0 and 2), not from field 1.
TEST(TrainVocabulary, AuxiliaryIdsDoNotSizeTheTable) {
  const fs::path dir = fs::path(ENHANCED_TEST_TMP) / ("vocab." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream jsonl(dir / "in.jsonl");
    jsonl << R"({"label": 0, "tokens": [[[3], [900000], [7]], [[], [], [9]]]})" << "\n"
          << R"({"label": 1, "tokens": [[[11, 2], [5], [4]], [[1], [], [0]]]})" << "\n";
  }
  ASSERT_EQ(run_app("enhanced-data", "convert " + (dir / "in.jsonl").string() + " " + (dir / "in.ebin").string() +
                                         " --seq-len 2").exit_code, 0);
  const auto result = run_app("enhanced-train", "--data " + (dir / "in.ebin").string() + " --hidden 2 --steps 1 --batch-size 2 --quiet "
                                                "--out " + (dir / "run").string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(load_checkpoint((dir / "run" / "last.safetensors").string()).config.vocab_size, 12);
  fs::remove_all(dir);
}

TEST(DeviceFlag, CudaWithoutAUsableGpuIsOneClearError) {
  const auto result = run_app("enhanced-train", "--data x.ebin --out " ENHANCED_TEST_TMP "/device-test --device cuda");
  if (result.output.find("error: --device cuda: no ") == std::string::npos && result.exit_code == 0)
    GTEST_SKIP() << "a usable GPU is present: " << result.output;
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("error: --device cuda"), std::string::npos) << result.output;
}

// The CUDA flags are checked in every app on every machine, before any work: a typo is one
// clear line, never ignored because the run happens to be on the CPU.
TEST(DeviceFlag, CudaFlagsAreCheckedByEveryApp) {
  for (const std::string app : {"enhanced-train", "enhanced-eval", "enhanced-bench"}) {
    const std::string base = app == "enhanced-train"  ? "--data x.ebin --out " ENHANCED_TEST_TMP "/flag-test --device cpu"
                             : app == "enhanced-eval" ? "--data x.ebin --checkpoint x.safetensors --device cpu"
                                                      : "--device cpu";
    const auto graphs = run_app(app, base + " --cuda-graphs maybe");
    EXPECT_NE(graphs.exit_code, 0) << app;
    EXPECT_NE(graphs.output.find("error: --cuda-graphs must be on or off, got 'maybe'"), std::string::npos)
        << app << ": " << graphs.output;
    const auto algorithm = run_app(app, base + " --rnn-algorithm fastest");
    EXPECT_NE(algorithm.exit_code, 0) << app;
    EXPECT_NE(algorithm.output.find("error: --rnn-algorithm must be auto, standard, persistent or persistent-small-h"),
              std::string::npos)
        << app << ": " << algorithm.output;
  }
}

}  // namespace
}  // namespace enhanced
