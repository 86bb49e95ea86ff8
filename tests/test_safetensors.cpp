// Safetensors and checkpoint input hardening: every malformed header or metadata is one clear
// error naming the file and the tensor or key, found before anything is allocated for it.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app_runner.h"
#include "data_test_util.h"
#include "enhanced/checkpoint.h"
#include "enhanced/model.h"
#include "enhanced/safetensors.h"

namespace enhanced {
namespace {

using namespace enhanced::test_util;

// A safetensors file from a header written by hand and `data_bytes` zero bytes of data.
std::string write_raw_safetensors(const std::string& path, const std::string& header, size_t data_bytes) {
  const uint64_t size = header.size();
  std::string bytes(reinterpret_cast<const char*>(&size), 8);
  bytes += header;
  bytes += std::string(data_bytes, '\0');
  write_text(path, bytes);
  drop_fuzz_seed("safetensors", path);
  return path;
}

// A writer holding every tensor and metadata entry of `source` but `left_out`, to be edited.
SafetensorsWriter copy_of(const SafetensorsReader& source, const std::string& left_out = "") {
  SafetensorsWriter writer;
  for (const auto& [name, tensor] : source.tensors()) {
    if (name == left_out) continue;
    if (tensor.dtype == "F32") writer.add(name, source.floats(name, tensor.shape).data(), tensor.shape);
    else if (tensor.dtype == "I32") writer.add(name, source.int32s(name).data(), tensor.shape);
    else writer.add(name, source.uint64s(name).data(), tensor.shape);
  }
  for (const auto& [key, value] : source.metadata()) writer.set_metadata(key, value);
  return writer;
}

std::string open_error(const std::string& path) {
  return error_of([&] { SafetensorsReader reader(path); });
}

TEST(SafetensorsHeader, OverlappingTensorsAreRefused) {
  const std::string path = write_raw_safetensors(scratch_dir() + "/overlap.safetensors",
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
      R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12);
  EXPECT_CONTAINS(open_error(path), "overlap.safetensors: tensor 'b': data [4, 12) overlaps tensor 'a' at [0, 8)");
}

TEST(SafetensorsHeader, ElementCountThatOverflowsIsRefused) {
  // 2^32 * 2^32 elements wrap to 0 in 64 bits, which would match the empty byte range.
  const std::string path = write_raw_safetensors(scratch_dir() + "/overflow.safetensors",
      R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0);
  EXPECT_CONTAINS(open_error(path), "overflow.safetensors: tensor 'w': shape [4294967296, 4294967296] of F32 has more bytes");
}

TEST(SafetensorsHeader, BytesMustMatchTheShape) {
  const std::string path = write_raw_safetensors(scratch_dir() + "/short.safetensors",
      R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8);
  EXPECT_CONTAINS(open_error(path), "short.safetensors: tensor 'w': 8 bytes do not match shape [3] of F32 (12 bytes)");
}

TEST(SafetensorsHeader, OffsetsOutsideTheDataOrReversedAreRefused) {
  const std::string dir = scratch_dir();
  const std::string outside = write_raw_safetensors(dir + "/outside.safetensors",
      R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", 12);
  EXPECT_CONTAINS(open_error(outside), "outside.safetensors: tensor 'w': data [8, 16) outside the 12-byte data section");
  const std::string reversed = write_raw_safetensors(dir + "/reversed.safetensors",
      R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})", 12);
  EXPECT_CONTAINS(open_error(reversed), "reversed.safetensors: tensor 'w': data [8, 0) outside");
}

TEST(SafetensorsHeader, OffsetsAndExtentsMustBeIntegers) {
  const std::string dir = scratch_dir();
  const std::string negative = write_raw_safetensors(dir + "/negative.safetensors",
      R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}})", 8);
  EXPECT_CONTAINS(open_error(negative), "negative.safetensors: tensor 'w': data_offsets must hold 2 non-negative integers");
  const std::string fractional = write_raw_safetensors(dir + "/fractional.safetensors",
      R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", 8);
  EXPECT_CONTAINS(open_error(fractional), "fractional.safetensors: tensor 'w': shape holds 2.5, expected integers");
  const std::string not_object = write_raw_safetensors(dir + "/entry.safetensors", R"({"w": 3})", 0);
  EXPECT_CONTAINS(open_error(not_object), "entry.safetensors: tensor 'w': entry is not an object");
}

// 100,000 nested lists as a shape (200 KB): refused at the fourth level, before anything walks the
// value recursively (dump() for the message overflowed the stack: eval, predict and --init-from
// died of SIGSEGV), in the reader and in the app, with one short line.
TEST(SafetensorsHeader, DeepNestingIsRefusedBeforeAnyRecursiveWalk) {
  const std::string dir = scratch_dir();
  const size_t depth = 100000;
  const std::string path = write_raw_safetensors(dir + "/deep.safetensors",
      R"({"w": {"dtype": "F32", "shape": )" + std::string(depth, '[') + std::string(depth, ']') +
      R"(, "data_offsets": [0, 4]}})", 4);
  const std::string expected = path + ": header nests deeper than 3 levels (object, tensor, shape), at byte 41";
  EXPECT_EQ(open_error(path), expected);
  const DemoFiles files = testing::write_small_demo(dir + "/demo");
  const auto eval = testing::run_app("enhanced-eval", "--device cpu --threads 1 --data " + files.test_ebin +
                                     " --checkpoint " + path);
  EXPECT_EQ(eval.exit_code, 1) << eval.output;
  EXPECT_CONTAINS(eval.output, "error: " + expected + "\n");
}

// A checkpoint padded to 2 GiB (a sparse file): refused by its size before its data is read, the
// bound named; in an address space of 1.5 GiB, so reading the file whole would fail differently.
TEST(SafetensorsLayout, TrailingBytesAreRefusedBeforeTheDataIsRead) {
  const std::string dir = scratch_dir();
  SafetensorsWriter writer;
  const float values[3] = {1, 2, 3};
  writer.add("w", values, {3});
  const std::string path = dir + "/padded.safetensors";
  writer.write(path);
  const uintmax_t end = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, uintmax_t{1} << 31);
  const std::string expected = cat(path, ": 2147483648 bytes, but its tensors end at ", end);
  EXPECT_EQ(open_error(path), expected);
  const DemoFiles files = testing::write_small_demo(dir + "/demo");
  const auto eval = testing::run_app("enhanced-eval", "--device cpu --threads 1 --data " + files.test_ebin +
                                     " --checkpoint " + path, 1536);
  EXPECT_NE(eval.exit_code, 0);
  EXPECT_CONTAINS(eval.output, "error: " + expected);
}

