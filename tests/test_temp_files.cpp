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
#include "enhanced/jsonl.h"

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
  // A resume of the finished run has nothing to do but rewrite last.safetensors: it cleans too.
  write_text(dir + "/run/last.safetensors.tmp." + dead, "left by a killed rewrite");
  const auto resume = testing::run_app("enhanced-train", "--resume --quiet --out " + dir + "/run");
  ASSERT_EQ(resume.exit_code, 0) << resume.output;
  EXPECT_NE(resume.output.find("nothing to do"), std::string::npos) << resume.output;
  EXPECT_FALSE(has_temp_files(dir + "/run"));
}

// enhanced-data convert of a file long enough (a million lines: seconds of parsing) that the
// conversion is mid-way, its section temporaries on disk, when the signal comes. (A FIFO would
// hold it there for as long as the test wanted, but an input must be a regular file.)
void expect_signal_removes_temporaries(int signal_number) {
  const std::string dir = scratch_dir(), in = dir + "/in.jsonl";
  {
    std::string lines;
    for (int i = 0; i < 1000000; ++i) lines += kSample + "\n";
    write_text(in, lines);
  }
  const std::string app = std::string(ENHANCED_APP_DIR) + "/enhanced-data", out = dir + "/out.ebin";
  const pid_t child = ::fork();
  if (child == 0) {
    if (std::freopen("/dev/null", "w", stderr) == nullptr) ::_exit(126);
    ::execl(app.c_str(), app.c_str(), "convert", in.c_str(), out.c_str(), "--seq-len", "2", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  for (int wait = 0; wait < 500 && !has_temp_files(dir); ++wait) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_TRUE(has_temp_files(dir)) << "the conversion never started writing";
  ::kill(child, signal_number);
  int status = 0;
  ::waitpid(child, &status, 0);
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

// A temporary that cannot be created (here: a directory is in its place) is reported under the
// output the user named, "x.ebin: cannot create", never as "x.ebin.tmp.9494.labels".
TEST(AtomicFile, CreateFailureNamesTheOutputNotTheTemporary) {
  const std::string dir = scratch_dir(), out = dir + "/x.ebin";
  write_text(dir + "/in.jsonl", kSample + "\n");
  for (const std::string suffix : {"", ".labels", ".aux_ids"}) {
    const std::string temporary = temp_name(out, suffix);
    fs::create_directory(temporary);
    EXPECT_EQ(error_of([&] { FileWriter writer(temporary); }), out + ": cannot create: Is a directory") << suffix;
    EXPECT_EQ(error_of([&] { convert_jsonl_to_ebin(dir + "/in.jsonl", out, 0); }), out + ": cannot create: Is a directory")
        << suffix;
    fs::remove(temporary);
  }
  EXPECT_EQ(list_dir(dir), std::vector<std::string>{"in.jsonl"});
}

// Outputs not there yet are the same file under the same normalised path.
TEST(AtomicFile, SameFileComparesNormalisedPathsOfFilesNotThereYet) {
  const std::string dir = scratch_dir();
  EXPECT_TRUE(same_file(dir + "/a.npy", dir + "/./a.npy"));
  EXPECT_TRUE(same_file(dir + "/a.npy", dir + "/sub/../a.npy"));
  EXPECT_FALSE(same_file(dir + "/a.npy", dir + "/b.npy"));
  // Relative to the working directory and absolute, none of it there yet (weakly_canonical alone
  // leaves "x.npy" relative and makes "./x.npy" absolute).
  const std::string name = "same-file." + std::to_string(::getpid()) + ".npy";
  EXPECT_TRUE(same_file(name, "./" + name));
  EXPECT_TRUE(same_file(name, (fs::current_path() / name).string()));
  EXPECT_TRUE(same_file("./" + name, (fs::current_path() / "nodir" / ".." / name).string()));
  EXPECT_FALSE(same_file(name, "./other-" + name));
}

// A signal that ends the process while write_file_atomically writes (a second Ctrl-C during a
// checkpoint) removes its temporary: it is registered before it is created. The write is made
// long (hundreds of MB) so that the signal lands inside it; a write that finished first is
// tried again larger, and at least one trial must have been cut.
TEST(SignalTempFiles, SignalDuringAnAtomicWriteLeavesNoTemporary) {
  const std::string dir = scratch_dir();
  int cut = 0;
  for (size_t megabytes = 256; megabytes <= 2048 && cut == 0; megabytes *= 2) {
    const std::string out = dir + "/big.bin";
    const pid_t child = ::fork();
    if (child == 0) {
      remove_temp_files_on_signal();
      const std::vector<char> bytes(megabytes << 20, 'x');
      write_file_atomically(out, {{bytes.data(), bytes.size()}});
      ::_exit(0);
    }
    const std::string temporary = out + ".tmp." + std::to_string(child);  // temp_name in the child
    for (int waited = 0; waited < 20000 && !fs::exists(temporary) && !fs::exists(out); ++waited)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ::kill(child, SIGTERM);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) {
      ++cut;
      EXPECT_FALSE(fs::exists(temporary)) << megabytes << " MB: the temporary outlived the signal";
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << megabytes << " MB: status " << status;
    }
    fs::remove(out);
  }
  EXPECT_GT(cut, 0) << "no trial's signal landed inside the write";
  EXPECT_FALSE(has_temp_files(dir));
}

TEST(SignalTempFiles, SigtermDuringConvertLeavesNoTemporaries) { expect_signal_removes_temporaries(SIGTERM); }
TEST(SignalTempFiles, SigintDuringConvertLeavesNoTemporaries) { expect_signal_removes_temporaries(SIGINT); }

}  // namespace
}  // namespace enhanced
