// The apps' "no silent surprises" checks, each through the app that meets it: the device line
// of --device auto, a JSON Lines file where an .ebin is expected, a batch larger than the
// training set, an empty set, a raw embedding file whose D the size does not pin down, and a
// configuration that cannot fit in memory.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "app_runner.h"
#include "data_test_util.h"
#include "enhanced/checkpoint.h"
#include "enhanced/common.h"
#include "enhanced/dataset.h"
#include "enhanced/embedding_table.h"
#include "enhanced/engine.h"
#include "enhanced/memory.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;
using test_util::line_starting;
using testing::run_app;

// A valid .ebin of T = 16 with no samples (enhanced-data convert refuses to write one).
void write_empty_ebin(const fs::path& path) {
  DatasetHeader h{};
  std::memcpy(h.magic, kDatasetMagic, sizeof h.magic);
  h.version = kDatasetVersion;
  h.seq_len = 16;
  h.max_token_id = -1;
  h.labels_offset = h.cur_word_offset = h.identifier_offsets_offset = sizeof h;
  h.identifier_ids_offset = h.auxiliary_offsets_offset = sizeof h + 8;  // one offset, 0
  h.auxiliary_ids_offset = sizeof h + 16;
  h.file_size = sizeof h + 16;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&h), sizeof h);
  out.write(std::string(16, '\0').data(), 16);
}

class AppChecks : public test_util::SmallDemoSuite {
 protected:
  static void SetUpTestSuite() {
    SmallDemoSuite::SetUpTestSuite();
    write_empty_ebin(root_ / "empty.ebin");
  }
  static std::string out(const std::string& name) { return " --out " + (root_ / name).string(); }
  // The small demo's training flags without the embedding table (80 training samples), the
  // hidden size and the device.
  static std::string data_flags() {
    return "--data " + files_.train_ebin + " --batch-size 16 --steps 1 --threads 2 --quiet ";
  }
};

TEST_F(AppChecks, DeviceAutoWithoutAGpuSaysWhyInEveryApp) {
  const std::string reason = cuda_unavailable_reason();
  if (reason.empty()) GTEST_SKIP() << "a usable GPU is present";
  const std::string expected = "device: cpu (" + no_gpu_text(reason) + ")";
  if (!nvidia_device_present()) {
    EXPECT_EQ(expected, "device: cpu (no NVIDIA GPU)");
  }
  const auto train = run_app("enhanced-train", data_flags() + "--hidden 4 --device auto" + out("auto"));
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_EQ(line_starting(train.output, "device: "), expected) << train.output;
  const auto eval = run_app("enhanced-eval", "--device auto --data " + files_.test_ebin + " --checkpoint " +
                                                 (root_ / "auto" / "last.safetensors").string());
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_EQ(line_starting(eval.output, "device: "), expected) << eval.output;
}

TEST_F(AppChecks, JsonLinesWhereAnEbinIsExpectedNamesTheConversion) {
  const std::string jsonl = files_.train_jsonl;
  const std::string expected =
      "error: " + jsonl + ": looks like JSON Lines, not .ebin: run enhanced-data convert " + jsonl + " OUT.ebin first";
  const auto train = run_app("enhanced-train", "--data " + jsonl + " --quiet --device cpu" + out("jsonl"));
  EXPECT_EQ(train.exit_code, 1);
  EXPECT_EQ(line_starting(train.output, "error: "), expected) << train.output;
  const auto valid = run_app("enhanced-train", data_flags() + "--hidden 4 --device cpu --valid " + jsonl + out("jsonl-valid"));
  EXPECT_EQ(line_starting(valid.output, "error: "), expected) << valid.output;
  const auto inspect = run_app("enhanced-data", "inspect " + jsonl);
  EXPECT_EQ(inspect.exit_code, 1);
  EXPECT_EQ(line_starting(inspect.output, "error: "), expected) << inspect.output;
  // What it says to run works.
  const auto convert = run_app("enhanced-data", "convert " + jsonl + " " + (root_ / "converted.ebin").string() + " --seq-len 16");
  EXPECT_EQ(convert.exit_code, 0) << convert.output;
  // A binary file that is neither keeps the plain message.
  std::ofstream(root_ / "random.bin", std::ios::binary) << std::string(200, '\x7f');
  const auto other = run_app("enhanced-data", "inspect " + (root_ / "random.bin").string());
  EXPECT_NE(other.output.find("bad magic: not an .ebin dataset"), std::string::npos) << other.output;
}