TEST(SafetensorsLayout, TensorsMustCoverTheDataWithoutGaps) {
  const std::string path = write_raw_safetensors(scratch_dir() + "/gap.safetensors",
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
      R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})", 12);
  EXPECT_CONTAINS(open_error(path), "gap.safetensors: tensor 'b': data [8, 12) leaves bytes [4, 8) of the data section unused");
}

TEST(Safetensors, ZeroElementTensorsRoundTrip) {
  const std::string path = scratch_dir() + "/empty.safetensors";
  SafetensorsWriter writer;
  writer.add("none", static_cast<const float*>(nullptr), {0});
  writer.add("rows_of_nothing", static_cast<const int32_t*>(nullptr), {3, 0});
  const float one = 1.0f;
  writer.add("one", &one, {1});
  writer.write(path);
  drop_fuzz_seed("safetensors", path);
  const SafetensorsReader reader(path);
  EXPECT_TRUE(reader.floats("none", {0}).empty());
  EXPECT_TRUE(reader.int32s("rows_of_nothing").empty());
  EXPECT_EQ(reader.floats("one", {1}), std::vector<float>{1.0f});
}

// A small model's checkpoint, then the same tensors under metadata with `key` set to `value`.
class CheckpointMetadata : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir();
    ModelConfig config;
    config.vocab_size = 10;
    config.embedding_dim = 4;
    config.hidden = 3;
    config.seq_len = 5;
    config.num_labels = 2;
    ParameterBuffer<float> params(config);
    initialize_parameters(params, 1);
    save_checkpoint(good(), params);
    drop_fuzz_seed("safetensors", good());
  }

  std::string good() const { return dir_ + "/good.safetensors"; }

  std::string with_metadata(const std::string& key, const std::string& value) const {
    SafetensorsWriter writer = copy_of(SafetensorsReader(good()));
    writer.set_metadata(key, value);
    const std::string path = dir_ + "/" + key + ".safetensors";
    writer.write(path);
    drop_fuzz_seed("safetensors", path);
    return path;
  }

  std::string load_error(const std::string& path) const {
    return error_of([&] { load_checkpoint(path); });
  }

  std::string dir_;
};

