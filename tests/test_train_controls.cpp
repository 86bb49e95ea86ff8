// enhanced-train's controls (schedules, validation every N steps, early stopping, the monitored
// best checkpoint) and what it refuses to do silently (another run in --out, flags that
// contradict a resumed run, a resume with nothing to do), on the tiny demo set: 5 batches an
// epoch. Crashes are injected with ENHANCED_TEST_EXIT_AFTER_WRITE (an abrupt exit after the N-th
// file written, as kill -9 there would leave things).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "app_runner.h"
#include "data_test_util.h"
#include "enhanced/checkpoint.h"
#include "enhanced/demo.h"
#include "enhanced/safetensors.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test_util::line_starting;
using testing::read_bytes;
using testing::run_app;

// metrics.jsonl without its times (which differ between any two runs).
std::vector<json> metrics_without_times(const fs::path& dir) {
  std::vector<json> lines;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    j.erase("seconds");
    j.erase("samples_per_s");
    lines.push_back(j);
  }
  return lines;
}

class TrainControls : public test_util::SmallDemoSuite {
 protected:
  static std::string flags() { return testing::small_train_flags(files_) + "--device cpu "; }
  static std::string out(const std::string& name) { return " --out " + (root_ / name).string() + " "; }
  static fs::path dir(const std::string& name) { return root_ / name; }
};

// Kills `run` (in directories under `root`) after each of its file writes in turn, until a run
// gets through all of them, and continues each killed one: resumed where it left a state file,
// started again (the same command, no --overwrite) where it did not. Each must end exactly as the uninterrupted run: weights,
// moments, best.safetensors and every metrics line. Returns the kill points, and how many of them
// were started again.
std::pair<int, int> kill_after_every_write(const fs::path& root, const std::string& run, const std::string& name) {
  const fs::path whole = root / (name + "-whole");
  EXPECT_EQ(run_app("enhanced-train", run + " --out " + whole.string()).exit_code, 0);
  int points = 0, started_again = 0;
  for (int kill_after = 1;; ++kill_after) {
    const fs::path killed_dir = root / (name + "-killed-" + std::to_string(kill_after));
    const std::string killed_out = " --out " + killed_dir.string();
    ::setenv("ENHANCED_TEST_EXIT_AFTER_WRITE", std::to_string(kill_after).c_str(), 1);
    const auto killed = run_app("enhanced-train", run + killed_out);
    ::unsetenv("ENHANCED_TEST_EXIT_AFTER_WRITE");
    if (killed.exit_code == 0) break;  // fewer writes than kill_after
    EXPECT_EQ(killed.exit_code, 137) << killed_dir << ": " << killed.output;
    if (killed.exit_code != 137) break;
    ++points;
    const bool has_state = fs::exists(killed_dir / "optimizer.safetensors");
    started_again += has_state ? 0 : 1;
    const auto continued = run_app("enhanced-train", has_state ? "--resume --quiet" + killed_out : run + killed_out);
    EXPECT_EQ(continued.exit_code, 0) << killed_dir << ": " << continued.output;
    for (const char* file : {"last.safetensors", "best.safetensors", "optimizer.safetensors"})
      EXPECT_TRUE(read_bytes(whole / file) == read_bytes(killed_dir / file)) << killed_dir << ": " << file;
    EXPECT_EQ(metrics_without_times(whole), metrics_without_times(killed_dir)) << killed_dir;
  }
  return {points, started_again};
}

// Among the split points: a checkpoint on an epoch's last step, before that epoch's validation
// and metrics line; between the state file and last.safetensors of the final save.
TEST_F(TrainControls, KilledAfterAnyFileWriteAndResumedEqualsTheUninterruptedRun) {
  // 10 steps: checkpoints at 2, 4, ..., 10 and epoch ends at 5, 10 (step 10 twice: before and
  // after its epoch's end): 7 saves of two files each, and best.safetensors at each validation
  // that improves.
  const auto [points, started_again] = kill_after_every_write(
      root_, flags() + "--optimizer adam --lr 0.02 --epochs 2 --checkpoint-every 2 --valid-every 3 --log-every 2 "
                "--lr-schedule plateau --lr-patience 0 --lr-factor 0.5 ", "kill");
  EXPECT_GT(points, 14) << "every save's two files and at least one best.safetensors";
  EXPECT_EQ(started_again, 0) << "the first write is a state file";
}

