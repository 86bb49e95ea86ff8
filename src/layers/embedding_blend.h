// Embedding blend over a CSR batch (docs/model.md, forward step 1). For position p with n identifier ids:
//   n == 0: x[p] = E[cur[p]]
//   n  > 0: x[p] = 0.5 * mean_j E[id_j] + 0.5 * E[cur[p]]        (mean: per dimension)
//                  0.5 * mean(all n*D numbers) + 0.5 * E[cur[p]] (scalar-mean, the original)
#pragma once

#include <cstdint>
#include <vector>

#include "enhanced/model.h"

namespace enhanced {

// x (P, D) with P = B*T positions. threads: at most this many (a small batch runs on one).
template <class Real>
void embedding_blend_forward(Real* x, const int32_t* identifier_offsets, const int32_t* identifier_ids,
                             const int32_t* cur_word_ids, const Real* embedding, int positions, int dim,
                             BlendMode mode, int threads = 1);

// dembedding (V, D) += d loss / d E; only rows named in the batch change. Each row sums its
// updates in position order on any number of threads: the same bits.
template <class Real>
void embedding_blend_backward(Real* dembedding, const Real* dx, const int32_t* identifier_offsets,
                              const int32_t* identifier_ids, const int32_t* cur_word_ids, int positions,
                              int dim, BlendMode mode, int threads = 1);

// The sorted, distinct rows named in a batch (identifier and cur_word ids): the rows whose
// gradient may be non-zero. `rows` is reused (no allocation once its capacity suffices).
void embedding_touched_rows(std::vector<int32_t>& rows, const int32_t* identifier_ids, int64_t num_identifier_ids,
                            const int32_t* cur_word_ids, int positions);

}  // namespace enhanced
