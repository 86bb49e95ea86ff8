// One batch in CSR form, shaped (B, T, 3, ragged) with field 1 dropped (the model ignores it).
#pragma once

#include <cstdint>
#include <vector>

namespace enhanced {

struct Batch {
  int size = 0;     // B (the last batch of an epoch may be smaller)
  int seq_len = 0;  // T
  // Position p = b * T + t. Identifier ids of p are identifier_ids[offsets[p] .. offsets[p+1]).
  std::vector<int32_t> identifier_offsets;  // (B*T + 1)
  std::vector<int32_t> identifier_ids;      // (total identifier ids of the batch)
  std::vector<int32_t> cur_word_ids;        // (B*T)
  std::vector<int32_t> labels;              // (B)
  std::vector<int64_t> sample_indices;      // (B) index of each row in the dataset

  int positions() const { return size * seq_len; }
};

}  // namespace enhanced
