// A run records its files' paths absolute and canonical: trained with relative paths in one
// directory, it resumes from another, with no --data or with the same files named by other
// relative paths, to the bytes of an uninterrupted run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "app_runner.h"
#include "enhanced/common.h"
#include "enhanced/safetensors.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;

class RelativePaths : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(ENHANCED_TEST_TMP) / ("relative-paths." + std::to_string(::getpid()));
    fs::remove_all(root_);
    testing::write_small_demo(root_ / "A" / "data");
    fs::create_directories(root_ / "B");
  }
  void TearDown() override { fs::remove_all(root_); }

  // enhanced-train run in `dir` (relative to the root) with `args`; `app`: false when args name
  // the command itself.
  testing::AppResult train_in(const std::string& dir, const std::string& args, bool app = true) const {
    return testing::run_command("cd " + (root_ / dir).string() + " && " + (app ? ENHANCED_APP_DIR "/enhanced-train " : "") +
                                args + " --device cpu --threads 2 --quiet --embedding-dim 8 --hidden 6 --batch-size 16");
  }
  std::string bytes(const std::string& file) const { return testing::read_bytes(root_ / file); }

  fs::path root_;
};

TEST_F(RelativePaths, ARunTrainedWithRelativePathsResumesFromAnotherDirectoryExactly) {
  const std::string data = "--data data/train.ebin --valid data/valid.ebin --pretrained data/emb.bin ";
  ASSERT_EQ(train_in("A", data + "--steps 10 --out whole").exit_code, 0);
  // Killed (as by kill -9) right after the state file of the first epoch's end (best, then state).
  for (const char* part : {"part", "part2"})
    ASSERT_EQ(train_in("A", "ENHANCED_TEST_EXIT_AFTER_WRITE=2 " ENHANCED_APP_DIR "/enhanced-train " + data +
                                "--steps 10 --out " + part, false).exit_code, 137);
  // From B: no --data at all, and the same files named by another relative path.
  const auto bare = train_in("B", "--resume --steps 10 --out ../A/part");
  ASSERT_EQ(bare.exit_code, 0) << bare.output;
  const auto renamed = train_in("B", "--resume --steps 10 --data ../A/data/train.ebin --valid ../A/./data/valid.ebin "
                                     "--pretrained ../A/data/../data/emb.bin --out ../A/part2");
  ASSERT_EQ(renamed.exit_code, 0) << renamed.output;
  EXPECT_EQ(renamed.output.find("resume: data changed"), std::string::npos) << renamed.output;
  EXPECT_EQ(renamed.output.find("resume: valid changed"), std::string::npos) << renamed.output;
  for (const char* file : {"last.safetensors", "best.safetensors", "optimizer.safetensors"}) {
    ASSERT_FALSE(bytes(cat("A/whole/", file)).empty()) << file;
    EXPECT_TRUE(bytes(cat("A/part/", file)) == bytes(cat("A/whole/", file))) << file;
    EXPECT_TRUE(bytes(cat("A/part2/", file)) == bytes(cat("A/whole/", file))) << file;
  }
  const nlohmann::json recorded =
      nlohmann::json::parse(SafetensorsReader((root_ / "A/part/optimizer.safetensors").string()).metadata_value("run_options"));
  EXPECT_EQ(recorded["data"], fs::canonical(root_ / "A/data/train.ebin").string());
  EXPECT_EQ(recorded["pretrained"], fs::canonical(root_ / "A/data/emb.bin").string());
}

}  // namespace
}  // namespace enhanced
