// Temporary files never outlive their process: a conversion ended by SIGTERM or SIGINT removes
// its own, and those a SIGKILL left (their process gone) are removed when the next conversion or
// training run starts writing beside them; a live process's are kept.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "app_runner.h"
#include "data_test_util.h"
#include "enhanced/atomic_file.h"

namespace enhanced {
namespace {

using namespace enhanced::test_util;
namespace fs = std::filesystem;

const std::string kSample = R"({"label":1,"tokens":[[[1,2],[],[3]],[[],[4],[5]]]})";

// The id of a process that has exited and been reaped.
long dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

bool has_temp_files(const std::string& dir) {
  for (const std::string& name : list_dir(dir))
    if (name.find(".tmp.") != std::string::npos) return true;
  return false;
}

TEST(StaleTempFiles, OnlyThoseOfDeadProcessesAreRemoved) {
  const std::string dir = scratch_dir();
  const std::string dead = std::to_string(dead_pid()), self = std::to_string(::getpid());
  const std::vector<std::string> stale = {"out.ebin.tmp." + dead, "out.ebin.tmp." + dead + ".labels"};
  const std::vector<std::string> kept = {
      "out.ebin.tmp." + self + ".aux_ids",   // this process's own
      "last.safetensors.tmp.1",              // init's: alive
      "notes.tmp.draft",                     // not a process id
      "out.ebin.tmp." + dead + ".labels.bak",  // not our suffix
      ".tmp." + dead,                        // no target
  };
  for (const auto& name : stale) write_text(dir + "/" + name, "x");
  for (const auto& name : kept) write_text(dir + "/" + name, "x");
  fs::create_directory(dir + "/folder.tmp." + dead);
  std::vector<std::string> removed = remove_stale_temp_files(dir);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{dir + "/" + stale[0], dir + "/" + stale[1]}));
  std::vector<std::string> expected = kept;
  expected.push_back("folder.tmp." + dead);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(list_dir(dir), expected);
}

TEST(StaleTempFiles, ConvertAndTrainRemoveThemWhenTheyStart) {
  const std::string dir = scratch_dir(), dead = std::to_string(dead_pid());
  write_text(dir + "/in.jsonl", kSample + "\n");
  write_text(dir + "/out.ebin.tmp." + dead + ".id_ids", "left by kill -9");
  write_text(dir + "/out.ebin.tmp.1.labels", "init's, alive");
  const AppResult convert = run_data_app("convert '" + dir + "/in.jsonl' '" + dir + "/out.ebin' --seq-len 2", dir);
  ASSERT_EQ(convert.status, 0) << convert.err;
  EXPECT_EQ(list_dir(dir), (std::vector<std::string>{"in.jsonl", "out.ebin", "out.ebin.tmp.1.labels"}));

  const DemoFiles files = testing::write_small_demo(dir + "/demo");
  fs::create_directories(dir + "/run");
  write_text(dir + "/run/last.safetensors.tmp." + dead, "left by kill -9");
  const auto train = testing::run_app("enhanced-train", testing::small_train_flags(files) + "--device cpu --steps 1 --out " + dir + "/run");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_FALSE(has_temp_files(dir + "/run"));
}

// enhanced-data convert reading a FIFO that the test keeps open, so the conversion is mid-way
// (its section temporaries on disk) for as long as the test wants.
void expect_signal_removes_temporaries(int signal_number) {
  const std::string dir = scratch_dir(), fifo = dir + "/in.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string app = std::string(ENHANCED_APP_DIR) + "/enhanced-data", out = dir + "/out.ebin";
  const pid_t child = ::fork();
  if (child == 0) {
    std::freopen("/dev/null", "w", stderr);
    ::execl(app.c_str(), app.c_str(), "convert", fifo.c_str(), out.c_str(), "--seq-len", "2", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // O_RDWR: Linux opens a FIFO this way without waiting for a reader, so a converter that never
  // starts fails the test below instead of hanging it.
  FILE* writer = ::fdopen(::open(fifo.c_str(), O_RDWR), "w");
  ASSERT_NE(writer, nullptr);
  for (int i = 0; i < 100; ++i) std::fprintf(writer, "%s\n", kSample.c_str());
  std::fflush(writer);
  for (int wait = 0; wait < 500 && !has_temp_files(dir); ++wait) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(has_temp_files(dir)) << "the conversion never started writing";
  ::kill(child, signal_number);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::fclose(writer);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal_number) << "status " << status;
  EXPECT_EQ(list_dir(dir), std::vector<std::string>{"in.jsonl"});
}

// A missing output folder is named with the user's path, even when a temporary is being created.
TEST(AtomicFile, MissingDirectoryNamesTheUsersPath) {
  const std::string dir = scratch_dir();
  const std::string target = dir + "/nodir/p.csv";
  const std::string expected = target + ": cannot create: directory " + dir + "/nodir does not exist";
  for (const std::string& name : {target, temp_name(target), temp_name(temp_name(target), ".labels")}) {
    try {
      FileWriter writer(name);
      ADD_FAILURE() << name << " was created";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), expected) << name;
    }
  }
  try {
    write_file_atomically(target, {});
    ADD_FAILURE() << target << " was written";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), expected);
  }
  EXPECT_NO_THROW(check_output_directory(dir + "/here.csv"));
  EXPECT_NO_THROW(check_output_directory("here.csv"));
}

// Outputs not there yet are the same file under the same normalised path.
TEST(AtomicFile, SameFileComparesNormalisedPathsOfFilesNotThereYet) {
  const std::string dir = scratch_dir();
  EXPECT_TRUE(same_file(dir + "/a.npy", dir + "/./a.npy"));
  EXPECT_TRUE(same_file(dir + "/a.npy", dir + "/sub/../a.npy"));
  EXPECT_FALSE(same_file(dir + "/a.npy", dir + "/b.npy"));
}

TEST(SignalTempFiles, SigtermDuringConvertLeavesNoTemporaries) { expect_signal_removes_temporaries(SIGTERM); }
TEST(SignalTempFiles, SigintDuringConvertLeavesNoTemporaries) { expect_signal_removes_temporaries(SIGINT); }

}  // namespace
}  // namespace enhanced
