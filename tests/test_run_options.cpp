// The recorded run options: the fields added after the first state files (weight decay, class
// weights) round-trip, and a state file recorded before them still resumes with their defaults;
// paths are recorded canonical, and an old state's relative ones resolve from the current directory.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "enhanced/common.h"
#include "enhanced/train_fields.h"
#include "train/run_options.h"

namespace enhanced {
namespace {

TEST(RunOptions, NewFieldsRoundTripExactly) {
  TrainOptions o;
  o.data_path = "train.ebin";
  o.optimizer.weight_decay = 0.1f;  // not exact in binary: the hexadecimal text keeps its bits
  o.optimizer.weight_decay_embedding = true;
  o.class_weights = "balanced";
  o.class_weight_mean = ClassWeightMean::batch;
  const TrainOptions back = resumed_options(TrainOptions{}, run_options_text(o), "state");
  EXPECT_EQ(back.optimizer.weight_decay, 0.1f);
  EXPECT_TRUE(back.optimizer.weight_decay_embedding);
  EXPECT_EQ(back.class_weights, "balanced");
  EXPECT_EQ(back.class_weight_mean, ClassWeightMean::batch);
  EXPECT_EQ(back.data_path, (std::filesystem::current_path() / "train.ebin").string());  // recorded canonical
}

TEST(RunOptions, StateRecordedBeforeTheNewFieldsResumesWithTheirDefaults) {
  TrainOptions o;
  o.data_path = "train.ebin";
  nlohmann::json recorded = nlohmann::json::parse(run_options_text(o));
  for (const char* key : {"weight_decay", "weight_decay_embedding", "class_weights", "class_weight_mean"}) {
    ASSERT_TRUE(recorded.contains(key)) << key;
    recorded.erase(key);
  }
  const TrainOptions back = resumed_options(TrainOptions{}, recorded.dump(), "old state");
  EXPECT_EQ(back.optimizer.weight_decay, 0.0f);
  EXPECT_FALSE(back.optimizer.weight_decay_embedding);
  EXPECT_EQ(back.class_weights, "");
  EXPECT_EQ(back.class_weight_mean, ClassWeightMean::weights) << "older runs divide by the weights";
  EXPECT_EQ(back.data_path, (std::filesystem::current_path() / "train.ebin").string());
}

// A state recorded before paths were canonical holds them as given: from its own directory they
// resolve as they did, and the same file named another way is no conflict.
// The training controls are rows of train_fields(): recorded under their keys, the reals as
// exact hexadecimal text, and read back bit for bit.
TEST(RunOptions, TrainingControlsAreRecordedByTheirKeysAndRoundTripExactly) {
  TrainOptions o;
  o.lr_schedule = "plateau";
  o.warmup_steps = 7;
  o.min_lr = 0.1;
  o.lr_step_size = 3;
  o.lr_factor = 0.5;
  o.lr_patience = 2;
  o.monitor = "valid_f1";
  o.min_delta = 1e-3;
  o.early_stopping = 4;
  const std::string text = run_options_text(o);
  for (const char* piece : {R"("lr_schedule":"plateau")", R"("warmup_steps":7)", R"("min_lr":"0x1.999999999999ap-4")",
                            R"("lr_step_size":3)", R"("lr_factor":"0x1p-1")", R"("lr_patience":2)",
                            R"("monitor":"valid_f1")", R"("early_stopping":4)"})
    EXPECT_NE(text.find(piece), std::string::npos) << piece << " in " << text;
  const TrainOptions back = resumed_options(TrainOptions{}, text, "state");
  EXPECT_EQ(back.lr_schedule, "plateau");
  EXPECT_EQ(back.warmup_steps, 7);
  EXPECT_EQ(back.min_lr, 0.1);
  EXPECT_EQ(back.lr_step_size, 3);
  EXPECT_EQ(back.lr_factor, 0.5);
  EXPECT_EQ(back.lr_patience, 2);
  EXPECT_EQ(back.monitor, "valid_f1");
  EXPECT_EQ(back.min_delta, 1e-3);
  EXPECT_EQ(back.early_stopping, 4);
}

// A resume's merged values (a recorded one included) are held to the flags' own rules, in the
// flags' words: --lr-factor is in (0, 1) wherever it comes from.
TEST(RunOptions, ControlValuesAreCheckedByTheirFlagsRules) {
  const auto problem = [](TrainOptions o) -> std::string {
    try {
      check_field_values(o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  TrainOptions o;
  EXPECT_EQ(problem(o), "");  // the defaults, --lr-step-size's 0 ("not given") included
  o.lr_factor = 1;
  EXPECT_EQ(problem(o), "--lr-factor must be in (0, 1), got 1");
  o.lr_factor = 0.5;
  o.min_delta = std::nan("");
  EXPECT_EQ(problem(o), "--min-delta must be at least 0, got nan");
  o.min_delta = 0;
  o.lr_patience = -1;
  EXPECT_EQ(problem(o), "--lr-patience must be at least 0, got -1");
}

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