// Checkpoints at epoch ends only: the validations at step 3 and at the first epoch's end (step 5)
// write best.safetensors before the first state file. A run killed there holds no run: the same
// command starts it again, without --overwrite.
TEST_F(TrainControls, KilledBeforeItsFirstStateFileAndStartedAgainEqualsTheUninterruptedRun) {
  const auto [points, started_again] = kill_after_every_write(
      root_, flags() + "--optimizer sgd --lr 0.05 --epochs 2 --valid-every 3 --log-every 2 ", "kill-early");
  EXPECT_GT(points, 5);
  EXPECT_GE(started_again, 1) << "best.safetensors is written before the first state file";
}

// Every step's rate is logged; the schedule is the function tests/test_schedule.cpp checks.
TEST_F(TrainControls, TheRateOfEveryStepIsLoggedAndFollowsTheSchedule) {
  ASSERT_EQ(run_app("enhanced-train", flags() + "--optimizer sgd --lr 0.1 --epochs 2 --log-every 1 --warmup-steps 2 "
                                                "--lr-schedule linear --min-lr 0.02" + out("linear")).exit_code, 0);
  std::vector<float> rates;
  for (const json& line : metrics_without_times(dir("linear")))
    if (line["kind"] == "train") rates.push_back(line["lr"].get<float>());
  ASSERT_EQ(rates.size(), 10u);
  EXPECT_FLOAT_EQ(rates[0], 0.05f);  // warm-up: 0.1 * 1/2
  EXPECT_FLOAT_EQ(rates[1], 0.1f);
  EXPECT_FLOAT_EQ(rates[2], 0.1f);   // then linear over the last 8 steps: 0.1 - 0.08 * t / 8
  EXPECT_FLOAT_EQ(rates[6], 0.06f);
  EXPECT_FLOAT_EQ(rates[9], 0.03f);
}

// Each schedule against torch.optim.lr_scheduler (tests/reference/schedules.py, Debian's torch):
// every step's logged rate. Plateau gets the run's own validation losses.
TEST_F(TrainControls, EveryScheduleGivesTorchsRateAtEveryStep) {
  if (std::system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) GTEST_SKIP() << "no /usr/bin/python3 with torch";
  struct Case {
    std::string name, engine_flags, reference_flags;
  };
  const std::vector<Case> cases = {
      {"step", "--lr-schedule step --lr-step-size 3 --lr-factor 0.5 --warmup-steps 2", "--step-size 3 --factor 0.5 --warmup 2"},
      {"cosine", "--lr-schedule cosine --min-lr 0.01 --warmup-steps 3", "--min-lr 0.01 --warmup 3"},
      {"linear", "--lr-schedule linear --min-lr 0.005", "--min-lr 0.005"},
      {"plateau", "--lr-schedule plateau --lr-patience 0 --lr-factor 0.5 --min-lr 0.02 --valid-every 1 --min-delta 0.001",
       "--patience 0 --factor 0.5 --min-lr 0.02 --min-delta 0.001"},
      {"constant", "--warmup-steps 4", "--warmup 4"},
  };
  for (const Case& c : cases) {
    const std::string name = "schedule-" + c.name;
    const auto run = run_app("enhanced-train", flags() + "--optimizer sgd --lr 0.1 --epochs 3 --log-every 1 " +
                                                   c.engine_flags + out(name));
    ASSERT_EQ(run.exit_code, 0) << name << ": " << run.output;
    const std::string command = "/usr/bin/python3 '" ENHANCED_SOURCE_DIR "/tests/reference/schedules.py' '" +
                                (dir(name) / "metrics.jsonl").string() + "' --schedule " + c.name +
                                " --lr 0.1 --steps 15 " + c.reference_flags + " > '" + (dir(name) / "torch.txt").string() +
                                "' 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << name << ":\n" << read_bytes(dir(name) / "torch.txt");
  }
}

