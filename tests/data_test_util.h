// Helpers shared by the tests: scratch directories, random ragged samples in the compact JSONL
// form, running the enhanced-data app, an app's output line that starts with a prefix, the
// fixture of the suites that run the apps on the small demo sets, catching an Error's message,
// and handing the files the tests write to the fuzzers as seeds (docs/fuzzing.md).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "app_runner.h"
#include "enhanced/common.h"

#define EXPECT_CONTAINS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

namespace enhanced::test_util {

// The message of the Error `fn` throws, or "<no error>".
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// Copies `path` into $ENHANCED_FUZZ_SEEDS/<target>/ under the running test's name (and `label`,
// for a test that writes one path several times), where that variable is set (scripts/test sets
// it; scripts/fuzz starts each target from these files).
inline void drop_fuzz_seed(const char* target, const std::string& path, const std::string& label = "") {
  const char* root = std::getenv("ENHANCED_FUZZ_SEEDS");
  if (root == nullptr || *root == '\0') return;
  // Outside a test (a suite's SetUpTestSuite) there is no current test, only the suite.
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const auto* suite = ::testing::UnitTest::GetInstance()->current_test_suite();
  const std::string owner = info ? std::string(info->test_suite_name()) + "." + info->name()
                                 : std::string(suite ? suite->name() : "no-suite") + ".setup";
  const std::filesystem::path dir = std::filesystem::path(root) / target;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  std::string name = owner + "." + std::filesystem::path(path).filename().string() + label;
  for (char& c : name)
    if (c == '/') c = '_';
  std::filesystem::copy_file(path, dir / name, std::filesystem::copy_options::overwrite_existing, error);
}

// A fresh, empty directory unique to the running test.
inline std::string scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  for (char& c : name)
    if (c == '/') c = '_';
  std::filesystem::path dir = std::filesystem::path(ENHANCED_TEST_TMP) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A text's lines, without their newlines.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The first line of `output` (an app's stdout and stderr) that starts with `prefix`, without its
// newline; "" when none does. line_starting(run.output, "error: ") is an app's error line.
inline std::string line_starting(const std::string& output, const std::string& prefix) {
  for (size_t at = 0; at < output.size();) {
    const size_t end = std::min(output.find('\n', at), output.size());
    if (output.compare(at, prefix.size(), prefix) == 0) return output.substr(at, end - at);
    at = end + 1;
  }
  return "";
}

// The fixture of a suite that runs the apps on the small demo sets (app_runner.h): before the
// suite, a scratch folder of its own, ENHANCED_TEST_TMP/<suite>.<pid> (CTest runs each test in
// its own process, possibly in parallel), root_, with the sets in root_/data, files_; after it,
// the folder removed. A suite that needs more calls SmallDemoSuite::SetUpTestSuite() first.
class SmallDemoSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto* suite = ::testing::UnitTest::GetInstance()->current_test_suite();
    root_ = std::filesystem::path(ENHANCED_TEST_TMP) /
            (std::string(suite ? suite->name() : "suite") + "." + std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
    files_ = testing::write_small_demo(root_ / "data");
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(root_); }

  static inline std::filesystem::path root_;
  static inline DemoFiles files_;
};

struct RaggedSample {
  int label = 0;
  std::vector<std::vector<int32_t>> identifier, auxiliary;
  std::vector<int32_t> cur;
};

inline std::vector<RaggedSample> random_samples(int n, int T, uint32_t seed, int max_id = 5000,
                                                int num_labels = 7) {
  std::mt19937 rng(seed);
  std::vector<RaggedSample> out(static_cast<size_t>(n));
  for (auto& s : out) {
    s.label = static_cast<int>(rng() % static_cast<uint32_t>(num_labels));
    s.identifier.resize(static_cast<size_t>(T));
    s.auxiliary.resize(static_cast<size_t>(T));
    s.cur.resize(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) {
      int ni = static_cast<int>(rng() % 6), na = static_cast<int>(rng() % 3);
      for (int k = 0; k < ni; ++k) s.identifier[t].push_back(static_cast<int32_t>(rng() % (max_id + 1)));
      for (int k = 0; k < na; ++k) s.auxiliary[t].push_back(static_cast<int32_t>(rng() % (max_id + 1)));
      s.cur[t] = static_cast<int32_t>(rng() % (max_id + 1));
    }
  }
  return out;
}

inline std::string list_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k) s.push_back(',');
    s.append(std::to_string(ids[k]));
  }
  s.push_back(']');
  return s;
}

// The compact form the converter writes back (without "label": an unlabeled sample).
inline std::string sample_json(const RaggedSample& s, bool labeled = true) {
  std::string line = labeled ? "{\"label\":" + std::to_string(s.label) + ",\"tokens\":[" : "{\"tokens\":[";
  for (size_t t = 0; t < s.cur.size(); ++t) {
    if (t) line.push_back(',');
    line.push_back('[');
    line.append(list_json(s.identifier[t]));
    line.push_back(',');
    line.append(list_json(s.auxiliary[t]));
    line.append(",[");
    line.append(std::to_string(s.cur[t]));
    line.append("]]");
  }
  line.append("]}");
  return line;
}

inline std::string samples_jsonl(const std::vector<RaggedSample>& samples, bool labeled = true) {
  std::string text;
  for (const auto& s : samples) text += sample_json(s, labeled) + "\n";
  return text;
}

struct AppResult {
  int status = -1;  // exit status
  std::string out, err;
};

// Runs enhanced-data with `args` (already shell-quoted as needed), capturing stdout and stderr.
inline AppResult run_data_app(const std::string& args, const std::string& dir) {
  const std::string out = dir + "/app.stdout", err = dir + "/app.stderr";
  const std::string cmd = std::string("'") + ENHANCED_APP_DIR + "/enhanced-data' " + args + " >'" + out + "' 2>'" + err + "'";
  int raw = std::system(cmd.c_str());
  AppResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_text(out);
  r.err = read_text(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

// A failed run: exit status 1 and exactly one line "error: ..." holding `needle`.
inline void expect_one_line_error(const AppResult& r, const std::string& needle) {
  EXPECT_EQ(r.status, 1) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

// Names of the files in `dir`.
inline std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace enhanced::test_util
