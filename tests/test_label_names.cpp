// Labels by name (enhanced-train --label-names): the names round-trip through the checkpoints
// into enhanced-eval's tables, JSON and predictions CSV and enhanced-predict's top-k files; a
// resume keeps them and refuses others; every bad names file is one error line naming the file
// and the line, before any work.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app_runner.h"
#include "data_test_util.h"
#include "enhanced/label_names.h"
#include "enhanced/safetensors.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;
using test_util::line_starting;
using test_util::lines_of;
using test_util::read_text;
using test_util::write_text;

// The demo's four labels, named with what a CSV must quote and what is not ASCII.
const std::vector<std::string> kNames = {"admin", "devel, tools", "say \"hi\"", "Überraschung"};

class LabelNames : public test_util::SmallDemoSuite {
 protected:
  static void SetUpTestSuite() {
    SmallDemoSuite::SetUpTestSuite();
    std::string text;
    for (const std::string& name : kNames) text += name + "\n";
    write_text(path("names.txt"), text);
    test_util::drop_fuzz_seed("label_names", path("names.txt"));
    const auto run = train("--steps 10 --label-names " + path("names.txt") + " --out " + path("run"));
    ASSERT_EQ(run.exit_code, 0) << run.output;
  }

  static std::string path(const std::string& name) { return (root_ / name).string(); }
  static testing::AppResult train(const std::string& args) {
    return testing::run_app("enhanced-train", testing::small_train_flags(files_) + "--device cpu " + args);
  }
  static std::string checkpoint() { return path("run/last.safetensors"); }
  static testing::AppResult eval(const std::string& args) {
    return testing::run_app("enhanced-eval", "--device cpu --threads 2 --data " + files_.test_ebin + " " + args);
  }
  static testing::AppResult predict(const std::string& args) {
    return testing::run_app("enhanced-predict", "--device cpu --threads 2 --quiet --data " + files_.test_ebin + " " + args);
  }
};

TEST_F(LabelNames, AreInTheCheckpointsMetadataAsAJsonArray) {
  for (const char* file : {"run/last.safetensors", "run/best.safetensors"}) {
    const SafetensorsReader reader(path(file));
    ASSERT_TRUE(reader.metadata().count("label_names")) << file;
    EXPECT_EQ(nlohmann::json::parse(reader.metadata_value("label_names")), nlohmann::json(kNames)) << file;
    EXPECT_EQ(checkpoint_label_names(reader, 4), kNames) << file;
  }
}

TEST_F(LabelNames, EnhancedEvalShowsThemInItsTablesJsonAndPredictions) {
  const auto text = eval("--checkpoint " + checkpoint());
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find(" label name "), std::string::npos) << text.output;
  for (size_t l = 0; l < kNames.size(); ++l) {
    // One row in the per-label table and one in the confusion matrix start with "  l name".
    const std::string row = std::string(5, ' ') + std::to_string(l) + " " + kNames[l];
    size_t rows = 0;
    for (const std::string& line : lines_of(text.output)) rows += line.rfind(row, 0) == 0;
    EXPECT_EQ(rows, 2u) << row << "\n" << text.output;
  }
  const auto json = eval("--json --checkpoint " + checkpoint() + " --predictions " + path("eval.csv"));
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json report = nlohmann::json::parse(json.output);
  EXPECT_EQ(report["label_names"], nlohmann::json(kNames));
  for (size_t l = 0; l < kNames.size(); ++l) {
    EXPECT_EQ(report["labels"][l]["label"], l);
    EXPECT_EQ(report["labels"][l]["name"], kNames[l]);
  }
  const std::vector<std::string> rows = lines_of(read_text(path("eval.csv")));
  ASSERT_EQ(rows.size(), 25u);
  EXPECT_EQ(rows[0], "sample,label,predicted,probability,label_name,predicted_name");
  // The first four columns as without names; then the two names, quoted where CSV needs it.
  const std::vector<std::string> csv = {"admin", "\"devel, tools\"", "\"say \"\"hi\"\"\"", "Überraschung"};
  for (size_t i = 1; i < rows.size(); ++i) {
    std::istringstream in(rows[i]);
    std::string sample, label, predicted;
    std::getline(in, sample, ',');
    std::getline(in, label, ',');
    std::getline(in, predicted, ',');
    EXPECT_NE(rows[i].find("," + csv[std::stoul(label)] + "," + csv[std::stoul(predicted)]), std::string::npos) << rows[i];
    EXPECT_EQ(rows[i].substr(rows[i].size() - csv[std::stoul(predicted)].size()), csv[std::stoul(predicted)]) << rows[i];
  }
}

TEST_F(LabelNames, EnhancedPredictNamesTheTopLabelsInCsvAndJsonLines) {
  ASSERT_EQ(predict("--checkpoint " + checkpoint() + " --top-k 2 --out " + path("p.csv")).exit_code, 0);
  const std::vector<std::string> rows = lines_of(read_text(path("p.csv")));
  ASSERT_EQ(rows.size(), 25u);
  EXPECT_EQ(rows[0], "sample,label_1,probability_1,label_2,probability_2,name_1,name_2");
  const auto jsonl = predict("--checkpoint " + checkpoint() + " --top-k 2 --out " + path("p.jsonl"));
  ASSERT_EQ(jsonl.exit_code, 0) << jsonl.output;
  const std::vector<std::string> lines = lines_of(read_text(path("p.jsonl")));
  ASSERT_EQ(lines.size(), 24u);
  for (const std::string& line : lines) {
    const nlohmann::json j = nlohmann::json::parse(line);
    ASSERT_EQ(j["names"].size(), 2u) << line;
    for (size_t k = 0; k < 2; ++k) EXPECT_EQ(j["names"][k], kNames[j["labels"][k].get<size_t>()]) << line;
  }
}

