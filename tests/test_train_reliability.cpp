// enhanced-train when things go wrong around it: a second run on the same --out (the lock),
// SIGINT and SIGTERM (saved at the next step boundary; a second signal ends it at once), a
// validation label outside the training set's labels, and what a resume reports (its length,
// the run's total time). Signals are raised in-process at a chosen step with
// ENHANCED_TEST_SIGNAL_AT_STEP=N[:SIGNAL...], and once from outside with kill -INT.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "app_runner.h"
#include "data_test_util.h"
#include "enhanced/demo.h"
#include "enhanced/safetensors.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;
using test_util::line_starting;
using testing::read_bytes;
using testing::run_app;
using testing::run_command;

class TrainReliability : public test_util::SmallDemoSuite {
 protected:
  static std::string flags() { return testing::small_train_flags(files_) + "--device cpu "; }
  static std::string out(const std::string& name) { return " --out " + dir(name).string() + " "; }
  static fs::path dir(const std::string& name) { return root_ / name; }
  static std::string app() { return std::string(ENHANCED_APP_DIR) + "/enhanced-train "; }

  // Starts a long run as a child of this process (a shell's background job would inherit SIGINT
  // ignored); returns its pid once its first state file exists.
  static pid_t start_long_run(const std::string& name) {
    const std::string command = "exec " + app() + flags() + "--steps 1000000 --checkpoint-every 5 --log-every 5" +
                                out(name) + "> " + dir(name + ".log").string() + " 2>&1";
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    for (int i = 0; i < 1200 && !fs::exists(dir(name) / "optimizer.safetensors"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(fs::exists(dir(name) / "optimizer.safetensors")) << read_bytes(dir(name + ".log"));
    return pid;
  }

  // Sends `signal` to the run and returns its exit status once it ended, as a shell gives it
  // (128 + the signal that killed it; -1: it did not end within 30 s).
  static int stop(pid_t pid, int signal) {
    ::kill(pid, signal);
    int status = 0;
    for (int i = 0; i < 600; ++i) {
      if (::waitpid(pid, &status, WNOHANG) == pid)
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return -1;
  }

  static int64_t saved_step(const std::string& name) {
    return std::atoll(SafetensorsReader((dir(name) / "optimizer.safetensors").string()).metadata_value("step").c_str());
  }
};

// A run holds DIR/.lock: a second one, fresh, --overwrite or --resume, is refused at once and
// changes nothing; once the holder is killed (-9: no clean-up) the run resumes.
TEST_F(TrainReliability, ASecondRunOnTheSameOutIsRefusedWhileTheFirstHoldsItAndAKilledHolderLeavesNoLock) {
  const pid_t pid = start_long_run("locked");
  ASSERT_GT(pid, 0);
  const std::string expected = "error: " + dir("locked").string() + ": another enhanced-train (pid " +
                               std::to_string(pid) + ") is using this directory";
  for (const std::string& second : {flags() + "--steps 2", flags() + "--steps 2 --overwrite", std::string("--resume --quiet")}) {
    const auto refused = run_app("enhanced-train", second + out("locked"));
    EXPECT_NE(refused.exit_code, 0) << second;
    EXPECT_EQ(line_starting(refused.output, "error: "), expected) << second << ": " << refused.output;
  }
  EXPECT_TRUE(fs::exists(dir("locked") / "last.safetensors"));
  EXPECT_GT(saved_step("locked"), 0);  // the state file is still whole (the --overwrite removed nothing)
  ASSERT_EQ(stop(pid, SIGKILL), 128 + SIGKILL);
  const int64_t step = saved_step("locked");
  const auto resumed = run_app("enhanced-train", "--resume --quiet --steps " + std::to_string(step + 2) + out("locked"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(saved_step("locked"), step + 2);
}

// The lock file is no run, and a failed run removes the directory it created, lock file included.
TEST_F(TrainReliability, TheLockFileIsNoRunAndAFailedRunRemovesItWithItsDirectory) {
  fs::create_directories(dir("lock-only"));
  std::ofstream(dir("lock-only") / ".lock") << "12345\n";
  const auto fresh = run_app("enhanced-train", flags() + "--steps 1" + out("lock-only"));
  EXPECT_EQ(fresh.exit_code, 0) << fresh.output;
  const auto failed = run_app("enhanced-train", flags() + "--steps 1 --batch-size 1000 --drop-last" + out("new/run"));
  EXPECT_NE(failed.exit_code, 0);
  EXPECT_FALSE(fs::exists(dir("new"))) << failed.output;
  const auto no_dir = run_app("enhanced-train", "--resume" + out("missing"));
  EXPECT_NE(line_starting(no_dir.output, "error: ").find("no run to resume"), std::string::npos) << no_dir.output;
  EXPECT_FALSE(fs::exists(dir("missing")));
}

// SIGINT (130) and SIGTERM (143), in the middle of an epoch and on its last step: the step taken
// is saved, and the resumed run equals the uninterrupted one bit for bit.
TEST_F(TrainReliability, ASignalSavesTheStepTakenAndTheResumedRunEqualsTheUninterruptedOne) {
  const std::string run = flags() + "--optimizer adam --lr 0.02 --epochs 2 --log-every 2 --valid-every 3 ";
  ASSERT_EQ(run_app("enhanced-train", run + out("uninterrupted")).exit_code, 0);
  struct Case {
    std::string name, asked;
    int exit_code;
    int64_t step;
  };
  for (const Case& c : {Case{"sigint", "7", 130, 7}, Case{"sigterm", "5:15", 143, 5}, Case{"sigint-2", "4:2", 130, 4}}) {
    ::setenv("ENHANCED_TEST_SIGNAL_AT_STEP", c.asked.c_str(), 1);
    const auto interrupted = run_app("enhanced-train", run + out(c.name));
    ::unsetenv("ENHANCED_TEST_SIGNAL_AT_STEP");
    EXPECT_EQ(interrupted.exit_code, c.exit_code) << c.name << ": " << interrupted.output;
    EXPECT_NE(interrupted.output.find("interrupted at step " + std::to_string(c.step) + ": saved, --resume continues"),
              std::string::npos) << c.name << ": " << interrupted.output;
    EXPECT_EQ(saved_step(c.name), c.step) << c.name;
    const auto resumed = run_app("enhanced-train", "--resume --quiet" + out(c.name));
    ASSERT_EQ(resumed.exit_code, 0) << c.name << ": " << resumed.output;
    for (const char* file : {"last.safetensors", "best.safetensors", "optimizer.safetensors"})
      EXPECT_TRUE(read_bytes(dir("uninterrupted") / file) == read_bytes(dir(c.name) / file)) << c.name << ": " << file;
  }
}

// A second signal does not wait for the step boundary: the process ends with the signal's
// default action, saving nothing more and leaving no temporary file.
TEST_F(TrainReliability, ASecondSignalEndsTheProcessAtOnce) {
  ::setenv("ENHANCED_TEST_SIGNAL_AT_STEP", "7:2:2", 1);
  const auto twice = run_command(app() + flags() + "--epochs 2" + out("twice") + " 2>&1; echo exit=$?");
  ::unsetenv("ENHANCED_TEST_SIGNAL_AT_STEP");
  EXPECT_NE(twice.output.find("exit=130"), std::string::npos) << twice.output;
  EXPECT_EQ(twice.output.find("interrupted at step"), std::string::npos) << twice.output;
  EXPECT_EQ(saved_step("twice"), 5);  // the epoch's checkpoint, not step 7
  for (const auto& entry : fs::directory_iterator(dir("twice")))
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
}

// A resume with nothing to do rewrites last.safetensors: a signal then lets the rewrite finish
// and exits as a run's first signal does (143), a second one ends it at once; either way
// last.safetensors is whole and no temporary is left.
TEST_F(TrainReliability, ASignalDuringTheRewriteOfAFinishedRunLeavesLastWholeAndNoTemporary) {
  ASSERT_EQ(run_app("enhanced-train", flags() + "--steps 3" + out("finished")).exit_code, 0);
  const std::string last = read_bytes(dir("finished") / "last.safetensors");
  for (const auto& [asked, once] : {std::pair{"3:15", true}, std::pair{"3:15:15", false}}) {
    ::setenv("ENHANCED_TEST_SIGNAL_AT_STEP", asked, 1);
    const auto again = run_command(app() + "--resume --quiet" + out("finished") + " 2>&1; echo exit=$?");
    ::unsetenv("ENHANCED_TEST_SIGNAL_AT_STEP");
    EXPECT_NE(again.output.find("nothing to do"), std::string::npos) << asked << ": " << again.output;
    EXPECT_NE(again.output.find("exit=143"), std::string::npos) << asked << ": " << again.output;
    EXPECT_EQ(again.output.find("interrupted: last.safetensors is whole") != std::string::npos, once) << again.output;
    EXPECT_TRUE(read_bytes(dir("finished") / "last.safetensors") == last) << asked;
    for (const auto& entry : fs::directory_iterator(dir("finished")))
      EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << asked << ": " << entry.path();
  }
}

// A real Ctrl-C from outside (kill -INT) at whatever step the run has reached.
TEST_F(TrainReliability, KillIntFromOutsideSavesAndExits130) {
  const pid_t pid = start_long_run("external");
  ASSERT_GT(pid, 0);
  EXPECT_EQ(stop(pid, SIGINT), 130) << read_bytes(dir("external.log"));
  const std::string log = read_bytes(dir("external.log"));
  const int64_t step = saved_step("external");
  EXPECT_NE(log.find("interrupted at step " + std::to_string(step) + ": saved, --resume continues"), std::string::npos)
      << log;
  const std::string length = " --steps " + std::to_string(step + 3);
  ASSERT_EQ(run_app("enhanced-train", "--resume --quiet" + length + out("external")).exit_code, 0);
  ASSERT_EQ(run_app("enhanced-train", flags() + "--checkpoint-every 5 --log-every 5" + length + out("external-whole"))
                .exit_code, 0);
  EXPECT_TRUE(read_bytes(dir("external") / "last.safetensors") == read_bytes(dir("external-whole") / "last.safetensors"));
}

// L comes from the training set (or --num-labels): a validation label outside it is an error
// naming the file and the sample, not a silently larger model.
TEST_F(TrainReliability, AValidationLabelOutsideTheTrainingLabelsIsAnError) {
  DemoOptions more;
  more.train_samples = more.valid_samples = more.test_samples = 24;
  more.seq_len = 16;
  more.vocab_size = 128;
  more.embedding_dim = 8;
  more.num_labels = 6;
  const DemoFiles six = write_demo(dir("six-labels").string(), more);
  const std::string run = "--data " + files_.train_ebin + " --valid " + six.valid_ebin +
                          " --hidden 6 --batch-size 16 --threads 2 --quiet --device cpu --steps 1";
  const auto result = run_app("enhanced-train", run + out("labels"));
  EXPECT_NE(result.exit_code, 0) << result.output;
  const std::string line = line_starting(result.output, "error: ");
  EXPECT_NE(line.find(six.valid_ebin + ": sample "), std::string::npos) << result.output;
  EXPECT_NE(line.find("does not fit the model's 4 labels"), std::string::npos) << result.output;
  EXPECT_EQ(run_app("enhanced-train", run + " --num-labels 6" + out("labels-6")).exit_code, 0);
}

// A resume with the run's own length says nothing about it; done: gives the run's total time and
// this process's, and metrics.jsonl's times go on from the first process's.
TEST_F(TrainReliability, AResumeReportsOnlyRealLengthChangesAndTheRunsTotalTime) {
  ASSERT_EQ(run_app("enhanced-train", flags() + "--steps 4 --log-every 2" + out("timed")).exit_code, 0);
  const auto same = run_app("enhanced-train", "--resume --steps 4" + out("timed"));
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_EQ(same.output.find("length changed"), std::string::npos) << same.output;
  const auto longer = run_app("enhanced-train", "--resume --steps 8 --log-every 2" + out("timed"));
  ASSERT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_NE(longer.output.find("resume: the run's length changed from 4 steps to 8 steps"), std::string::npos);
  EXPECT_TRUE(std::regex_search(longer.output, std::regex("done: 8 steps in [0-9hms]+ \\([0-9hms]+ in this process\\)")))
      << longer.output;
  std::vector<double> seconds;
  std::ifstream in(dir("timed") / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (const auto j = nlohmann::json::parse(line); j.contains("seconds")) seconds.push_back(j["seconds"]);
  ASSERT_EQ(seconds.size(), 4u);
  for (size_t i = 1; i < seconds.size(); ++i) EXPECT_GE(seconds[i], seconds[i - 1]) << i;
}

}  // namespace
}  // namespace enhanced
