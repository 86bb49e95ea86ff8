// The embedding gradient as the CUDA backward is specified to sum it: each row's terms in the CPU
// layer's order (position by position: the cur word's term, then each identifier id's), summed in
// that order when a row has at most `chunk` terms (then it is the float CPU layer's result), else
// in chunks of `chunk` consecutive terms whose sums are added in order. Shared by the host test
// of the kernels' steps and the GPU parity test. Build with -ffp-contract=off.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "enhanced/batch.h"
#include "enhanced/model.h"

namespace enhanced::testing {

inline std::vector<int64_t> terms_per_row(const Batch& batch, int vocab) {
  std::vector<int64_t> terms(static_cast<size_t>(vocab), 0);
  for (int32_t id : batch.identifier_ids) ++terms[id];
  for (int32_t id : batch.cur_word_ids) ++terms[id];
  return terms;
}

inline std::vector<float> chunked_embedding_gradient(const Batch& batch, const std::vector<float>& dx, int vocab,
                                                     int dim, BlendMode mode, int chunk) {
  std::vector<std::vector<std::vector<float>>> terms(vocab, std::vector<std::vector<float>>(dim));
  for (int p = 0; p < batch.positions(); ++p) {
    const float* grad = dx.data() + static_cast<size_t>(p) * dim;
    const int begin = batch.identifier_offsets[p], count = batch.identifier_offsets[p + 1] - begin;
    float total = 0;
    for (int d = 0; d < dim; ++d) total += grad[d];
    for (int d = 0; d < dim; ++d) terms[batch.cur_word_ids[p]][d].push_back(count == 0 ? grad[d] : 0.5f * grad[d]);
    for (int j = 0; j < count; ++j)
      for (int d = 0; d < dim; ++d)
        terms[batch.identifier_ids[begin + j]][d].push_back(
            mode == BlendMode::mean ? 0.5f / static_cast<float>(count) * grad[d]
                                    : 0.5f * total / (static_cast<float>(count) * static_cast<float>(dim)));
  }
  std::vector<float> out(static_cast<size_t>(vocab) * dim, 0.0f);
  for (int row = 0; row < vocab; ++row)
    for (int d = 0; d < dim; ++d) {
      const std::vector<float>& t = terms[row][d];
      if (t.empty()) continue;
      float sum = 0;
      if (t.size() <= static_cast<size_t>(chunk)) {
        for (float term : t) sum += term;
      } else {
        for (size_t first = 0; first < t.size(); first += chunk) {
          float part = 0;
          for (size_t k = first; k < std::min(t.size(), first + chunk); ++k) part += t[k];
          sum = first == 0 ? part : sum + part;
        }
      }
      out[static_cast<size_t>(row) * dim + d] = 0.0f + sum;
    }
  return out;
}

}  // namespace enhanced::testing
