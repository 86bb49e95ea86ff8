// Pretrained embedding tables: raw little-endian float32, NumPy .npy and word2vec binary.
#include "enhanced/embedding_table.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "enhanced/common.h"
#include "enhanced/text.h"
#include "io/input_file.h"

namespace enhanced {
namespace {

std::vector<char> read_all(const std::string& path) {
  InputFile file = open_input_file(path);
  std::vector<char> bytes =
      allocating(cat("reading ", path, " (", file.size, " bytes)"), [&] { return std::vector<char>(file.size); });
  file.stream.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file.stream) fail(path, ": read error");
  return bytes;
}

// A table the model can use: ids are int32, and D is an int.
void check_table_shape(const std::string& path, long long rows, long long dim) {
  if (rows > (1ll << 31)) fail(path, ": ", rows, " rows, more than int32 token ids can address");
  if (dim > (1 << 20)) fail(path, ": embedding dim ", dim, " is implausibly large");
}

void check_finite(const std::string& path, const EmbeddingTable& table) {
  for (size_t i = 0; i < table.values.size(); ++i)
    if (!std::isfinite(table.values[i]))
      fail(path, ": row ", i / table.dim, " (token id), column ", i % table.dim, " is ", table.values[i]);
}

// The value of one key of a .npy header's dict literal: a quoted string, a parenthesised tuple
// or a bare word, and nothing after it.
std::string npy_header_field(const std::string& path, const std::string& header, const std::string& key) {
  const size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) fail(path, ": .npy header has no '", key, "': ", excerpt(header, 200));
  size_t begin = header.find(':', at);
  if (begin == std::string::npos) fail(path, ": malformed .npy header: ", excerpt(header, 200));
  begin = header.find_first_not_of(' ', begin + 1);
  if (begin == std::string::npos) fail(path, ": malformed .npy header: ", excerpt(header, 200));
  size_t end;
  if (header[begin] == '\'' || header[begin] == '"') end = header.find(header[begin], begin + 1);
  else if (header[begin] == '(') end = header.find(')', begin);
  else {
    end = header.find_first_of(",}", begin);
    if (end == std::string::npos) fail(path, ": malformed .npy header: ", excerpt(header, 200));
    end = header.find_last_not_of(' ', end - 1);
  }
  if (end == std::string::npos || end < begin) fail(path, ": malformed .npy header: ", excerpt(header, 200));
  return header.substr(begin, end - begin + 1);
}

// NumPy .npy, version 1-3: magic, version, header length, a Python dict literal header.
EmbeddingTable parse_npy(const std::string& path, const std::vector<char>& bytes) {
  if (bytes.size() < 10) fail(path, ": truncated .npy header");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_length = 0, header_start = 0;
  if (major == 1) {
    header_length = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(path, ": truncated .npy header");
    uint32_t length = 0;
    std::memcpy(&length, bytes.data() + 8, 4);
    header_length = length;
    header_start = 12;
  } else {
    fail(path, ": unsupported .npy version ", major);
  }
  if (header_start + header_length > bytes.size()) fail(path, ": truncated .npy header");
  const std::string header(bytes.data() + header_start, header_length);
  auto field = [&](const std::string& key) { return npy_header_field(path, header, key); };
  const std::string descr = field("descr");
  int width = 0;
  if (descr == "'<f4'") width = 4;
  else if (descr == "'<f8'") width = 8;
  else fail(path, ": .npy dtype must be little-endian float32 or float64 ('<f4' or '<f8'), header says ",
            excerpt(descr));
  if (field("fortran_order") != "False") fail(path, ": .npy must be C order (fortran_order False)");
  const std::string shape = field("shape");
  long long rows = 0, dim = 0;
  char close = 0;
  if (std::sscanf(shape.c_str(), "(%lld, %lld%c", &rows, &dim, &close) != 3 || close != ')' || rows <= 0 || dim <= 0)
    fail(path, ": .npy must hold a 2-D array, shape is ", shape);
  check_table_shape(path, rows, dim);
  const size_t data_start = header_start + header_length;
  const size_t expected = static_cast<size_t>(rows) * static_cast<size_t>(dim) * static_cast<size_t>(width);  // bounded above
  if (bytes.size() - data_start != expected)
    fail(path, ": .npy data is ", bytes.size() - data_start, " bytes, shape (", rows, ", ", dim, ") needs ", expected);
  EmbeddingTable table{rows, static_cast<int>(dim), std::vector<float>(static_cast<size_t>(rows) * dim)};
  for (size_t i = 0; i < table.values.size(); ++i) {
    if (width == 4) {
      std::memcpy(&table.values[i], bytes.data() + data_start + 4 * i, 4);
    } else {
      double value;
      std::memcpy(&value, bytes.data() + data_start + 8 * i, 8);
      table.values[i] = static_cast<float>(value);
    }
  }
  return table;
}