TEST_F(LabelNames, ACheckpointWithoutNamesShowsNone) {
  ASSERT_EQ(train("--steps 2 --out " + path("plain")).exit_code, 0);
  const std::string plain = path("plain/last.safetensors");
  EXPECT_FALSE(SafetensorsReader(plain).metadata().count("label_names"));
  const auto json = eval("--json --checkpoint " + plain + " --predictions " + path("plain.csv"));
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json report = nlohmann::json::parse(json.output);
  EXPECT_FALSE(report.contains("label_names"));
  EXPECT_FALSE(report["labels"][0].contains("name"));
  EXPECT_EQ(lines_of(read_text(path("plain.csv")))[0], "sample,label,predicted,probability");
  const auto text = eval("--checkpoint " + plain);
  EXPECT_NE(text.output.find(" label   support precision"), std::string::npos) << text.output;
  ASSERT_EQ(predict("--checkpoint " + plain + " --top-k 2 --out " + path("plain-p.csv")).exit_code, 0);
  EXPECT_EQ(lines_of(read_text(path("plain-p.csv")))[0], "sample,label_1,probability_1,label_2,probability_2");
}

TEST_F(LabelNames, AResumeKeepsThemAndRefusesOthers) {
  const std::string flags = "--steps 4 --checkpoint-every 2 --out " + path("resumed");
  ASSERT_EQ(train(flags + " --label-names " + path("names.txt")).exit_code, 0);
  const auto resumed = testing::run_app("enhanced-train", "--resume --steps 6 --quiet --device cpu --out " + path("resumed"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(checkpoint_label_names(SafetensorsReader(path("resumed/last.safetensors")), 4), kNames);
  write_text(path("other.txt"), "a\nb\nc\nd\n");
  for (const std::string& given : {path("other.txt")}) {
    const auto other = testing::run_app("enhanced-train", "--resume --steps 8 --quiet --device cpu --label-names " +
                                                              given + " --out " + path("resumed"));
    EXPECT_EQ(other.exit_code, 1);
    EXPECT_NE(line_starting(other.output, "error: ").find("--label-names [\"a\",\"b\",\"c\",\"d\"] conflicts with the run "
                                                          "being resumed"), std::string::npos) << other.output;
  }
  // A run without names cannot gain them on resume either.
  ASSERT_EQ(train("--steps 2 --out " + path("nameless")).exit_code, 0);
  const auto added = testing::run_app("enhanced-train", "--resume --steps 4 --quiet --device cpu --label-names " +
                                                            path("names.txt") + " --out " + path("nameless"));
  EXPECT_EQ(added.exit_code, 1);
  EXPECT_NE(line_starting(added.output, "error: ").find("conflicts with the run being resumed, which has label_names = []"),
            std::string::npos) << added.output;
  // The same names again are no change.
  const auto same = testing::run_app("enhanced-train", "--resume --steps 8 --quiet --device cpu --label-names " +
                                                           path("names.txt") + " --out " + path("resumed"));
  EXPECT_EQ(same.exit_code, 0) << same.output;
}

TEST_F(LabelNames, EveryBadFileIsOneErrorNamingTheFileAndLineBeforeAnyWork) {
  const std::string file = path("bad.txt");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a\nb\nc\n", file + ": 3 label names, but the model has 4 labels (one name a line, a line for each label)"},
      {"a\nb\nc\nd\ne\n", file + ": 5 label names, but the model has 4 labels (one name a line, a line for each label)"},
      {"a\n\nc\nd\n", file + ": line 2: an empty name (every label needs one)"},
      {"a\nb\na\nd\n", file + ": line 3: 'a' is a duplicate (each label needs its own name)"},
      {"a\nb\xff\nc\nd\n", file + ": line 2: not UTF-8 (byte 2 of the name)"},
      {"a\nb\nc\xc0\xaf\nd\n", file + ": line 3: not UTF-8 (byte 2 of the name)"},  // an overlong '/'
      {"a\nb\tc\nc\nd\n", file + ": line 2: a control character (byte 2 of the name)"},
      {"", file + ": no label names (one name a line, a line for each label)"},
  };
  int written = 0;
  for (const auto& [text, expected] : cases) {
    write_text(file, text);
    test_util::drop_fuzz_seed("label_names", file, cat(".", ++written));
    const auto run = train("--steps 2 --label-names " + file + " --out " + path("bad-run"));
    EXPECT_EQ(run.exit_code, 1) << expected;
    EXPECT_EQ(line_starting(run.output, "error: "), "error: " + expected) << run.output;
    EXPECT_FALSE(fs::exists(path("bad-run"))) << expected;  // nothing written
  }
  const auto missing = train("--steps 2 --label-names " + path("missing.txt") + " --out " + path("bad-run"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(line_starting(missing.output, "error: "), "error: " + path("missing.txt") + ": cannot open: No such file or directory")
      << missing.output;
  EXPECT_FALSE(fs::exists(path("bad-run")));
  // A Windows file (CRLF, a byte-order mark) is read as its names.
  write_text(file, "\xEF\xBB\xBF" "a\r\nb\r\nc\r\nd\r\n");
  test_util::drop_fuzz_seed("label_names", file, ".crlf");
  ASSERT_EQ(train("--steps 2 --label-names " + file + " --out " + path("crlf")).exit_code, 0);
  EXPECT_EQ(checkpoint_label_names(SafetensorsReader(path("crlf/last.safetensors")), 4),
            (std::vector<std::string>{"a", "b", "c", "d"}));
}

}  // namespace
}  // namespace enhanced
