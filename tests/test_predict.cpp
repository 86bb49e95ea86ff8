// enhanced-predict: its top-k files against enhanced-eval's predictions and its own .npy
// outputs, every input form (.ebin, JSON Lines, labeled or not), NumPy reading the .npy files,
// and every bad input; the unlabeled set refused by training and evaluation.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app_runner.h"
#include "data_test_util.h"
#include "enhanced/dataset.h"
#include "enhanced/embedding_table.h"
#include "enhanced/engine.h"
#include "enhanced/jsonl.h"
#include "enhanced/npy.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;
using test_util::line_starting;
using test_util::lines_of;
using test_util::read_text;
using test_util::write_text;

std::vector<std::string> fields_of(const std::string& line) {
  std::vector<std::string> fields;
  std::istringstream in(line);
  for (std::string field; std::getline(in, field, ',');) fields.push_back(field);
  return fields;
}

// The float32 values of an .npy file this project wrote, after checking its header.
std::vector<float> npy_values(const std::string& path, int64_t rows, int cols) {
  const std::string bytes = read_text(path);
  const std::string header = npy_float32_header({rows, cols});
  EXPECT_EQ(bytes.substr(0, header.size()), header) << path;
  std::vector<float> values(static_cast<size_t>(rows) * static_cast<size_t>(cols));
  EXPECT_EQ(bytes.size(), header.size() + values.size() * sizeof(float)) << path;
  if (bytes.size() == header.size() + values.size() * sizeof(float))
    std::memcpy(values.data(), bytes.data() + header.size(), values.size() * sizeof(float));
  return values;
}

