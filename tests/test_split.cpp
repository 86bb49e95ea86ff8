// enhanced-data split: the counts, the stratification, determinism, both formats (a JSON Lines
// split converts to exactly the .ebin split) and every bad input, with nothing left behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include "data_test_util.h"
#include "enhanced/atomic_file.h"
#include "enhanced/dataset.h"
#include "enhanced/jsonl.h"
#include "enhanced/split.h"

namespace enhanced {
namespace {

using namespace enhanced::test_util;

TEST(Split, LargestRemainderCountsSumExactly) {
  EXPECT_EQ(largest_remainder_counts(10, {0.8, 0.1, 0.1}), (std::vector<int64_t>{8, 1, 1}));
  EXPECT_EQ(largest_remainder_counts(7, {0.5, 0.5}), (std::vector<int64_t>{4, 3}));  // tie: the earlier part
  EXPECT_EQ(largest_remainder_counts(5, {1.0 / 3, 1.0 / 3, 1.0 / 3}), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(largest_remainder_counts(9, {0.8, 0.1, 0.1}), (std::vector<int64_t>{7, 1, 1}));  // 7.2, 0.9, 0.9
  EXPECT_EQ(largest_remainder_counts(1, {0.8, 0.1, 0.1}), (std::vector<int64_t>{1, 0, 0}));
  for (int64_t n = 0; n < 200; ++n) {
    const std::vector<int64_t> counts = largest_remainder_counts(n, {0.7, 0.2, 0.1});
    EXPECT_EQ(counts[0] + counts[1] + counts[2], n);
    const double exact[] = {0.7, 0.2, 0.1};
    for (size_t k = 0; k < 3; ++k) EXPECT_LT(std::abs(static_cast<double>(counts[k]) - static_cast<double>(n) * exact[k]), 1.0);
  }
}

TEST(Split, StratifiedDeterministicAndInFileOrder) {
  const std::string dir = scratch_dir();
  const auto samples = random_samples(300, 2, 11, 50, 5);
  write_text(dir + "/in.jsonl", samples_jsonl(samples));
  convert_jsonl_to_ebin(dir + "/in.jsonl", dir + "/in.ebin", 0);
  const Dataset ds = Dataset::open(dir + "/in.ebin");
  const std::vector<double> fractions = {0.6, 0.3, 0.1};
  const auto parts = split_samples(ds, fractions, 42);
  ASSERT_EQ(parts.size(), 3u);
  std::set<int64_t> seen;
  for (const auto& part : parts) {
    EXPECT_TRUE(std::is_sorted(part.begin(), part.end()));
    for (int64_t s : part) EXPECT_TRUE(seen.insert(s).second) << "sample " << s << " in two parts";
  }
  EXPECT_EQ(seen.size(), 300u);
  for (int label = 0; label < 5; ++label) {
    int64_t total = 0;
    std::vector<int64_t> in_part(3);
    for (size_t k = 0; k < 3; ++k)
      for (int64_t s : parts[k]) in_part[k] += ds.label(s) == label;
    for (int64_t c : in_part) total += c;
    EXPECT_EQ(in_part, largest_remainder_counts(total, fractions)) << "label " << label;
  }
  EXPECT_EQ(split_samples(ds, fractions, 42), parts);
  EXPECT_NE(split_samples(ds, fractions, 43), parts);
}

TEST(Split, EbinAndJsonlSplitsAgreeByteForByte) {
  const std::string dir = scratch_dir();
  const auto samples = random_samples(57, 3, 5, 300, 4);
  const std::string text = samples_jsonl(samples);
  write_text(dir + "/in.jsonl", text);
  convert_jsonl_to_ebin(dir + "/in.jsonl", dir + "/in.ebin", 0);
  const AppResult e = run_data_app("split '" + dir + "/in.ebin' '" + dir + "/e' --fractions 0.8,0.1,0.1 --seed 9", dir);
  ASSERT_EQ(e.status, 0) << e.err;
  const AppResult j = run_data_app("split '" + dir + "/in.jsonl' '" + dir + "/j' --fractions 0.8,0.1,0.1 --seed 9", dir);
  ASSERT_EQ(j.status, 0) << j.err;
  EXPECT_CONTAINS(j.err, "j-train.jsonl: ");
  const std::vector<std::string> input_lines = lines_of(text);
  int64_t total = 0;
  for (const char* name : {"train", "valid", "test"}) {
    const std::string jsonl = dir + "/j-" + name + ".jsonl", ebin = dir + "/e-" + name + ".ebin";
    // The JSON Lines part holds input lines as they are, in input order...
    const std::vector<std::string> lines = lines_of(read_text(jsonl));
    auto at = input_lines.begin();
    for (const std::string& line : lines) {
      at = std::find(at, input_lines.end(), line);
      ASSERT_NE(at, input_lines.end()) << name << ": a line not in the input, or out of order";
    }
    total += static_cast<int64_t>(lines.size());
    // ...and converts to the very bytes of the .ebin part.
    convert_jsonl_to_ebin(jsonl, dir + "/check.ebin", 0);
    EXPECT_EQ(read_text(dir + "/check.ebin"), read_text(ebin)) << name;
    EXPECT_EQ(Dataset::open(ebin).num_samples(), static_cast<int64_t>(lines.size()));
  }
  EXPECT_EQ(total, 57);
}

TEST(Split, UnlabeledTwoPartsAndNames) {
  const std::string dir = scratch_dir();
  write_text(dir + "/u.jsonl", samples_jsonl(random_samples(10, 2, 3), false));
  convert_jsonl_to_ebin(dir + "/u.jsonl", dir + "/u.ebin", 0);
  ASSERT_EQ(run_data_app("split '" + dir + "/u.ebin' '" + dir + "/p' --fractions 0.7,0.3", dir).status, 0);
  const Dataset train = Dataset::open(dir + "/p-train.ebin"), test = Dataset::open(dir + "/p-test.ebin");
  EXPECT_FALSE(train.has_labels());
  EXPECT_EQ(train.num_samples(), 7);
  EXPECT_EQ(test.num_samples(), 3);
  ASSERT_EQ(run_data_app("split '" + dir + "/u.ebin' '" + dir + "/q' --fractions 0.25,0.25,0.25,0.25", dir).status, 0);
  for (int k = 1; k <= 4; ++k) EXPECT_TRUE(std::filesystem::exists(dir + "/q-part" + std::to_string(k) + ".ebin"));
  const AppResult named = run_data_app("split '" + dir + "/u.jsonl' '" + dir + "/r' --fractions 0.5,0.5 --names a,b", dir);
  ASSERT_EQ(named.status, 0) << named.err;
  EXPECT_EQ(lines_of(read_text(dir + "/r-a.jsonl")).size() + lines_of(read_text(dir + "/r-b.jsonl")).size(), 10u);
}

TEST(Split, BadInputsLeaveNothing) {
  const std::string dir = scratch_dir();
  write_text(dir + "/in.jsonl", samples_jsonl(random_samples(5, 2, 3)));
  const auto expect_error = [&](const std::string& args, const std::string& needle) {
    expect_one_line_error(run_data_app("split '" + dir + "/in.jsonl' '" + dir + "/o' " + args, dir), needle);
    EXPECT_EQ(list_dir(dir), std::vector<std::string>{"in.jsonl"}) << args;
  };
  expect_error("--fractions 0.5,0.4", "--fractions must sum to 1, they sum to 0.9");
  expect_error("--fractions 1", "--fractions needs at least two parts, got 1");
  expect_error("--fractions 1.5,-0.5", "--fractions must be greater than 0, got -0.5");
  expect_error("--fractions 0.5,0.5 --names a", "--names gives 1 names for 2 fractions");
  expect_error("--fractions 0.5,0.5 --names a,a", "--names: 'a' is given twice");
  expect_error("--fractions 0.5,0.5 --names a,../b", "--names: '../b' is not a file-name part");
  expect_error("--fractions 0.9,0.05,0.05", "o-valid.jsonl: part 'valid' (fraction 0.05) would get no samples of ");
  expect_error("", "--fractions is required");
  write_text(dir + "/bad.jsonl", samples_jsonl(random_samples(2, 2, 3)) + "{\"label\": 1}\n");
  expect_one_line_error(run_data_app("split '" + dir + "/bad.jsonl' '" + dir + "/o' --fractions 0.5,0.5", dir),
                        "bad.jsonl: line 3: missing \"tokens\"");
  std::filesystem::remove(dir + "/bad.jsonl");
  EXPECT_EQ(list_dir(dir), std::vector<std::string>{"in.jsonl"});
  std::filesystem::rename(dir + "/in.jsonl", dir + "/x-train.jsonl");
  expect_one_line_error(run_data_app("split '" + dir + "/x-train.jsonl' '" + dir + "/x' --fractions 0.5,0.5", dir),
                        "x-train.jsonl: output would overwrite the input");
  EXPECT_EQ(list_dir(dir), std::vector<std::string>{"x-train.jsonl"});
  // A missing output folder: the user's path and the folder, not a temporary's name.
  expect_one_line_error(run_data_app("split '" + dir + "/x-train.jsonl' '" + dir + "/nodir/x' --fractions 0.5,0.5", dir),
                        "error: " + dir + "/nodir/x-train.jsonl: cannot create: directory " + dir + "/nodir does not exist");
  EXPECT_EQ(list_dir(dir), std::vector<std::string>{"x-train.jsonl"});
  // The temporary .ebin a JSON Lines split parses into cannot be written (here: a directory in its
  // place; a full disk in the field): the error names the user's first output, not split's own file.
  const std::string own = temp_name(dir + "/y-split.ebin");
  std::filesystem::create_directory(own);
  const SplitOptions halves{{0.5, 0.5}, {}, 0};
  const std::string message = error_of([&] { split_dataset(dir + "/x-train.jsonl", dir + "/y", halves); });
  EXPECT_EQ(message.rfind(dir + "/y-train.jsonl: rename failed (Is a directory)", 0), 0u) << message;
  EXPECT_NE(message.find("(writing the temporary .ebin that split parses " + dir + "/x-train.jsonl into"),
            std::string::npos) << message;
  EXPECT_EQ(message.find("y-split.ebin"), std::string::npos) << message;
  std::filesystem::remove(own);
  EXPECT_EQ(list_dir(dir), std::vector<std::string>{"x-train.jsonl"});
}

}  // namespace
}  // namespace enhanced
