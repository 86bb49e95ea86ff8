// The apps' "no silent surprises" checks, each through the app that meets it: the device line
// of --device auto and a JSON Lines file where an .ebin is expected.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "app_runner.h"
#include "enhanced/device.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;
using testing::run_app;

// The first line of the output that starts with `prefix` ("" when none).
std::string line_starting(const std::string& output, const std::string& prefix) {
  for (size_t at = 0; at < output.size();) {
    const size_t end = std::min(output.find('\n', at), output.size());
    if (output.compare(at, prefix.size(), prefix) == 0) return output.substr(at, end - at);
    at = end + 1;
  }
  return "";
}

class AppChecks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::path(ENHANCED_TEST_TMP) / ("app_checks." + std::to_string(::getpid()));
    fs::remove_all(root_);
    files_ = testing::write_small_demo(root_ / "data");
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  static std::string out(const std::string& name) { return " --out " + (root_ / name).string(); }
  // The small demo's training flags without the embedding table (80 training samples), the
  // hidden size and the device.
  static std::string data_flags() {
    return "--data " + files_.train_ebin + " --batch-size 16 --steps 1 --threads 2 --quiet ";
  }

  static fs::path root_;
  static DemoFiles files_;
};

fs::path AppChecks::root_;
DemoFiles AppChecks::files_;

TEST_F(AppChecks, DeviceAutoWithoutAGpuSaysWhyInEveryApp) {
  const std::string reason = cuda_unavailable_reason();
  if (reason.empty()) GTEST_SKIP() << "a usable GPU is present";
  const std::string expected = "device: cpu (no usable GPU: " + reason + ")";
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
      "error: " + jsonl + ": looks like JSON Lines, not .ebin: run enhanced-data convert " + jsonl + " OUT.ebin --seq-len T first";
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

}  // namespace
}  // namespace enhanced