// A run shorter than an epoch validates too, and best.safetensors is the monitored best.
TEST_F(TrainControls, ValidEveryStepsAndTheBestCheckpointFollowsTheMonitor) {
  ASSERT_EQ(run_app("enhanced-train", flags() + "--steps 4 --valid-every 1 --monitor valid_accuracy --lr 0.05" +
                                          out("monitor")).exit_code, 0);
  double best = -1;
  int64_t best_step = 0, validations = 0;
  for (const json& line : metrics_without_times(dir("monitor"))) {
    if (line["kind"] != "valid") continue;
    ++validations;
    EXPECT_TRUE(line.contains("valid_loss") && line.contains("valid_f1")) << line;
    if (line["valid_accuracy"].get<double>() > best) {
      best = line["valid_accuracy"];
      best_step = line["step"];
    }
  }
  EXPECT_EQ(validations, 4);
  const SafetensorsReader best_file((dir("monitor") / "best.safetensors").string());
  EXPECT_EQ(best_file.metadata_value("step"), std::to_string(best_step));
}

TEST_F(TrainControls, EarlyStoppingStopsAfterPatienceValidationsAndAResumeSaysThereIsNothingToDo) {
  // No validation improves on the first by more than 1e9: the third one stops the run.
  const std::string run = flags() + "--epochs 4 --valid-every 1 --early-stopping 2 --min-delta 1e9";
  const auto first = run_app("enhanced-train", run + out("early"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("early stopping: valid_loss did not improve by more than 1e+09 in 2 validations"),
            std::string::npos) << first.output;
  EXPECT_EQ(SafetensorsReader((dir("early") / "optimizer.safetensors").string()).metadata_value("step"), "3");
  const std::string state = read_bytes(dir("early") / "optimizer.safetensors");
  const auto again = run_app("enhanced-train", "--resume --quiet" + out("early"));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("nothing to do: early stopping ended the run"), std::string::npos) << again.output;
  EXPECT_TRUE(state == read_bytes(dir("early") / "optimizer.safetensors"));
  // More patience continues the run: two more validations without improvement.
  const auto longer = run_app("enhanced-train", "--resume --quiet --early-stopping 4" + out("early"));
  ASSERT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_NE(longer.output.find("resume: early_stopping changed from 2 to 4"), std::string::npos) << longer.output;
  EXPECT_EQ(SafetensorsReader((dir("early") / "optimizer.safetensors").string()).metadata_value("step"), "5");
}

TEST_F(TrainControls, AFinishedRunResumedSaysThereIsNothingToDoAndChangesNothing) {
  ASSERT_EQ(run_app("enhanced-train", flags() + "--epochs 1" + out("finished")).exit_code, 0);
  const std::string state = read_bytes(dir("finished") / "optimizer.safetensors");
  const auto again = run_app("enhanced-train", "--resume --quiet" + out("finished"));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("nothing to do: the run in"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("has done 5 steps, and its length is 5 steps"), std::string::npos) << again.output;
  EXPECT_TRUE(state == read_bytes(dir("finished") / "optimizer.safetensors"));
}

