// The recorded run options: the fields added after the first state files (weight decay, class
// weights) round-trip, and a state file recorded before them still resumes with their defaults.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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
  EXPECT_EQ(back.data_path, "train.ebin");
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
  EXPECT_EQ(back.data_path, "train.ebin");
}

}  // namespace
}  // namespace enhanced
