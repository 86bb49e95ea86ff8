// The enhanced-data app: conversions, inspect, and one test per kind of bad input, checking the
// exit status, the one-line message (file, line, position, field) and that no output is left.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstddef>
#include <cstring>
#include <filesystem>

#include "app_runner.h"
#include "data_test_util.h"
#include "enhanced/engine.h"
#include "enhanced/common.h"
#include "enhanced/dataset.h"
#include "enhanced/jsonl.h"
#include "enhanced/text.h"

namespace enhanced {
namespace {

using namespace enhanced::test_util;

// T = 4 positions.
const std::string kGood = R"({"label":1,"tokens":[[[1,2],[],[3]],[[],[4],[5]],[[6],[],[7]],[[8,9,10],[],[11]]]})";

// Converts `lines` (joined with '\n' plus a final '\n') and expects the error `needle`, with no
// output or temporary file left beside the input.
void expect_convert_error(const std::vector<std::string>& lines, const std::string& needle, bool final_newline = true) {
  const std::string dir = scratch_dir();
  std::string text;
  for (size_t i = 0; i < lines.size(); ++i) {
    text += lines[i];
    if (i + 1 < lines.size() || final_newline) text += "\n";
  }
  write_text(dir + "/in.jsonl", text);
  drop_fuzz_seed("jsonl", dir + "/in.jsonl");
  AppResult r = run_data_app("convert '" + dir + "/in.jsonl' '" + dir + "/out.ebin' --seq-len 4", dir);
  expect_one_line_error(r, needle);
  EXPECT_EQ(list_dir(dir), std::vector<std::string>{"in.jsonl"}) << "output left behind";
}

TEST(DataCli, HelpAndVersion) {
  const std::string dir = scratch_dir();
  AppResult help = run_data_app("--help", dir);
  EXPECT_EQ(help.status, 0);
  for (const char* sub : {"convert", "split", "inspect", "demo"}) EXPECT_NE(help.out.find(sub), std::string::npos) << help.out;
  AppResult version = run_data_app("--version", dir);
  EXPECT_EQ(version.status, 0);
  EXPECT_NE(version.out.find(version_string()), std::string::npos) << version.out;
  expect_one_line_error(run_data_app("", dir), "subcommand");
  expect_one_line_error(run_data_app("convert a.jsonl", dir), "OUT is required");
  expect_one_line_error(run_data_app("convert a.jsonl b.ebin --seq-len 0", dir), "--seq-len");
}

TEST(DataCli, ConvertBothWaysAndInspect) {
  const std::string dir = scratch_dir();
  auto samples = random_samples(30, 4, 123, 700, 5);
  samples[0].identifier.assign(4, {});  // some empty identifiers for the histogram
  const std::string text = samples_jsonl(samples);
  write_text(dir + "/a.jsonl", text);
  AppResult r = run_data_app("convert '" + dir + "/a.jsonl' '" + dir + "/a.ebin' --seq-len 4", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  r = run_data_app("convert '" + dir + "/a.ebin' '" + dir + "/b.jsonl'", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_text(dir + "/b.jsonl"), text);
  r = run_data_app("convert --to-jsonl '" + dir + "/a.ebin' '" + dir + "/c.txt'", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_text(dir + "/c.txt"), text);

  r = run_data_app("inspect '" + dir + "/a.ebin'", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  Dataset ds = Dataset::open(dir + "/a.ebin");
  for (std::string needle : {std::string("samples:            30"), std::string("positions (T):      4"),
                             cat("labels:             ", ds.num_labels()), cat("largest id:         ", ds.max_token_id()),
                             cat("file size:          ", ds.file_size(), " bytes"), std::string("label histogram"),
                             std::string("identifier length histogram"), std::string("empty")})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << "\n" << r.out;

  // Without a trailing newline the last line still counts.
  std::string no_final = text.substr(0, text.size() - 1);
  write_text(dir + "/d.jsonl", no_final);
  r = run_data_app("convert '" + dir + "/d.jsonl' '" + dir + "/d.ebin' -T 4", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_text(dir + "/d.ebin"), read_text(dir + "/a.ebin"));
  // Windows line ends are accepted.
  std::string crlf;
  for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  write_text(dir + "/e.jsonl", crlf);
  r = run_data_app("convert '" + dir + "/e.jsonl' '" + dir + "/e.ebin' -T 4", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_text(dir + "/e.ebin"), read_text(dir + "/a.ebin"));
}

TEST(DataCli, ConvertTakesSeqLenFromTheFirstSample) {
  const std::string dir = scratch_dir();
  write_text(dir + "/a.jsonl", samples_jsonl(random_samples(2, 7, 1)));
  AppResult r = run_data_app("convert '" + dir + "/a.jsonl' '" + dir + "/a.ebin'", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(Dataset::open(dir + "/a.ebin").seq_len(), 7);
  EXPECT_CONTAINS(r.err, "a.ebin: 2 samples of 7 positions");
  write_text(dir + "/b.jsonl", samples_jsonl(random_samples(1, 7, 1)) + samples_jsonl(random_samples(1, 9, 2)));
  expect_one_line_error(run_data_app("convert '" + dir + "/b.jsonl' '" + dir + "/b.ebin'", dir),
                        "b.jsonl: line 2: expected 7 positions (T of line 1), got 9");
  EXPECT_FALSE(std::filesystem::exists(dir + "/b.ebin"));
}

TEST(DataCli, UnlabeledConvertInspectAndBack) {
  const std::string dir = scratch_dir();
  const std::string text = samples_jsonl(random_samples(6, 3, 4), false);
  write_text(dir + "/u.jsonl", text);
  AppResult r = run_data_app("convert '" + dir + "/u.jsonl' '" + dir + "/u.ebin'", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.err, "u.ebin: 6 unlabeled samples of 3 positions");
  r = run_data_app("inspect '" + dir + "/u.ebin'", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "labels:             none (unlabeled");
  EXPECT_EQ(r.out.find("label histogram"), std::string::npos) << r.out;
  r = run_data_app("convert '" + dir + "/u.ebin' '" + dir + "/back.jsonl'", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_text(dir + "/back.jsonl"), text);
}

TEST(DataCli, AMissingInputIsOneErrorAndWritesNothing) {
  const std::string dir = scratch_dir();
  AppResult r = run_data_app("convert '" + dir + "/nope.jsonl' '" + dir + "/out.ebin'", dir);
  expect_one_line_error(r, "nope.jsonl: cannot open");
  EXPECT_TRUE(list_dir(dir).empty());
}

// ---- bad JSONL: one test per kind ----------------------------------------------------------

TEST(DataCliJsonl, MalformedJsonIsRefusedAtItsLineAndColumn) {
  expect_convert_error({kGood, kGood, R"({"label":1,"tokens":[[[1],[],[2]] [[1],[],[2]]]})"},
                       "in.jsonl: line 3: column 35: malformed JSON: ");
}

TEST(DataCliJsonl, AMissingLabelIsRefusedNamingTheLine) {
  expect_convert_error({kGood, R"({"tokens":[[[1],[],[2]],[[1],[],[2]],[[1],[],[2]],[[1],[],[2]]]})"},
                       "in.jsonl: line 2: missing \"label\"");
}

TEST(DataCliJsonl, ALabelThatIsNoIntegerIsRefusedWithWhatItHolds) {
  expect_convert_error({kGood, R"({"label":1.5,"tokens":[]})"},
                       "in.jsonl: line 2: \"label\" holds a non-integer number, expected an integer");
  expect_convert_error({R"({"label":"2","tokens":[]})"}, "in.jsonl: line 1: \"label\" holds string");
}

TEST(DataCliJsonl, ANegativeLabelIsRefusedWithItsValue) {
  expect_convert_error({kGood, kGood, kGood, R"({"label":-2,"tokens":[]})"}, "in.jsonl: line 4: negative label -2");
}

TEST(DataCliJsonl, ALabelBeyondInt32IsRefused) {
  expect_convert_error({R"({"label":4294967296,"tokens":[]})"}, "in.jsonl: line 1: label 4294967296 does not fit int32");
}

TEST(DataCliJsonl, TheLargestInt32LabelIsRefusedSinceTheLabelCountWouldNotFit) {
  expect_convert_error({R"({"label":2147483647,"tokens":[]})"}, "in.jsonl: line 1: label 2147483647 does not fit int32");
}

TEST(DataCliJsonl, AnOutputThatIsTheInputUnderAnotherNameIsRefusedAndTheInputKept) {
  const std::string dir = scratch_dir();
  write_text(dir + "/in.jsonl", std::string(kGood) + "\n");
  AppResult r = run_data_app("convert '" + dir + "/in.jsonl' '" + dir + "/./in.jsonl' --seq-len 4", dir);
  expect_one_line_error(r, "output would overwrite the input");
  EXPECT_EQ(read_text(dir + "/in.jsonl"), std::string(kGood) + "\n");
}

TEST(DataCliJsonl, ALineThatIsNoObjectIsRefusedWithWhatItIs) {
  expect_convert_error({kGood, "[1,2]"}, "in.jsonl: line 2: expected a JSON object, got array");
}

TEST(DataCliJsonl, TokensMissingOrNotAListAreRefused) {
  expect_convert_error({kGood, R"({"label":1,"tokens":{"a":1}})"},
                       "in.jsonl: line 2: \"tokens\" holds object, expected a list of positions");
  expect_convert_error({R"({"label":1})"}, "in.jsonl: line 1: missing \"tokens\"");
}

TEST(DataCliJsonl, APositionCountOtherThanTIsRefusedWithBoth) {
  expect_convert_error({kGood, R"({"label":1,"tokens":[[[1],[],[2]],[[1],[],[2]],[[1],[],[2]]]})"},
                       "in.jsonl: line 2: expected 4 positions (--seq-len), got 3");
}

TEST(DataCliJsonl, APositionWithoutThreeListsIsRefusedNamingPositionAndField) {
  expect_convert_error({R"({"label":1,"tokens":[[[1],[],[2]],[[1],[],[2]],[[1],[2]],[[1],[],[2]]]})"},
                       "in.jsonl: line 1: position 2: expected exactly 3 lists, got 2 elements");
  expect_convert_error({R"({"label":1,"tokens":[[[1],[],[2]],[[1],[],[2]],[[1],[],[2]],[[1],[],[2],[]]]})"},
                       "in.jsonl: line 1: position 3: expected exactly 3 lists, got 4 elements");
  expect_convert_error({R"({"label":1,"tokens":[7,[[1],[],[2]],[[1],[],[2]],[[1],[],[2]]]})"},
                       "in.jsonl: line 1: position 0: expected exactly 3 lists, got number");
  expect_convert_error({R"({"label":1,"tokens":[[[1],[],[2]],[[1],5,[2]],[[1],[],[2]],[[1],[],[2]]]})"},
                       "in.jsonl: line 1: position 1: field 1 (auxiliary) holds number, expected a list");
}

TEST(DataCliJsonl, CurWordMustHoldExactlyOneId) {
  expect_convert_error({kGood, R"({"label":1,"tokens":[[[1],[],[2]],[[1],[],[2,3]],[[1],[],[2]],[[1],[],[2]]]})"},
                       "in.jsonl: line 2: position 1: field 2 (cur_word) must hold exactly one id, got 2");
  expect_convert_error({R"({"label":1,"tokens":[[[1],[],[2]],[[1],[],[2]],[[1],[],[2]],[[1],[],[]]]})"},
                       "in.jsonl: line 1: position 3: field 2 (cur_word) must hold exactly one id, got 0");
}

TEST(DataCliJsonl, ANegativeIdIsRefusedNamingPositionAndField) {
  expect_convert_error({kGood, kGood, R"({"label":1,"tokens":[[[1],[],[2]],[[1],[],[2]],[[1],[],[2]],[[1,-5],[],[2]]]})"},
                       "in.jsonl: line 3: position 3: field 0 (identifier) has negative id -5");
  expect_convert_error({R"({"label":1,"tokens":[[[1],[],[-1]],[[1],[],[2]],[[1],[],[2]],[[1],[],[2]]]})"},
                       "in.jsonl: line 1: position 0: field 2 (cur_word) has negative id -1");
}

TEST(DataCliJsonl, AnIdBeyondInt32IsRefusedAndTheLargestInt32Converts) {
  expect_convert_error({R"({"label":1,"tokens":[[[1],[],[2]],[[1],[2147483648],[2]],[[1],[],[2]],[[1],[],[2]]]})"},
                       "in.jsonl: line 1: position 1: field 1 (auxiliary) id 2147483648 does not fit int32");
  // The largest int32 is fine.
  const std::string dir = scratch_dir();
  write_text(dir + "/in.jsonl", R"({"label":0,"tokens":[[[2147483647],[],[2]]]})" "\n");
  AppResult r = run_data_app("convert '" + dir + "/in.jsonl' '" + dir + "/out.ebin' -T 1", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(Dataset::open(dir + "/out.ebin").max_token_id(), 2147483647);
}

TEST(DataCliJsonl, AnIdThatIsNoIntegerIsRefusedNamingPositionAndField) {
  expect_convert_error({R"({"label":1,"tokens":[[[1],[],[2]],[[1.0],[],[2]],[[1],[],[2]],[[1],[],[2]]]})"},
                       "in.jsonl: line 1: position 1: field 0 (identifier) holds a non-integer number, expected an integer id");
  expect_convert_error({R"({"label":1,"tokens":[[[1],[],[2]],[[1],[],[2]],[[1],[],["w"]],[[1],[],[2]]]})"},
                       "in.jsonl: line 1: position 2: field 2 (cur_word) holds string, expected an integer id");
}

// The error line quotes what the parser read: a byte that is no UTF-8, or a control character
// (here ESC, of a terminal's colour sequence, in a key), is shown as \xNN, never as itself.
TEST(DataCliJsonl, BytesOfTheLineThatAreNoTextAreQuotedEscaped) {
  expect_convert_error({kGood, "\xff\xfe"}, "in.jsonl: line 2: column 1: malformed JSON: syntax error while parsing "
                                             "value - invalid literal; last read: '\\xff'");
  expect_convert_error({R"({"label":1,"x":")" "\xc3\x28" R"("})"}, "ill-formed UTF-8 byte; last read: '\"\\xc3('");
  expect_convert_error({R"({"label":1,"\u001b[31m":1e999})"},
                       "in.jsonl: line 1: column 29: \"\\x1b[31m\": number does not fit a double");
}

TEST(Excerpt, KeepsTextEscapesTheRestAndCutsAtACharacter) {
  EXPECT_EQ(excerpt("caf\xc3\xa9 ok"), "caf\xc3\xa9 ok");
  EXPECT_EQ(excerpt("a\xff\tb\x7f"), "a\\xff\\x09b\\x7f");
  EXPECT_EQ(excerpt("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate is no UTF-8
  EXPECT_EQ(excerpt("ab\xc3\xa9", 3), "ab...");                // never half a character
  EXPECT_EQ(excerpt(std::string(70, 'x')), std::string(60, 'x') + "...");
}

TEST(DataCliJsonl, ANumberBeyondADoubleIsRefusedAtItsColumn) {
  expect_convert_error({kGood, R"({"label":1,"tokens":[[[1],[],[2]],[[1],[],[2]],[[1],[],[1e999]],[[1],[],[2]]]})"},
                       "in.jsonl: line 2: column 61: position 2: field 2 (cur_word): number does not fit a double");
  expect_convert_error({R"({"label":-1e400,"tokens":[]})"}, "in.jsonl: line 1: column 15: \"label\": number does not fit a double");
  expect_convert_error({R"([1, 2e999])"}, "in.jsonl: line 1: column 9: the line: number does not fit a double");
}

TEST(DataCliJsonl, ABlankLineIsRefusedButOneFinalNewlineIsNot) {
  expect_convert_error({kGood, kGood, "", kGood}, "in.jsonl: line 3: blank line");
  expect_convert_error({kGood, "   ", kGood}, "in.jsonl: line 2: blank line");
  // One trailing empty line (the final newline) is fine, a second one is a blank line.
  expect_convert_error({kGood, kGood, ""}, "in.jsonl: line 3: blank line");
}

TEST(DataCliJsonl, AFileWithoutSamplesIsRefused) {
  expect_convert_error({}, "in.jsonl: no samples", false);
}

// ---- bad .ebin through the app -------------------------------------------------------------

class DataCliEbin : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir();
    write_text(dir_ + "/in.jsonl", samples_jsonl(random_samples(3, 4, 17)));
    convert_jsonl_to_ebin(dir_ + "/in.jsonl", dir_ + "/d.ebin", 4);
    std::filesystem::remove(dir_ + "/in.jsonl");
    bytes_ = read_text(dir_ + "/d.ebin");
    std::memcpy(&header_, bytes_.data(), sizeof(header_));
  }
  template <class T>
  void set(size_t offset, T value) {
    std::memcpy(bytes_.data() + offset, &value, sizeof(T));
  }
  // inspect and convert both fail with `needle`; the conversion leaves nothing behind.
  void expect_error(const std::string& needle) {
    write_text(dir_ + "/d.ebin", bytes_);
    drop_fuzz_seed("ebin", dir_ + "/d.ebin");
    expect_one_line_error(run_data_app("inspect '" + dir_ + "/d.ebin'", dir_), needle);
    expect_one_line_error(run_data_app("convert '" + dir_ + "/d.ebin' '" + dir_ + "/out.jsonl'", dir_), needle);
    EXPECT_EQ(list_dir(dir_), std::vector<std::string>{"d.ebin"});
  }
  std::string dir_, bytes_;
  DatasetHeader header_{};
};

TEST_F(DataCliEbin, AWrongMagicIsRefusedByInspectAndConvert) {
  bytes_[3] = 'Z';
  expect_error("d.ebin: bad magic");
}

TEST_F(DataCliEbin, AnUnknownVersionIsRefusedNamingIt) {
  set<uint32_t>(offsetof(DatasetHeader, version), 2);
  expect_error("d.ebin: unsupported version 2");
}

TEST_F(DataCliEbin, ATruncatedFileIsRefusedWithBothSizes) {
  const size_t full = bytes_.size();
  bytes_.resize(full / 2);
  expect_error(cat("d.ebin: truncated: header says ", full, " bytes, file has ", full / 2));
}

TEST_F(DataCliEbin, AHeaderSizeOtherThanTheFilesIsRefusedWithBoth) {
  set<uint64_t>(offsetof(DatasetHeader, file_size), header_.file_size - 8);
  expect_error(cat("d.ebin: size mismatch: header says ", header_.file_size - 8, " bytes, file has ", header_.file_size));
}

TEST_F(DataCliEbin, OffsetsOutOfRangeAreRefusedNamingSamplePositionAndField) {
  // Position p = 6 (sample 1, t = 2): its start offset runs backwards.
  set<uint64_t>(header_.auxiliary_offsets_offset + 8 * 7, uint64_t{1} << 40);
  expect_error("d.ebin: sample 1: position 2: field 1 (auxiliary) offsets out of range");
}

TEST_F(DataCliEbin, ASectionPastTheFileIsRefusedNamingIt) {
  set<uint64_t>(offsetof(DatasetHeader, cur_word_offset), header_.file_size - 8);
  expect_error("d.ebin: section cur_word");
}

TEST_F(DataCliEbin, AnEmptyFileIsRefused) {
  bytes_.clear();
  expect_error("d.ebin: empty file");
}

// ---- inputs that are not regular files, and lines longer than a sample can be --------------

// A FIFO used to block convert, inspect and split forever; a directory said "cannot mmap: No
// such device" or "read failed after line 0"; /dev/zero grew without bound. Each is refused at
// once, by the one input rule.
TEST(DataCliInputs, FifoDirectoryAndDeviceAreRefusedByName) {
  const std::string dir = scratch_dir();
  const std::vector<std::pair<std::string, std::string>> inputs = {{dir + "/fifo.jsonl", "a FIFO"}, {dir + "/fifo.ebin", "a FIFO"},
                                                             {dir + "/dir.jsonl", "a directory"}, {dir + "/dir.ebin", "a directory"},
                                                             {"/dev/zero", "a character device"}};
  for (const auto& [path, kind] : inputs) {
    if (kind == "a FIFO") {
      ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
    }
    if (kind == "a directory") std::filesystem::create_directory(path);
    const std::string out = dir + (path.ends_with(".ebin") ? "/out.jsonl" : "/out.ebin");
    for (const std::string& command : {"convert " + path + " " + out, "inspect " + path,
                                       "split " + path + " " + dir + "/part --fractions 0.5,0.5"}) {
      const auto r = testing::run_app("enhanced-data", command, 0, 20);
      EXPECT_EQ(r.exit_code, 1) << command << ": " << r.output;
      EXPECT_EQ(line_starting(r.output, "error: "), "error: " + path + ": not a regular file (" + kind + ")") << command;
    }
  }
  EXPECT_EQ(list_dir(dir), (std::vector<std::string>{"dir.ebin", "dir.jsonl", "fifo.ebin", "fifo.jsonl"}));
}

// The longest line a sample can be, with json.dumps' spacing: both lists of every position full
// of 10-digit ids. T = 2 of them convert, so the bound is no tighter than the format.
std::string longest_line(int seq_len) {
  std::string full = "[2147483647";
  for (int k = 1; k < kMaxIdsPerList; ++k) full += ", 2147483647";
  full += "]";
  std::string line = "{\"label\": 2147483646, \"tokens\": [";
  for (int t = 0; t < seq_len; ++t) line += (t ? ", [" : "[") + full + ", " + full + ", [2147483647]]";
  return line + "]}";
}

TEST(DataCliInputs, TheLongestSampleConvertsAndAFullerListIsRefused) {
  const std::string dir = scratch_dir();
  const std::string line = longest_line(2);
  EXPECT_LE(line.size(), jsonl_line_limit(2));
  EXPECT_GT(line.size() + 64, jsonl_line_limit(2)) << "the bound is far above the longest sample";
  write_text(dir + "/full.jsonl", line + "\r\n" + line + "\n");
  AppResult r = run_data_app("convert '" + dir + "/full.jsonl' '" + dir + "/full.ebin' --seq-len 2", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  std::string over = R"({"label":1,"tokens":[[[1],[],[3]],[[],[)";
  for (int k = 0; k <= kMaxIdsPerList; ++k) over += k ? ",4" : "4";
  expect_convert_error({kGood, over + "],[5]],[[6],[],[7]],[[8],[],[11]]]}"},
                       "in.jsonl: line 2: position 1: field 1 (auxiliary) holds 4097 ids, more than the 4096 a list may hold");
}

// A file of zeros with no newline (sparse: no disk) used to be read whole into one line: 688 MB
// for 300 MB. The line is refused at the bound, under an address-space limit it could not pass.
TEST(DataCliInputs, ALineLongerThanASampleCanBeIsRefusedInBoundedMemory) {
  const std::string dir = scratch_dir(), zeros = dir + "/zeros.jsonl", after = dir + "/after.jsonl";
  write_text(zeros, "");
  std::filesystem::resize_file(zeros, uint64_t{1} << 30);
  write_text(after, kGood + "\n");
  std::filesystem::resize_file(after, uint64_t{1} << 30);
  const int limit_mib = 1536;  // a CUDA build maps ~850 MiB before main
  const auto expect_refused = [&](const std::string& arguments, const std::string& line) {
    const auto r = testing::run_app("enhanced-data", arguments + " " + dir + "/out.ebin", limit_mib);
    EXPECT_EQ(r.exit_code, 1) << arguments << ": " << r.output;
    EXPECT_EQ(line_starting(r.output, "error: "), line) << arguments;
  };
  expect_refused("convert " + zeros, "error: " + zeros + ": line 1 is longer than 67108864 bytes (the longest first "
                                     "line read before T is known; give --seq-len T for longer samples)");
  expect_refused("convert --seq-len 400 " + zeros, cat("error: ", zeros, ": line 1 is longer than ", jsonl_line_limit(400),
                                                       " bytes (the longest line a sample of T=400 can be)"));
  expect_refused("convert " + after, cat("error: ", after, ": line 2 is longer than ", jsonl_line_limit(4),
                                         " bytes (the longest line a sample of T=4 can be)"));
  EXPECT_EQ(list_dir(dir), (std::vector<std::string>{"after.jsonl", "zeros.jsonl"}));
}

}  // namespace
}  // namespace enhanced