TEST_F(TrainControls, AnotherRunInOutIsRefusedUnlessOverwrittenAndOverwriteLeavesNoStaleFiles) {
  ASSERT_EQ(run_app("enhanced-train", flags() + "--steps 2 --valid-every 1" + out("taken")).exit_code, 0);
  ASSERT_TRUE(fs::exists(dir("taken") / "best.safetensors"));
  const std::string state = read_bytes(dir("taken") / "optimizer.safetensors");
  const auto refused = run_app("enhanced-train", flags() + "--steps 2" + out("taken"));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(line_starting(refused.output, "error: ").find("holds another run"), std::string::npos) << refused.output;
  EXPECT_NE(line_starting(refused.output, "error: ").find("--overwrite"), std::string::npos) << refused.output;
  EXPECT_TRUE(state == read_bytes(dir("taken") / "optimizer.safetensors"));
  // Without --valid the new run writes no best.safetensors: the old one must not survive.
  const std::string no_valid = "--data " + files_.train_ebin + " --pretrained " + files_.embeddings +
                               " --embedding-dim 8 --hidden 6 --batch-size 16 --threads 2 --quiet --device cpu ";
  const auto replaced = run_app("enhanced-train", no_valid + "--steps 1 --overwrite" + out("taken"));
  ASSERT_EQ(replaced.exit_code, 0) << replaced.output;
  EXPECT_FALSE(fs::exists(dir("taken") / "best.safetensors"));
  EXPECT_EQ(SafetensorsReader((dir("taken") / "optimizer.safetensors").string()).metadata_value("step"), "1");
  // A metrics.jsonl alone (a run killed before its first checkpoint) is no run: replaced.
  fs::create_directories(dir("killed-early"));
  std::ofstream(dir("killed-early") / "metrics.jsonl") << "{\"kind\": \"train\"}\n";
  const auto after_kill = run_app("enhanced-train", flags() + "--steps 1" + out("killed-early"));
  EXPECT_EQ(after_kill.exit_code, 0) << after_kill.output;
  // A failing --overwrite run fails before it removes anything.
  const auto failing = run_app("enhanced-train", "--data " + files_.train_ebin + " --hidden 4 --quiet --device cpu "
                                                 "--steps 1 --overwrite --batch-size 1000 --drop-last" + out("taken"));
  EXPECT_NE(failing.exit_code, 0);
  EXPECT_NE(line_starting(failing.output, "error: ").find("fewer than --batch-size 1000"), std::string::npos) << failing.output;
  EXPECT_TRUE(fs::exists(dir("taken") / "optimizer.safetensors"));
  const auto both = run_app("enhanced-train", "--resume --overwrite" + out("taken"));
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.output.find("contradict"), std::string::npos) << both.output;
}

