// The shared corpus of good and bad files (tests/bad-files/, written by make_corpus.py; the Python
// readers are tested on the same files by python/tests/test_bad_files.py): the engine accepts the
// good ones and refuses every bad one with one error line that names the file and says what
// expected.json says both readers say.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "data_test_util.h"
#include "enhanced/checkpoint.h"
#include "enhanced/dataset.h"

namespace enhanced {
namespace {

using namespace enhanced::test_util;

const std::string kCorpus = std::string(ENHANCED_SOURCE_DIR) + "/tests/bad-files";

nlohmann::json manifest() {
  std::ifstream in(kCorpus + "/expected.json");
  return nlohmann::json::parse(in);
}

// Opens a corpus file as the apps do: a checkpoint (eval, predict, --init-from) or a data set.
void open_as_the_engine_does(const std::string& relative) {
  const std::string path = kCorpus + "/" + relative;
  if (relative.ends_with(".safetensors")) load_checkpoint(path);
  else Dataset::open(path);
}

TEST(BadFiles, GoodFilesOpen) {
  const nlohmann::json accepted = manifest()["accept"];
  ASSERT_GE(accepted.size(), 4u);
  for (const auto& relative : accepted) EXPECT_NO_THROW(open_as_the_engine_does(relative)) << relative;
}

TEST(BadFiles, EveryBadFileIsOneErrorNamingItAndItsDefect) {
  const nlohmann::json refused = manifest()["refuse"];
  ASSERT_GE(refused.size(), 50u);
  for (const auto& [relative, expected] : refused.items()) {
    const std::string path = kCorpus + "/" + relative;
    ASSERT_TRUE(std::filesystem::is_regular_file(path)) << path << " is in expected.json but not in the corpus";
    const std::string message = error_of([&] { open_as_the_engine_does(relative); });
    EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << relative << ": " << message;
    EXPECT_CONTAINS(message, expected.get<std::string>());
    EXPECT_EQ(message.find('\n'), std::string::npos) << relative << ": " << message;
    EXPECT_LE(message.size(), path.size() + 300) << relative << ": " << message;
    drop_fuzz_seed(relative.ends_with(".ebin") ? "ebin" : "safetensors", path);
  }
}

}  // namespace
}  // namespace enhanced