// word2vec binary: "V D\n", then per row a word, a space and D float32 (a newline may follow).
bool parse_word2vec(const std::string& path, const std::vector<char>& bytes, EmbeddingTable& table) {
  const size_t scan = std::min<size_t>(bytes.size(), 64);
  const void* found = std::memchr(bytes.data(), '\n', scan);
  if (!found) return false;
  const size_t header_end = static_cast<size_t>(static_cast<const char*>(found) - bytes.data());
  const std::string first(bytes.data(), header_end);
  long long rows = 0, dim = 0;
  char extra = 0;
  if (std::sscanf(first.c_str(), "%lld %lld %c", &rows, &dim, &extra) != 2 || rows <= 0 || dim <= 0) return false;
  check_table_shape(path, rows, dim);
  // Each row holds at least a space and D floats: a header promising more than the file can hold
  // is refused before anything is allocated.
  const size_t remaining = bytes.size() - header_end - 1;
  if (static_cast<unsigned long long>(rows) > remaining / (4 * static_cast<size_t>(dim) + 1))
    fail(path, ": word2vec header says ", rows, " rows of ", dim, " floats, the file holds ", remaining, " bytes");
  table = EmbeddingTable{rows, static_cast<int>(dim), std::vector<float>(static_cast<size_t>(rows) * dim)};
  size_t at = header_end + 1;
  for (long long row = 0; row < rows; ++row) {
    while (at < bytes.size() && (bytes[at] == '\n')) ++at;
    while (at < bytes.size() && bytes[at] != ' ') ++at;  // the word
    ++at;
    if (at + 4 * static_cast<size_t>(dim) > bytes.size())
      fail(path, ": word2vec file truncated at row ", row, " of ", rows);
    std::memcpy(&table.values[static_cast<size_t>(row) * dim], bytes.data() + at, 4 * static_cast<size_t>(dim));
    at += 4 * static_cast<size_t>(dim);
  }
  return true;
}

}  // namespace

int raw_embedding_dim(const std::string& path, uint64_t floats, const RawTableShape& raw) {
  if (raw.dim > 0) return raw.dim;  // whether it divides the file is checked by the loader, naming D
  if (floats == 0) fail(path, ": empty raw float32 file");
  if (raw.rows > 0) {
    if (floats % static_cast<uint64_t>(raw.rows) != 0 || floats / static_cast<uint64_t>(raw.rows) > (1u << 20))
      fail(path, ": raw float32 file of ", floats, " floats is not ", raw.rows, " rows (--vocab-size) of a whole D");
    return static_cast<int>(floats / static_cast<uint64_t>(raw.rows));
  }
  std::vector<uint64_t> fits;  // every D the size allows, ascending; listed largest first (the
                               // likeliest: its row count is nearest the data's vocabulary)
  for (uint64_t d = 1; d <= (1u << 20) && d <= floats; ++d)
    if (floats % d == 0 && floats / d >= static_cast<uint64_t>(raw.min_rows)) fits.push_back(d);
  if (fits.size() == 1) return static_cast<int>(fits[0]);
  if (fits.empty())
    fail(path, ": raw float32 file of ", floats, " floats cannot hold a row for each of the data's ", raw.min_rows,
         " ids; give --embedding-dim");
  std::string list;
  for (size_t i = 0; i < fits.size() && i < 6; ++i) {
    const uint64_t d = fits[fits.size() - 1 - i];
    list += cat(i ? ", " : "", d, " (", floats / d, " rows)");
  }
  fail(path, ": a raw float32 file of ", floats, " floats fits ", fits.size(), " embedding dims for the data's ",
       raw.min_rows, " ids: D = ", list, fits.size() > 6 ? ", ..." : "", "; give --embedding-dim (or --vocab-size)");
}

EmbeddingTable load_embedding_table(const std::string& path, const RawTableShape& raw) {
  const std::vector<char> bytes = read_all(path);
  if (bytes.empty()) fail(path, ": empty file");  // and no null data() for the parsers below
  EmbeddingTable table;
  if (bytes.size() >= 6 && std::memcmp(bytes.data(), "\x93NUMPY", 6) == 0) {
    table = parse_npy(path, bytes);
  } else if (!parse_word2vec(path, bytes, table)) {
    const int raw_dim = raw_embedding_dim(path, bytes.size() / 4, raw);
    const size_t row_bytes = 4 * static_cast<size_t>(raw_dim);
    if (bytes.size() % row_bytes != 0)
      fail(path, ": raw float32 file of ", bytes.size(), " bytes is not a whole number of rows of D = ", raw_dim,
           " floats (", row_bytes, " bytes)");
    table = EmbeddingTable{static_cast<int64_t>(bytes.size() / row_bytes), raw_dim, std::vector<float>(bytes.size() / 4)};
    std::memcpy(table.values.data(), bytes.data(), bytes.size());
  }
  check_finite(path, table);
  return table;
}

}  // namespace enhanced