// Training refuses a batch larger than its set; evaluation clamps it (its figures do not depend
// on the batch size).
TEST_F(AppChecks, BatchLargerThanTheTrainingSetIsRefusedAndClampedInEvaluation) {
  const std::string flags = "--data " + files_.train_ebin + " --hidden 4 --steps 1 --quiet --device cpu ";
  const auto refused = run_app("enhanced-train", flags + "--batch-size 81" + out("b81"));
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(line_starting(refused.output, "error: "),
            "error: " + files_.train_ebin +
                ": 80 samples, fewer than --batch-size 81 (every step would be one partial batch); give --batch-size 80 "
                "or less")
      << refused.output;
  const auto edge = run_app("enhanced-train", flags + "--batch-size 80" + out("b80"));
  ASSERT_EQ(edge.exit_code, 0) << edge.output;
  const std::string eval = "--json --device cpu --data " + files_.test_ebin + " --checkpoint " +
                           (root_ / "b80" / "last.safetensors").string() + " 2>/dev/null --batch-size ";
  const auto small = run_app("enhanced-eval", eval + "8"), large = run_app("enhanced-eval", eval + "100000");
  ASSERT_EQ(small.exit_code, 0) << small.output;
  ASSERT_EQ(large.exit_code, 0) << large.output;
  const auto a = nlohmann::json::parse(small.output), b = nlohmann::json::parse(large.output);
  EXPECT_EQ(a["samples"], 24);
  EXPECT_EQ(a["confusion"], b["confusion"]);
  EXPECT_NEAR(a["loss"].get<double>(), b["loss"].get<double>(), 1e-6);
}

TEST_F(AppChecks, AnEmptySetIsRefusedNamingTheFileAndTheFlag) {
  const std::string empty = (root_ / "empty.ebin").string();
  const auto valid = run_app("enhanced-train", data_flags() + "--hidden 4 --device cpu --valid " + empty + out("empty-valid"));
  EXPECT_EQ(valid.exit_code, 1);
  EXPECT_EQ(line_starting(valid.output, "error: "), "error: " + empty + ": no samples (--valid needs at least one)")
      << valid.output;
  const auto train = run_app("enhanced-train", "--data " + empty + " --quiet --device cpu" + out("empty-train"));
  EXPECT_EQ(line_starting(train.output, "error: "), "error: " + empty + ": no samples (--data needs at least one)")
      << train.output;
  ASSERT_EQ(run_app("enhanced-train", data_flags() + "--hidden 4 --device cpu" + out("for-empty")).exit_code, 0);
  const auto eval = run_app("enhanced-eval", "--device cpu --data " + empty + " --checkpoint " +
                                                 (root_ / "for-empty" / "last.safetensors").string());
  EXPECT_EQ(eval.exit_code, 1);
  EXPECT_EQ(line_starting(eval.output, "error: "), "error: " + empty + ": no samples (--data needs at least one)")
      << eval.output;
}

// The demo's emb.bin is raw float32, 128 x 8 = 1024 floats, and the data's ids reach 127.
TEST_F(AppChecks, RawEmbeddingsWhoseDimTheSizeDoesNotPinAreRefused) {
  const std::string table = " --pretrained " + files_.embeddings;
  const auto refused = run_app("enhanced-train", data_flags() + "--hidden 4 --device cpu " + table + out("raw-refused"));
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(line_starting(refused.output, "error: "),
            "error: " + files_.embeddings +
                ": a raw float32 file of 1024 floats fits 4 embedding dims for the data's 128 ids: D = 8 (128 rows), "
                "4 (256 rows), 2 (512 rows), 1 (1024 rows); give --embedding-dim (or --vocab-size)")
      << refused.output;
  const auto by_vocab = run_app("enhanced-train", data_flags() + "--hidden 4 --device cpu " + table + " --vocab-size 128" + out("raw-by-vocab"));
  ASSERT_EQ(by_vocab.exit_code, 0) << by_vocab.output;
  EXPECT_EQ(load_checkpoint((root_ / "raw-by-vocab" / "last.safetensors").string()).config.embedding_dim, 8);
  const auto by_dim = run_app("enhanced-train", data_flags() + "--hidden 4 --device cpu " + table + " --embedding-dim 8" + out("raw-by-dim"));
  EXPECT_EQ(by_dim.exit_code, 0) << by_dim.output;
}