TEST_F(CheckpointMetadata, IntegerBeyondIntIsRefusedNotTruncated) {
  // 2^32 + 3 would be truncated to 3, the true hidden size, and load as if nothing were wrong.
  EXPECT_CONTAINS(load_error(with_metadata("hidden", "4294967299")),
                  "hidden.safetensors: metadata 'hidden' is 4294967299, outside -2147483648..2147483647");
  EXPECT_CONTAINS(load_error(with_metadata("vocab_size", "99999999999999999999")),
                  "vocab_size.safetensors: metadata 'vocab_size' is 99999999999999999999, outside");
  EXPECT_CONTAINS(load_error(with_metadata("seq_len", "5x")), "seq_len.safetensors: metadata 'seq_len' is not an integer: '5x'");
  EXPECT_NO_THROW(load_checkpoint(good()));
}

// A checkpoint claiming H = 8192 (a 2 GiB parameter buffer) over H = 3's tensors, given to
// enhanced-eval and to enhanced-train --init-from in a process whose address space (1.5 GiB)
// could not hold the buffer: the error must come from the shape check, not from the allocator.
// (Not less: a CUDA build maps about 850 MiB of cuBLAS and cuDNN before main, and below that the
// loader fails or, at 800 MiB, spins.)
TEST_F(CheckpointMetadata, HugeModelIsRefusedByItsShapesWithoutAllocating) {
  const std::string checkpoint = with_metadata("hidden", "8192");
  const std::string expected = "error: " + checkpoint + ": tensor 'lstm.weight_ih_l0' has shape [12, 4], expected [32768, 4]";
  const DemoFiles files = testing::write_small_demo(dir_ + "/demo");
  const auto eval = testing::run_app("enhanced-eval", "--device cpu --threads 1 --data " + files.test_ebin +
                                     " --checkpoint " + checkpoint, 1536);
  EXPECT_NE(eval.exit_code, 0);
  EXPECT_CONTAINS(eval.output, expected);
  const auto train = testing::run_app("enhanced-train", "--device cpu --threads 1 --quiet --data " + files.train_ebin +
                                      " --init-from " + checkpoint + " --out " + dir_ + "/run", 1536);
  EXPECT_NE(train.exit_code, 0);
  EXPECT_CONTAINS(train.output, expected);
}

// The training state's step counter is a one-element U64 tensor; an empty one is an error naming
// the file and the tensor, not an unnamed std::out_of_range from the vector.
TEST(RunStateFile, EmptyStepCounterIsOneClearError) {
  const std::string dir = scratch_dir();
  const DemoFiles files = testing::write_small_demo(dir + "/demo");
  const std::string flags = testing::small_train_flags(files) + "--device cpu --out " + dir + "/run ";
  ASSERT_EQ(testing::run_app("enhanced-train", flags + "--steps 1").exit_code, 0);
  const std::string state = dir + "/run/optimizer.safetensors";
  SafetensorsWriter writer = copy_of(SafetensorsReader(state), "optimizer.steps");
  writer.add("optimizer.steps", static_cast<const uint64_t*>(nullptr), {0});
  writer.write(state);
  drop_fuzz_seed("safetensors", state);
  const auto resume = testing::run_app("enhanced-train", "--resume --quiet --device cpu --steps 2 --out " + dir + "/run");
  EXPECT_NE(resume.exit_code, 0);
  EXPECT_CONTAINS(resume.output, "error: " + state + ": tensor 'optimizer.steps' has shape [0], expected [1]");
}

}  // namespace
}  // namespace enhanced
