// Pretrained embedding tables (raw float32, .npy, word2vec) through load_embedding_table: each
// format loads to the same values, and a bad file is one clear error naming it. The files are
// the embedding fuzzer's seeds (docs/fuzzing.md).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "data_test_util.h"
#include "enhanced/embedding_table.h"

namespace enhanced {
namespace {

using namespace enhanced::test_util;

const std::vector<float> kValues = {0.5f, -1.0f, 2.0f, 0.25f, 3.0f, -0.125f};  // 3 rows of D = 2

std::string bytes_of(const void* data, size_t size) { return std::string(static_cast<const char*>(data), size); }

// A version-1 .npy holding `data` under `descr` with shape (3, 2).
std::string npy_bytes(const std::string& descr, const std::string& data) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (3, 2), }";
  header.append(117 - header.size(), ' ');
  header += '\n';
  return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size()) + '\0' + header + data;
}

std::string write_seed(const std::string& path, const std::string& bytes) {
  write_text(path, bytes);
  drop_fuzz_seed("embedding_table", path);
  return path;
}

TEST(EmbeddingTable, EveryFormatLoadsTheSameTable) {
  const std::string dir = scratch_dir();
  std::vector<double> doubles(kValues.begin(), kValues.end());
  std::string w2v = "3 2\n";
  for (int row = 0; row < 3; ++row) w2v += "word" + std::to_string(row) + " " + bytes_of(&kValues[2 * row], 8) + "\n";
  const std::vector<std::string> files = {
      write_seed(dir + "/table.bin", bytes_of(kValues.data(), kValues.size() * 4)),
      write_seed(dir + "/table-f4.npy", npy_bytes("<f4", bytes_of(kValues.data(), kValues.size() * 4))),
      write_seed(dir + "/table-f8.npy", npy_bytes("<f8", bytes_of(doubles.data(), doubles.size() * 8))),
      write_seed(dir + "/table.w2v", w2v),
  };
  for (const std::string& file : files) {
    const EmbeddingTable table = load_embedding_table(file, RawTableShape{2});
    EXPECT_EQ(table.rows, 3) << file;
    EXPECT_EQ(table.dim, 2) << file;
    EXPECT_EQ(table.values, kValues) << file;
  }
}

TEST(EmbeddingTable, EmptyFileIsOneClearError) {
  const std::string path = write_seed(scratch_dir() + "/empty.bin", "");
  EXPECT_CONTAINS(error_of([&] { load_embedding_table(path, RawTableShape{8}); }), "empty.bin: empty file");
}

TEST(EmbeddingTable, TruncatedFilesNameTheFile) {
  const std::string dir = scratch_dir();
  const std::string npy = write_seed(dir + "/short.npy", npy_bytes("<f4", std::string(20, '\0')));
  EXPECT_CONTAINS(error_of([&] { load_embedding_table(npy, RawTableShape{}); }), "short.npy: .npy data is 20 bytes, shape (3, 2) needs 24");
  const std::string w2v = write_seed(dir + "/short.w2v", "3 2\nword " + std::string(8, '\0') + "\nnext ");
  EXPECT_CONTAINS(error_of([&] { load_embedding_table(w2v, RawTableShape{}); }), "short.w2v: word2vec");
}

}  // namespace
}  // namespace enhanced