// A Python with NumPy (the Debian one that scripts/setup installs it for), or "".
std::string python_with_numpy() {
  for (const char* python : {"python3", "/usr/bin/python3"})
    if (std::system((std::string(python) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return python;
  return "";
}

class Predict : public test_util::SmallDemoSuite {
 protected:
  static void SetUpTestSuite() {
    SmallDemoSuite::SetUpTestSuite();
    const std::string flags = testing::small_train_flags(files_) + "--device cpu --steps 10 --out ";
    ASSERT_EQ(testing::run_app("enhanced-train", flags + (root_ / "run").string()).exit_code, 0);
    // The test set without its labels, as JSON Lines and .ebin.
    convert_ebin_to_jsonl(files_.test_ebin, (root_ / "labeled.jsonl").string());
    std::string text = read_text((root_ / "labeled.jsonl").string()), stripped;
    for (const std::string& line : lines_of(text)) {
      stripped += '{';
      stripped += line.substr(line.find("\"tokens\""));
      stripped += '\n';
    }
    write_text(unlabeled_jsonl(), stripped);
    convert_jsonl_to_ebin(unlabeled_jsonl(), unlabeled_ebin(), 0);
  }

  static std::string checkpoint() { return (root_ / "run" / "last.safetensors").string(); }
  static std::string unlabeled_jsonl() { return (root_ / "unlabeled.jsonl").string(); }
  static std::string unlabeled_ebin() { return (root_ / "unlabeled.ebin").string(); }
  static std::string path(const std::string& name) { return (root_ / name).string(); }
  static testing::AppResult predict(const std::string& args) {
    return testing::run_app("enhanced-predict", "--device cpu --threads 2 --quiet --checkpoint " + checkpoint() + " " + args);
  }
};

TEST_F(Predict, TopOneIsEnhancedEvalsPredictionAndNpyFilesHoldTheDistribution) {
  const auto eval = testing::run_app("enhanced-eval", "--device cpu --threads 2 --json --data " + files_.test_ebin +
                                                          " --checkpoint " + checkpoint() + " --predictions " + path("eval.csv"));
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  const auto run = predict("--data " + files_.test_ebin + " --top-k 4 --out " + path("p.csv") + " --logits " +
                           path("z.npy") + " --probabilities " + path("p.npy"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "");  // --quiet
  const std::vector<std::string> rows = lines_of(read_text(path("p.csv"))), eval_rows = lines_of(read_text(path("eval.csv")));
  ASSERT_EQ(rows.size(), 25u);
  ASSERT_EQ(eval_rows.size(), 25u);
  EXPECT_EQ(rows[0], "sample,label_1,probability_1,label_2,probability_2,label_3,probability_3,label_4,probability_4");
  const std::vector<float> z = npy_values(path("z.npy"), 24, 4), p = npy_values(path("p.npy"), 24, 4);
  for (size_t s = 0; s < 24; ++s) {
    const std::vector<std::string> f = fields_of(rows[s + 1]), e = fields_of(eval_rows[s + 1]);
    ASSERT_EQ(f.size(), 9u);
    EXPECT_EQ(f[0], std::to_string(s));
    EXPECT_EQ(f[1], e[2]) << "top label differs from enhanced-eval's, sample " << s;
    EXPECT_NEAR(std::stod(f[2]), std::stod(e[3]), 1e-6);
    // The four labels are a permutation, most probable first, each with its .npy probability.
    std::vector<int> labels;
    for (int k = 0; k < 4; ++k) {
      labels.push_back(std::stoi(f[1 + 2 * k]));
      EXPECT_EQ(std::stof(f[2 + 2 * k]), p[s * 4 + static_cast<size_t>(labels.back())]);
      if (k) {
        EXPECT_GE(std::stod(f[2 * k]), std::stod(f[2 + 2 * k]));
      }
    }
    std::sort(labels.begin(), labels.end());
    EXPECT_EQ(labels, (std::vector<int>{0, 1, 2, 3}));
    // The probabilities are the softmax of the logits.
    const float* row = z.data() + s * 4;
    const double top = *std::max_element(row, row + 4);
    double sum = 0;
    for (int l = 0; l < 4; ++l) sum += std::exp(row[l] - top);
    for (int l = 0; l < 4; ++l) EXPECT_NEAR(p[s * 4 + static_cast<size_t>(l)], std::exp(row[l] - top) / sum, 1e-6);
  }
}

TEST_F(Predict, EveryInputFormGivesTheSameBytesAndJsonLinesTheSameContent) {
  const auto base = predict("--data " + files_.test_ebin + " --top-k 2 --logits " + path("base.npy"));
  ASSERT_EQ(base.exit_code, 0) << base.output;  // CSV on stdout
  EXPECT_EQ(lines_of(base.output).size(), 25u);
  for (const std::string& data : {files_.test_jsonl, unlabeled_jsonl(), unlabeled_ebin()}) {
    const auto other = predict("--data " + data + " --top-k 2 --logits " + path("other.npy"));
    ASSERT_EQ(other.exit_code, 0) << other.output;
    EXPECT_EQ(other.output, base.output) << data;
    EXPECT_EQ(read_text(path("other.npy")), read_text(path("base.npy"))) << data;
  }
  const auto batched = predict("--data " + unlabeled_ebin() + " --top-k 2 --batch-size 5");
  EXPECT_EQ(batched.output, base.output) << "the batch size changed the predictions";
  ASSERT_EQ(predict("--data " + unlabeled_ebin() + " --top-k 2 --out " + path("p.jsonl")).exit_code, 0);
  const std::vector<std::string> json_lines = lines_of(read_text(path("p.jsonl"))), csv = lines_of(base.output);
  ASSERT_EQ(json_lines.size(), 24u);
  for (size_t s = 0; s < 24; ++s) {
    const nlohmann::json j = nlohmann::json::parse(json_lines[s]);
    const std::vector<std::string> f = fields_of(csv[s + 1]);
    EXPECT_EQ(j["sample"], s);
    EXPECT_EQ(j["labels"], nlohmann::json::array({std::stoi(f[1]), std::stoi(f[3])}));
    EXPECT_EQ(j["probabilities"][0].get<float>(), std::stof(f[2]));
    EXPECT_EQ(j["probabilities"][1].get<float>(), std::stof(f[4]));
  }
  // No temporary is left in the system's temporary directory by the JSON Lines input.
  for (const auto& entry : fs::directory_iterator(fs::temp_directory_path()))
    EXPECT_EQ(entry.path().filename().string().find("enhanced-predict.unlabeled.jsonl"), std::string::npos);
}

// Labels are ignored, so no label value can matter: 5 and 2^31-2 on this L = 4 model (which the
// loss once read past the logits for: a segfault, or a silent read) give the valid labels' outputs.
TEST_F(Predict, LabelsBeyondTheModelAreHarmless) {
  const auto base = predict("--data " + files_.test_ebin + " --top-k 2 --logits " + path("valid-labels.npy"));
  ASSERT_EQ(base.exit_code, 0) << base.output;
  for (const std::string label : {"5", "2147483646"}) {
    std::string text;
    for (const std::string& line : lines_of(read_text(path("labeled.jsonl"))))
      text += "{\"label\":" + label + line.substr(line.find(",\"tokens\"")) + "\n";
    const std::string jsonl = path("label" + label + ".jsonl"), ebin = path("label" + label + ".ebin");
    write_text(jsonl, text);
    convert_jsonl_to_ebin(jsonl, ebin, 0);
    for (const std::string& data : {jsonl, ebin}) {
      const auto run = predict("--data " + data + " --top-k 2 --logits " + path("big-labels.npy"));
      ASSERT_EQ(run.exit_code, 0) << data << ": " << run.output;
      EXPECT_EQ(run.output, base.output) << data;
      EXPECT_EQ(read_text(path("big-labels.npy")), read_text(path("valid-labels.npy"))) << data;
    }
  }
}

// Every input file flag of the apps that run a model, given a FIFO (which used to block
// --data, --valid and --class-weights forever) or a directory ("cannot mmap: No such device"):
// one line naming the file and what it is, at once.
TEST_F(Predict, EveryInputFlagRefusesAFifoAndADirectory) {
  const std::string train = "--device cpu --quiet --hidden 4 --steps 1 --out " + path("fifo-run") + " ";
  const std::string data = "--data " + files_.train_ebin + " ";
  const std::vector<std::pair<std::string, std::string>> flags = {
      {"enhanced-train", train + "--data "},
      {"enhanced-train", train + data + "--valid "},
      {"enhanced-train", train + data + "--class-weights "},
      {"enhanced-train", train + data + "--pretrained "},
      {"enhanced-train", train + data + "--init-from "},
      {"enhanced-eval", "--device cpu --checkpoint " + checkpoint() + " --data "},
      {"enhanced-eval", "--device cpu --data " + files_.test_ebin + " --checkpoint "},
      {"enhanced-predict", "--device cpu --quiet --checkpoint " + checkpoint() + " --data "},
      {"enhanced-predict", "--device cpu --quiet --data " + files_.test_ebin + " --checkpoint "},
  };
  const std::string fifo = path("in.fifo"), fifo_jsonl = path("fifo.jsonl"), folder = path("folder");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(fifo_jsonl.c_str(), 0600), 0);
  fs::create_directory(folder);
  const std::vector<std::pair<std::string, std::string>> inputs = {
      {fifo, "a FIFO"}, {folder, "a directory"}, {fifo_jsonl, "a FIFO"}};
  for (const auto& [app, arguments] : flags)
    for (const auto& [input, kind] : inputs) {
      if (input == fifo_jsonl && app != "enhanced-predict") continue;  // predict reads .jsonl directly
      const auto run = testing::run_app(app, arguments + input, 0, 20);
      EXPECT_EQ(run.exit_code, 1) << app << " " << arguments << input << ": " << run.output;
      EXPECT_EQ(line_starting(run.output, "error: "), "error: " + input + ": not a regular file (" + kind + ")") << app << " " << arguments;
    }
  fs::remove(fifo);
  fs::remove(fifo_jsonl);
  fs::remove(folder);
}

// The id of a process that has exited and been reaped.
long dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

// A killed enhanced-predict (or eval) leaves OUT.tmp.<pid>: the next run writing into that
// folder removes it, for every output.
TEST_F(Predict, StaleTemporariesOfEveryOutputAreRemoved) {
  const std::string dir = path("stale"), dead = std::to_string(dead_pid());
  fs::create_directories(dir);
  for (const std::string name : {"p.csv", "l.npy"}) test_util::write_text(dir + "/" + name + ".tmp." + dead, "left by kill -9");
  const auto run = predict("--data " + files_.test_ebin + " --out " + dir + "/p.csv --logits " + dir + "/l.npy");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(test_util::list_dir(dir), (std::vector<std::string>{"l.npy", "p.csv"}));
  fs::create_directories(path("stale-eval"));
  test_util::write_text(path("stale-eval") + "/e.csv.tmp." + dead, "left by kill -9");
  const auto eval = testing::run_app("enhanced-eval", "--device cpu --threads 2 --data " + files_.test_ebin +
                                                          " --checkpoint " + checkpoint() + " --predictions " +
                                                          path("stale-eval") + "/e.csv");
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_EQ(test_util::list_dir(path("stale-eval")), std::vector<std::string>{"e.csv"});
}

TEST_F(Predict, ProgressLineOnStderrUnlessQuiet) {
  const auto run = testing::run_app("enhanced-predict", "--device cpu --threads 2 --checkpoint " + checkpoint() +
                                                            " --data " + files_.test_ebin + " --out " + path("progress.csv"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("engine: cpu"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("predict: 24/24 samples  "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(" samples/s  ETA "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("24 samples in "), std::string::npos) << run.output;
}

TEST_F(Predict, NumPyReadsTheNpyFiles) {
  ASSERT_EQ(predict("--data " + files_.test_ebin + " --logits " + path("np.npy") + " --out " + path("np.csv")).exit_code, 0);
  const std::vector<float> z = npy_values(path("np.npy"), 24, 4);
  // The engine's own .npy reader (embedding tables) agrees...
  const EmbeddingTable table = load_embedding_table(path("np.npy"), {});
  EXPECT_EQ(table.rows, 24);
  EXPECT_EQ(table.dim, 4);
  EXPECT_EQ(table.values, z);
  // ...and so does NumPy, element for element.
  const std::string python = python_with_numpy();
  if (python.empty()) GTEST_SKIP() << "no Python with NumPy";
  std::ostringstream expected;
  expected.precision(9);
  for (float v : z) expected << v << "\n";
  write_text(path("np.expected"), expected.str());
  const std::string script = "import numpy as np; a = np.load('" + path("np.npy") + "'); e = np.loadtxt('" +
                             path("np.expected") + "', dtype=np.float32).reshape(24, 4); "
                             "assert a.dtype == np.dtype('<f4') and a.shape == (24, 4) and a.flags.c_contiguous, a; "
                             "assert (a == e).all(), abs(a - e).max(); print('numpy ok')";
  const std::string command = python + " -c \"" + script + "\" 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[512] = {};
  const size_t got = std::fread(buffer, 1, sizeof buffer - 1, pipe);
  EXPECT_EQ(::pclose(pipe), 0) << std::string(buffer, got);
  EXPECT_EQ(std::string(buffer, got), "numpy ok\n");
}

TEST(PredictApp, HelpAndVersion) {
  const auto help = testing::run_app("enhanced-predict", "--help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag : {"--checkpoint", "--data", "--out", "--top-k", "--logits", "--probabilities", "--device",
                           "--batch-size", "--threads", "--blend", "--pool", "--quiet"})
    EXPECT_NE(help.output.find(flag), std::string::npos) << flag << "\n" << help.output;
  const auto version = testing::run_app("enhanced-predict", "--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version.output.find(version_string()), std::string::npos) << version.output;
  const auto missing = testing::run_app("enhanced-predict", "--data x.ebin");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.output.rfind("error: --checkpoint is required", 0), 0u) << missing.output;
}

TEST(NpyHeader, IsNumPysVersionOneHeader) {
  const std::string h = npy_float32_header({24, 4});
  EXPECT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(static_cast<size_t>(static_cast<unsigned char>(h[8]) | static_cast<unsigned char>(h[9]) << 8), h.size() - 10);
  EXPECT_EQ(h.substr(10, 60), "{'descr': '<f4', 'fortran_order': False, 'shape': (24, 4), }");
  EXPECT_EQ(h.back(), '\n');
  EXPECT_EQ(h.find_first_not_of(' ', 70), h.size() - 1);
  const std::string one_dim = "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }";
  EXPECT_EQ(npy_float32_header({5}).substr(10, one_dim.size() + 1), one_dim + " ");
}

TEST_F(Predict, BadInputsAreOneLineAndLeaveNoFile) {
  const auto expect_error = [&](const std::string& args, const std::string& needle) {
    const auto run = predict(args + " --out " + path("bad.csv") + " --logits " + path("bad.npy"));
    EXPECT_EQ(run.exit_code, 1) << args;
    EXPECT_EQ(run.output.rfind("error: ", 0), 0u) << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
    EXPECT_NE(run.output.find(needle), std::string::npos) << "expected '" << needle << "' in " << run.output;
    EXPECT_FALSE(fs::exists(path("bad.csv")) || fs::exists(path("bad.npy"))) << args;
  };
  expect_error("--data " + files_.test_ebin + " --top-k 5", "--top-k 5 is more than " + checkpoint() + "'s 4 labels");
  expect_error("--data " + path("nope.ebin"), "nope.ebin: cannot open");
  expect_error("--data " + files_.test_ebin + " --pool time", "--pool time conflicts with " + checkpoint() +
                                                                   ", whose model has feature");
  expect_error("--data " + files_.test_ebin + " --blend scalar-mean", "--blend scalar-mean conflicts with ");
  expect_error("--data " + files_.test_ebin + " --blend max", "--blend: max not in {mean,scalar-mean}");
  write_text(path("short.jsonl"), lines_of(read_text(unlabeled_jsonl()))[0].substr(0, 40) + "\n");
  expect_error("--data " + path("short.jsonl"), "short.jsonl: line 1: ");
  std::string wrong_t = test_util::samples_jsonl(test_util::random_samples(2, 5, 1, 100), false);
  write_text(path("t5.jsonl"), wrong_t);
  expect_error("--data " + path("t5.jsonl"), path("t5.jsonl") + ": T = 5 but " + checkpoint() + " was trained with T = 16");
  const auto unknown = predict("--data " + files_.test_ebin + " --out " + path("bad.txt"));
  EXPECT_NE(unknown.output.find("error: " + path("bad.txt") + ": unknown prediction format"), std::string::npos)
      << unknown.output;
  EXPECT_FALSE(fs::exists(path("bad.txt")));
  const auto top0 = predict("--data " + files_.test_ebin + " --top-k 0");
  EXPECT_NE(top0.output.find("error: --top-k must be at least 1, got 0"), std::string::npos) << top0.output;
}

// Outputs that cannot be written as asked are one line before any work, and leave no file.
TEST_F(Predict, CollidingMisnamedOrHomelessOutputsAreRefusedBeforeAnyWork) {
  const auto expect_error = [&](const std::string& outputs, const std::string& needle) {
    const auto run = predict("--data " + files_.test_ebin + " " + outputs);
    EXPECT_EQ(run.exit_code, 1) << outputs;
    EXPECT_EQ(run.output, "error: " + needle + "\n") << outputs;
    for (const auto& entry : fs::directory_iterator(root_))
      EXPECT_EQ(entry.path().filename().string().find("same"), std::string::npos) << entry.path() << " left by " << outputs;
  };
  const std::string same = path("same.npy"), same_too = (root_ / "." / "same.npy").string();
  expect_error("--logits " + same + " --probabilities " + same, same + ": --logits and --probabilities name the same file");
  expect_error("--logits " + same + " --probabilities " + same_too,
               same_too + ": --logits and --probabilities name the same file");
  expect_error("--out " + path("same.csv") + " --logits " + path("same.csv"),
               path("same.csv") + ": --logits writes NumPy .npy: name the file *.npy");
  expect_error("--probabilities " + path("same.csv"), path("same.csv") + ": --probabilities writes NumPy .npy: name the file *.npy");
  fs::create_directories(root_ / "a-directory.csv");
  expect_error("--out " + path("a-directory.csv"), path("a-directory.csv") + ": cannot create: it is a directory");
  expect_error("--out " + path("same.csv") + " --logits same.npy --probabilities ./same.npy",
               "./same.npy: --logits and --probabilities name the same file");
  expect_error("--out " + path("nodir/same.csv"),
               path("nodir/same.csv") + ": cannot create: directory " + path("nodir") + " does not exist");
  expect_error("--out " + path("same.csv") + " --logits " + path("nodir/same.npy"),
               path("nodir/same.npy") + ": cannot create: directory " + path("nodir") + " does not exist");
}

// No output of predict or eval may write over an input, by any path to the same file: the very
// name, a symbolic link, a hard link (the same device and inode under another name). Each is
// one line before any work, and the input keeps its bytes.
TEST_F(Predict, OutputsThatNameAnInputByAnyPathAreRefusedAndTheInputKept) {
  const fs::path inputs = root_ / "inputs";
  fs::create_directories(inputs);
  const std::string data = (inputs / "test.ebin").string(), model = (inputs / "model.safetensors").string();
  fs::copy_file(files_.test_ebin, data, fs::copy_options::overwrite_existing);
  fs::copy_file(checkpoint(), model, fs::copy_options::overwrite_existing);
  const std::string data_bytes = testing::read_bytes(data), model_bytes = testing::read_bytes(model);
  std::error_code ignored;
  for (const char* name : {"model-link.csv", "model-hard.csv", "data-link.npy"}) fs::remove(inputs / name, ignored);
  fs::create_symlink(model, inputs / "model-link.csv");
  fs::create_hard_link(model, inputs / "model-hard.csv");
  fs::create_symlink(data, inputs / "data-link.npy");
  const std::string model_link = (inputs / "model-link.csv").string(), model_hard = (inputs / "model-hard.csv").string();
  const std::string data_link = (inputs / "data-link.npy").string(), model_npy = (inputs / "." / "model.safetensors").string();
  const auto expect_refused = [&](const std::string& app, const std::string& args, const std::string& message) {
    const auto run = testing::run_app(app, "--device cpu --threads 2 --data " + data + " --checkpoint " + model + " " + args);
    EXPECT_EQ(run.exit_code, 1) << app << " " << args << "\n" << run.output;
    EXPECT_EQ(run.output, "error: " + message + "\n") << app << " " << args;
    EXPECT_EQ(testing::read_bytes(data), data_bytes) << app << " " << args << " changed --data";
    EXPECT_EQ(testing::read_bytes(model), model_bytes) << app << " " << args << " changed --checkpoint";
  };
  expect_refused("enhanced-eval", "--predictions " + data, data + ": --predictions would overwrite --data (the same file)");
  expect_refused("enhanced-eval", "--predictions " + model,
                 model + ": --predictions would overwrite --checkpoint (the same file)");
  expect_refused("enhanced-eval", "--predictions " + model_link,
                 model_link + ": --predictions would overwrite --checkpoint (the same file)");
  expect_refused("enhanced-eval", "--predictions " + model_hard,
                 model_hard + ": --predictions would overwrite --checkpoint (the same file)");
  expect_refused("enhanced-predict", "--quiet --out " + model_hard,
                 model_hard + ": --out would overwrite --checkpoint (the same file)");
  expect_refused("enhanced-predict", "--quiet --out " + model_link,
                 model_link + ": --out would overwrite --checkpoint (the same file)");
  expect_refused("enhanced-predict", "--quiet --logits " + data_link,
                 data_link + ": --logits would overwrite --data (the same file)");
  expect_refused("enhanced-predict", "--quiet --probabilities " + model_npy + ".npy --logits " + model_npy + ".npy",
                 model_npy + ".npy: --logits and --probabilities name the same file");
}

// A set read from JSON Lines names a sample by its line (1-based), as the parser's errors do.
TEST_F(Predict, VocabularyErrorOfAJsonLinesSetNamesTheLine) {
  std::vector<test_util::RaggedSample> samples = test_util::random_samples(5, 16, 4, 100);
  samples[3].cur[7] = 500;
  write_text(path("big-id.jsonl"), test_util::samples_jsonl(samples, false));
  const auto run = predict("--data " + path("big-id.jsonl"));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.output, "error: " + path("big-id.jsonl") +
                            ": line 4: position 7: field 2 (cur_word) id 500 does not fit the vocabulary of 128\n");
  convert_jsonl_to_ebin(path("big-id.jsonl"), path("big-id.ebin"), 0);
  const auto ebin = predict("--data " + path("big-id.ebin"));
  EXPECT_NE(ebin.output.find(path("big-id.ebin") + ": sample 3: position 7: field 2 (cur_word) id 500"), std::string::npos)
      << ebin.output;
}

TEST_F(Predict, TrainingAndEvaluationRefuseAnUnlabeledSetNamingIt) {
  const auto eval = testing::run_app("enhanced-eval", "--device cpu --data " + unlabeled_ebin() + " --checkpoint " + checkpoint());
  EXPECT_EQ(eval.exit_code, 1);
  EXPECT_NE(eval.output.find("error: " + unlabeled_ebin() + ": unlabeled data (no labels), but --data needs labels; "
                             "enhanced-predict gives an unlabeled set's predictions"),
            std::string::npos)
      << eval.output;
  const std::string train = "--device cpu --quiet --hidden 4 --steps 1 --batch-size 8 --out " + path("unlabeled-run");
  const auto data = testing::run_app("enhanced-train", train + " --data " + unlabeled_ebin());
  EXPECT_EQ(data.exit_code, 1);
  EXPECT_NE(data.output.find("error: " + unlabeled_ebin() + ": unlabeled data (no labels), but --data (training) needs labels"),
            std::string::npos)
      << data.output;
  const auto valid = testing::run_app("enhanced-train", train + " --data " + files_.train_ebin + " --valid " + unlabeled_ebin());
  EXPECT_EQ(valid.exit_code, 1);
  EXPECT_NE(valid.output.find("error: " + unlabeled_ebin() + ": unlabeled data (no labels), but --valid (validation) needs labels"),
            std::string::npos)
      << valid.output;
  EXPECT_FALSE(fs::exists(path("unlabeled-run")));
}

}  // namespace
}  // namespace enhanced
