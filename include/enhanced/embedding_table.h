// Pretrained embedding tables for --pretrained (docs/model.md, "Data at the edges").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace enhanced {

// Pretrained embedding table: raw little-endian float32 (rows of `raw_dim` floats), NumPy .npy
// (float32/float64, 2-D, C order) or word2vec binary. Non-finite values are errors naming the
// file, row and column.
struct EmbeddingTable {
  int64_t rows = 0;
  int dim = 0;
  std::vector<float> values;  // (rows, dim)
};
EmbeddingTable load_embedding_table(const std::string& path, int raw_dim);

}  // namespace enhanced
