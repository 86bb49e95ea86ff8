// Pretrained embedding tables for --pretrained (docs/model.md, "Data at the edges").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace enhanced {

// Pretrained embedding table: raw little-endian float32 (its D by RawTableShape below), NumPy .npy
// (float32/float64, 2-D, C order) or word2vec binary. Non-finite values are errors naming the
// file, row and column.
struct EmbeddingTable {
  int64_t rows = 0;
  int dim = 0;
  std::vector<float> values;  // (rows, dim)
};
// What is known of a raw float32 table's shape, which its bytes alone never pin down (any
// divisor of its float count could be D). The rule, for N floats:
// - `dim` given (--embedding-dim): D = dim, and N must be a multiple of it;
// - else `rows` given (--vocab-size): D = N / rows, which must be whole;
// - else D is the one D (1..2^20) dividing N with N / D >= min_rows (every id of the data needs
//   a row); where several fit, the file is refused with the candidates, asking for --embedding-dim.
// (.npy and word2vec files carry their shape: these hints are not used for them.)
struct RawTableShape {
  int dim = 0;           // 0: not given
  int64_t rows = 0;      // 0: not given
  int64_t min_rows = 1;  // the data's largest id + 1
};
EmbeddingTable load_embedding_table(const std::string& path, const RawTableShape& raw);
// The D the rule above gives for a raw file of `floats` floats (Error naming `path` otherwise).
int raw_embedding_dim(const std::string& path, uint64_t floats, const RawTableShape& raw);

}  // namespace enhanced