// The rule on its own (enhanced/embedding_table.h, RawTableShape).
int dim_of(uint64_t floats, RawTableShape shape) { return raw_embedding_dim("t.bin", floats, shape); }

TEST(RawEmbeddingDim, TheSizePinsDOnlyWhereOneFits) {
  EXPECT_EQ(dim_of(1024, {8, 0, 1}), 8);      // --embedding-dim
  EXPECT_EQ(dim_of(1024, {0, 128, 1}), 8);    // --vocab-size
  EXPECT_EQ(dim_of(1024, {0, 0, 600}), 1);    // only D = 1 leaves a row for each of 600 ids
  EXPECT_EQ(dim_of(7, {0, 0, 2}), 1);         // a prime count of floats
  EXPECT_THROW(dim_of(1024, {0, 100, 1}), Error);  // 1024 floats are not 100 whole rows
  EXPECT_THROW(dim_of(10, {0, 0, 20}), Error);     // too few floats for the data's ids
  try {
    dim_of(1024, {0, 0, 200});
    FAIL() << "not refused";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "t.bin: a raw float32 file of 1024 floats fits 3 embedding dims for the data's 200 ids: D = 4 "
                           "(256 rows), 2 (512 rows), 1 (1024 rows); give --embedding-dim (or --vocab-size)");
  }
}

TEST_F(AppChecks, AConfigurationBeyondTheMachinesMemoryIsRefusedBeforeAllocating) {
  const auto train = run_app("enhanced-train", data_flags() + "--device cpu --hidden 200000" + out("huge"));
  EXPECT_EQ(train.exit_code, 1) << train.output;
  const std::string line = line_starting(train.output, "error: ");
  EXPECT_EQ(line.rfind("error: the model (V=128, D=32, H=200000, T=16, L=4) with adam at --batch-size 16 needs about ", 0),
            0u) << train.output;
  for (const char* part : {" GiB (parameters ", ", gradients ", ", optimizer ", ", activations ", "; this machine has "})
    EXPECT_NE(line.find(part), std::string::npos) << part << " in " << line;
  const auto bench = run_app("enhanced-bench", "--device cpu -B 2 -T 8 -D 4 -H 200000 -V 50 -L 3 --no-loader");
  EXPECT_EQ(bench.exit_code, 1) << bench.output;
  EXPECT_EQ(line_starting(bench.output, "error: ").rfind("error: the model (V=50, D=4, H=200000, T=8, L=3) with adam at "
                                                          "--batch-size 2 needs about ", 0), 0u) << bench.output;
  // The bench's own buffers count too: the Zipf table (one double per id, 0.4 GiB here).
  const auto zipf = run_app("enhanced-bench", "--device cpu -B 2 -T 8 -D 4 -H 200000 -V 50000000 -L 3 --zipf 1 --no-loader");
  EXPECT_EQ(zipf.exit_code, 1) << zipf.output;
  EXPECT_NE(line_starting(zipf.output, "error: ").find(", other 0.4); this machine has "), std::string::npos) << zipf.output;
}

// Past the estimate (here: a limit on the process's address space that MemAvailable does not
// see), an allocation that fails names what it was for.
TEST_F(AppChecks, OutOfMemoryNamesWhatWasBeingAllocated) {
  if (available_memory().bytes < (12ull << 30)) GTEST_SKIP() << "the estimate (~10 GiB) would refuse the run first";
  const auto train = run_app("enhanced-train", data_flags() + "--device cpu --hidden 8000" + out("oom"), 1536);  // a CUDA build maps ~850 MiB before main
  EXPECT_EQ(train.exit_code, 1) << train.output;
  ModelConfig c;  // the run's model: the small demo's V and L, D = 32 by default
  c.vocab_size = 128;
  c.hidden = 8000;
  c.seq_len = 16;
  c.num_labels = 4;
  const size_t n = parameter_count(c);
  EXPECT_EQ(line_starting(train.output, "error: "),
            cat("error: out of memory allocating ", n, " values (", (4 * n + (1 << 20) - 1) >> 20,
                " MiB) for the model's parameters, their gradients or a moment")) << train.output;
}

}  // namespace
}  // namespace enhanced
