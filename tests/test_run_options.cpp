// The recorded run options: the fields added after the first state files (weight decay, class
// weights) round-trip, and a state file recorded before them still resumes with their defaults;
// paths are recorded canonical, and an old state's relative ones resolve from the current directory.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "enhanced/common.h"
#include "train/run_options.h"

namespace enhanced {
namespace {

TEST(RunOptions, NewFieldsRoundTripExactly) {
  TrainOptions o;
  o.data_path = "train.ebin";
  o.optimizer.weight_decay = 0.1f;  // not exact in binary: the hexadecimal text keeps its bits
  o.optimizer.weight_decay_embedding = true;
  o.class_weights = "balanced";
  const TrainOptions back = resumed_options(TrainOptions{}, run_options_text(o), "state");
  EXPECT_EQ(back.optimizer.weight_decay, 0.1f);
  EXPECT_TRUE(back.optimizer.weight_decay_embedding);
  EXPECT_EQ(back.class_weights, "balanced");
  EXPECT_EQ(back.data_path, (std::filesystem::current_path() / "train.ebin").string());  // recorded canonical
}

TEST(RunOptions, StateRecordedBeforeTheNewFieldsResumesWithTheirDefaults) {
  TrainOptions o;
  o.data_path = "train.ebin";
  nlohmann::json recorded = nlohmann::json::parse(run_options_text(o));
  for (const char* key : {"weight_decay", "weight_decay_embedding", "class_weights"}) {
    ASSERT_TRUE(recorded.contains(key)) << key;
    recorded.erase(key);
  }
  const TrainOptions back = resumed_options(TrainOptions{}, recorded.dump(), "old state");
  EXPECT_EQ(back.optimizer.weight_decay, 0.0f);
  EXPECT_FALSE(back.optimizer.weight_decay_embedding);
  EXPECT_EQ(back.class_weights, "");
  EXPECT_EQ(back.data_path, (std::filesystem::current_path() / "train.ebin").string());
}

// A state recorded before paths were canonical holds them as given: from its own directory they
// resolve as they did, and the same file named another way is no conflict.
TEST(RunOptionsPaths, AnOldStatesRelativePathsResolveFromTheCurrentDirectory) {
  TrainOptions o;
  o.data_path = "train.ebin";
  o.pretrained_path = "emb.bin";
  nlohmann::json old = nlohmann::json::parse(run_options_text(o));
  EXPECT_EQ(old["data"], (std::filesystem::current_path() / "train.ebin").string());
  old["data"] = "train.ebin";
  old["pretrained"] = "emb.bin";
  TrainOptions caller;
  caller.pretrained_path = (std::filesystem::current_path() / "." / "emb.bin").string();
  caller.given_flags = {"--pretrained"};
  const TrainOptions back = resumed_options(caller, old.dump(), "old state");  // --pretrained is fixed: no error
  EXPECT_EQ(back.data_path, "train.ebin");
  caller.pretrained_path = "other.bin";
  EXPECT_THROW(resumed_options(caller, old.dump(), "old state"), Error);
}

}  // namespace
}  // namespace enhanced