TEST_F(TrainControls, FlagsThatContradictAResumedRunAreErrorsAndChangesAreRecordedForTheNextResume) {
  ASSERT_EQ(run_app("enhanced-train", flags() + "--optimizer sgd --lr 0.05 --steps 4" + out("change")).exit_code, 0);
  for (const std::string conflict :
       {"--hidden 7", "--blend scalar-mean", "--optimizer adam", "--batch-size 8", "--no-shuffle", "--seed 3"}) {
    const auto result = run_app("enhanced-train", "--resume --steps 8 --quiet " + conflict + out("change"));
    EXPECT_NE(result.exit_code, 0) << conflict;
    const std::string line = line_starting(result.output, "error: ");
    EXPECT_NE(line.find(conflict.substr(0, conflict.find(' '))), std::string::npos) << line;
    EXPECT_NE(line.find("conflicts with the run being resumed"), std::string::npos) << line;
  }
  const auto hidden = run_app("enhanced-train", "--resume --steps 8 --quiet --hidden 7" + out("change"));
  EXPECT_NE(line_starting(hidden.output, "error: ").find("--hidden 7 conflicts with the run being resumed ("),
            std::string::npos) << hidden.output;
  EXPECT_NE(line_starting(hidden.output, "error: ").find("whose model has 6"), std::string::npos) << hidden.output;
  // Model flags are checked against the model, not the recorded option (0: "from the data").
  ASSERT_EQ(run_app("enhanced-train", flags() + "--steps 4" + out("change-c")).exit_code, 0);
  const auto same_dim = run_app("enhanced-train", "--resume --steps 5 --quiet --embedding-dim 8 --num-labels 4 "
                                                  "--hidden 6" + out("change-c"));
  const auto momentum = run_app("enhanced-train", "--resume --steps 8 --quiet --momentum 0.900000036" + out("change"));
  EXPECT_NE(line_starting(momentum.output, "error: ").find("--momentum 0.900000036 conflicts with the run being resumed, "
                                                       "which has momentum = 0"), std::string::npos) << momentum.output;
  EXPECT_EQ(same_dim.exit_code, 0) << same_dim.output;
  // A changed rate is printed and recorded: resumed again, the run continues with it exactly.
  ASSERT_EQ(run_app("enhanced-train", flags() + "--optimizer sgd --lr 0.05 --steps 4" + out("change-b")).exit_code, 0);
  const auto a = run_app("enhanced-train", "--resume --quiet --steps 8 --lr 0.02" + out("change"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("resume: lr changed from 0.0500000007 to 0.0199999996"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("resume: the run's length changed from 4 steps to 8 steps"), std::string::npos) << a.output;
  ASSERT_EQ(run_app("enhanced-train", "--resume --quiet --steps 6 --lr 0.02" + out("change-b")).exit_code, 0);
  ASSERT_EQ(run_app("enhanced-train", "--resume --quiet --steps 8" + out("change-b")).exit_code, 0);
  EXPECT_TRUE(read_bytes(dir("change") / "last.safetensors") == read_bytes(dir("change-b") / "last.safetensors"));
}

TEST_F(TrainControls, ModelFlagsThatContradictInitFromAreErrorsNamingBothValues) {
  ASSERT_EQ(run_app("enhanced-train", flags() + "--steps 1" + out("init")).exit_code, 0);
  const std::string checkpoint = (dir("init") / "last.safetensors").string();
  const std::string data = "--data " + files_.train_ebin + " --quiet --device cpu --steps 1 --init-from " + checkpoint;
  const auto hidden = run_app("enhanced-train", data + " --hidden 9" + out("init-b"));
  EXPECT_NE(hidden.exit_code, 0);
  EXPECT_NE(line_starting(hidden.output, "error: ").find("--hidden 9 conflicts with " + checkpoint + ", whose model has 6"),
            std::string::npos) << hidden.output;
  const auto pool = run_app("enhanced-train", data + " --pool time" + out("init-c"));
  EXPECT_NE(line_starting(pool.output, "error: ").find("--pool time conflicts with"), std::string::npos) << pool.output;
  const auto same = run_app("enhanced-train", data + " --hidden 6" + out("init-d"));
  EXPECT_EQ(same.exit_code, 0) << same.output;
}

// The resume state is checked when read: a data set that no longer fits the saved position, and
// a second moment that is negative, are errors naming the file.
TEST_F(TrainControls, ResumeStateThatDoesNotFitTheDataOrHoldsBadMomentsIsRefused) {
  ASSERT_EQ(run_app("enhanced-train", flags() + "--optimizer adam --steps 7" + out("state")).exit_code, 0);
  const auto smaller = run_app("enhanced-train", "--resume --quiet --epochs 3 --data " + files_.test_ebin + out("state"));
  EXPECT_NE(smaller.exit_code, 0);
  EXPECT_NE(line_starting(smaller.output, "error: ").find("the training data changed"), std::string::npos)
      << smaller.output;
  // Rewrite the state with one negative second moment.
  const fs::path path = dir("state") / "optimizer.safetensors";
  {
    const SafetensorsReader state(path.string());
    SafetensorsWriter writer;
    std::vector<std::vector<float>> keep;
    for (const auto& [name, tensor] : state.tensors()) {
      if (tensor.dtype == "F32") {
        keep.push_back(state.floats(name, tensor.shape));
        if (name == "optimizer.v.dense.bias") keep.back()[1] = -1.0f;
        writer.add(name, keep.back().data(), tensor.shape);
      } else {
        const std::vector<uint64_t> steps = state.uint64s(name);
        writer.add(name, steps.data(), tensor.shape);
      }
    }
    for (const auto& [key, value] : state.metadata()) writer.set_metadata(key, value);
    writer.write(path.string());
  }
  const auto negative = run_app("enhanced-train", "--resume --quiet --epochs 3" + out("state"));
  EXPECT_NE(negative.exit_code, 0);
  EXPECT_NE(line_starting(negative.output, "error: ").find("'optimizer.v.dense.bias' element 1 is -1"), std::string::npos)
      << negative.output;
}

TEST_F(TrainControls, ControlsThatNeedEachOtherAreCheckedBeforeAnyWork) {
  const std::string no_valid = "--data " + files_.train_ebin + " --hidden 4 --quiet --device cpu --steps 1 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {no_valid + "--lr-schedule plateau", "--lr-schedule plateau needs a validation set (--valid)"},
      {no_valid + "--early-stopping 3", "--early-stopping needs a validation set (--valid)"},
      {no_valid + "--valid-every 2", "--valid-every needs a validation set (--valid)"},
      {no_valid + "--lr-schedule step", "--lr-schedule step needs --lr-step-size of at least 1, got 0"},
      {no_valid + "--lr 0.1 --min-lr 0.5", "--min-lr must be between 0 and --lr"},
      {no_valid + "--lr-factor 1.5", "--lr-factor must be in (0, 1), got 1.5"},
      {no_valid + "--lr-schedule cosine --lr-factor 0.5", "--lr-factor has no effect here: it applies to --lr-schedule "
                                                          "step and plateau"},
      {no_valid + "--min-lr 0.0001", "--min-lr has no effect here"},
      {no_valid + "--min-delta 0.1", "--min-delta has no effect here"},
      {no_valid + "--lr-patience 3 --lr-schedule cosine", "--lr-patience has no effect here"},
      {no_valid + "--warmup-steps 1", "--warmup-steps 1 is not shorter than the run (1 steps)"},
      {flags() + "--steps 4 --early-stopping 2", "--early-stopping would never see a validation"},
  };
  for (const auto& [arguments, message] : cases) {
    const auto result = run_app("enhanced-train", arguments + out("never"));
    EXPECT_NE(result.exit_code, 0) << arguments;
    EXPECT_NE(line_starting(result.output, "error: ").find(message), std::string::npos) << arguments << ": " << result.output;
  }
  EXPECT_FALSE(fs::exists(dir("never")));
}

// Class weights are resolved when a run starts and recorded: a resume trains with them, whatever
// became of the file since.
TEST_F(TrainControls, ClassWeightsAreRecordedSoAResumeKeepsThemWhateverBecameOfTheFile) {
  const fs::path weights = dir("weights.txt");
  std::ofstream(weights) << "1 2 3 4\n";
  const std::string run = flags() + "--optimizer sgd --lr 0.1 --class-weights " + weights.string() + " ";
  ASSERT_EQ(run_app("enhanced-train", run + "--steps 8" + out("weighted-whole")).exit_code, 0);
  ASSERT_EQ(run_app("enhanced-train", run + "--steps 3" + out("weighted-cut")).exit_code, 0);
  fs::remove(weights);
  const auto resumed = run_app("enhanced-train", "--resume --quiet --steps 8" + out("weighted-cut"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(read_bytes(dir("weighted-whole") / "last.safetensors") == read_bytes(dir("weighted-cut") / "last.safetensors"));
}

// --class-weight-mean batch (Keras' denominator) trains something else than the default, is
// recorded, and a resume keeps it: without the flag it continues bit for bit, with another value
// it is refused by name.
TEST_F(TrainControls, ClassWeightMeanIsRecordedAndFixedOnResume) {
  const fs::path weights = dir("mean-weights.txt");
  std::ofstream(weights) << "0.25 3 1 0.5\n";
  const std::string run = flags() + "--optimizer sgd --lr 0.1 --class-weights " + weights.string() + " ";
  ASSERT_EQ(run_app("enhanced-train", run + "--steps 8" + out("mean-weights")).exit_code, 0);
  const std::string keras = run + "--class-weight-mean batch ";
  ASSERT_EQ(run_app("enhanced-train", keras + "--steps 8" + out("mean-batch-whole")).exit_code, 0);
  ASSERT_EQ(run_app("enhanced-train", keras + "--steps 3" + out("mean-batch-cut")).exit_code, 0);
  EXPECT_FALSE(read_bytes(dir("mean-weights") / "last.safetensors") ==
               read_bytes(dir("mean-batch-whole") / "last.safetensors"));
  const auto other = run_app("enhanced-train", "--resume --quiet --steps 8 --class-weight-mean weights" +
                                                   out("mean-batch-cut"));
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(line_starting(other.output, "error: ").find("--class-weight-mean weights conflicts with the run being "
                                                        "resumed, which has class_weight_mean = batch"),
            std::string::npos) << other.output;
  const auto resumed = run_app("enhanced-train", "--resume --quiet --steps 8" + out("mean-batch-cut"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(read_bytes(dir("mean-batch-whole") / "last.safetensors") ==
              read_bytes(dir("mean-batch-cut") / "last.safetensors"));
  const auto bad = run_app("enhanced-train", keras + "--steps 1 --class-weight-mean sum" + out("mean-bad"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(line_starting(bad.output, "error: ").find("--class-weight-mean"), std::string::npos) << bad.output;
}

TEST_F(TrainControls, ARunWhoseLastStepsComeAfterItsLastValidationSaysSo) {
  const auto short_run = run_app("enhanced-train", flags() + "--steps 3" + out("short"));
  ASSERT_EQ(short_run.exit_code, 0) << short_run.output;
  EXPECT_NE(short_run.output.find("note: this run of 3 steps never validates"), std::string::npos) << short_run.output;
  const auto longer = run_app("enhanced-train", flags() + "--steps 7" + out("longer"));
  EXPECT_NE(longer.output.find("note: the last 2 of this run's 7 steps come after its last validation, at step 5"),
            std::string::npos) << longer.output;
  const auto every = run_app("enhanced-train", flags() + "--steps 7 --valid-every 7" + out("every"));
  EXPECT_EQ(every.output.find("note: "), std::string::npos) << every.output;
}

TEST_F(TrainControls, ASeedOutsideSixtyFourBitsIsRefusedNotWrapped) {
  for (const std::string seed : {"-1", "18446744073709551616", "1.5"}) {
    const auto result = run_app("enhanced-train", flags() + "--steps 1 --seed " + seed + out("seed"));
    EXPECT_NE(result.exit_code, 0) << seed;
    EXPECT_EQ(line_starting(result.output, "error: "),
              "error: --seed must be a whole number from 0 to 18446744073709551615, got '" + seed + "'") << result.output;
  }
  EXPECT_EQ(run_app("enhanced-train", flags() + "--steps 1 --seed 18446744073709551615" + out("seed")).exit_code, 0);
}

// The data's T must be the model's, resumed or initialised from a checkpoint.
TEST_F(TrainControls, DataWhoseSequenceLengthIsNotTheModelsIsRefusedOnResumeAndInitFrom) {
  DemoOptions other;
  other.train_samples = other.valid_samples = other.test_samples = 16;
  other.seq_len = 12;
  other.vocab_size = 128;
  const DemoFiles short_files = write_demo(dir("t12").string(), other);
  ASSERT_EQ(run_app("enhanced-train", flags() + "--steps 2" + out("t16")).exit_code, 0);
  const auto resumed = run_app("enhanced-train", "--resume --quiet --steps 4 --data " + short_files.train_ebin +
                                                     " --valid " + short_files.valid_ebin + out("t16"));
  EXPECT_NE(resumed.exit_code, 0);
  EXPECT_NE(line_starting(resumed.output, "error: ").find("T = 12"), std::string::npos) << resumed.output;
  EXPECT_NE(line_starting(resumed.output, "error: ").find("T = 16"), std::string::npos) << resumed.output;
  const auto init = run_app("enhanced-train", "--quiet --device cpu --steps 1 --batch-size 4 --data " +
                                                  short_files.train_ebin + " --init-from " +
                                                  (dir("t16") / "last.safetensors").string() + out("t12-run"));
  EXPECT_NE(init.exit_code, 0);
  EXPECT_NE(line_starting(init.output, "error: ").find("T = 12"), std::string::npos) << init.output;
  EXPECT_NE(line_starting(init.output, "error: ").find("T = 16"), std::string::npos) << init.output;
}

// A run that fails before writing anything leaves no empty --out tree behind.
TEST_F(TrainControls, AFailedRunLeavesNoEmptyOutputDirectory) {
  const auto result = run_app("enhanced-train", flags() + "--optimizer sgd --lr 1e38 --steps 3 --log-every 100" +
                                                    out("fresh/a/b"));
  EXPECT_EQ(result.exit_code, 3) << result.output;
  EXPECT_FALSE(fs::exists(dir("fresh"))) << result.output;
}

}  // namespace
}  // namespace enhanced
