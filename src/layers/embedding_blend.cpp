#include "layers/embedding_blend.h"

#include <algorithm>

namespace enhanced {
namespace {

// The table can be gigabytes and the rows a batch names are random: prefetching the rows of a
// position some positions ahead keeps the loops from waiting on memory one row at a time.
constexpr int kPrefetchAhead = 8;

// wanted(row): whether this thread will touch the row (the backward's threads prefetch only their
// own, not lines another thread is writing).
template <class Real, class Wanted>
inline void prefetch_rows(const Real* table, const int32_t* identifier_offsets, const int32_t* identifier_ids,
                          const int32_t* cur_word_ids, int position, int positions, int dim, Wanted wanted) {
  if (position >= positions) return;
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(Real);
  auto prefetch = [&](int32_t row) {
    if (!wanted(row)) return;
    const char* start = reinterpret_cast<const char*>(table + static_cast<size_t>(row) * dim);
    for (size_t line = 0; line < row_bytes; line += 64) __builtin_prefetch(start + line);
  };
  prefetch(cur_word_ids[position]);
  for (int j = identifier_offsets[position]; j < identifier_offsets[position + 1]; ++j) prefetch(identifier_ids[j]);
}

// Positions [first, end) of the forward.
template <class Real>
void blend_positions(Real* x, const int32_t* identifier_offsets, const int32_t* identifier_ids,
                     const int32_t* cur_word_ids, const Real* embedding, int first, int end, int dim, BlendMode mode) {
  for (int p = first; p < end; ++p) {
    prefetch_rows(embedding, identifier_offsets, identifier_ids, cur_word_ids, p + kPrefetchAhead, end, dim,
                  [](int32_t) { return true; });
    Real* out = x + static_cast<size_t>(p) * dim;
    const Real* cur = embedding + static_cast<size_t>(cur_word_ids[p]) * dim;
    const int begin = identifier_offsets[p], stop = identifier_offsets[p + 1];
    const int count = stop - begin;
    if (count == 0) {
      std::copy(cur, cur + dim, out);
      continue;
    }
    std::fill(out, out + dim, Real(0));
    for (int j = begin; j < stop; ++j) {
      const Real* row = embedding + static_cast<size_t>(identifier_ids[j]) * dim;
      for (int d = 0; d < dim; ++d) out[d] += row[d];
    }
    if (mode == BlendMode::mean) {
      const Real scale = Real(0.5) / Real(count);
      for (int d = 0; d < dim; ++d) out[d] = scale * out[d] + Real(0.5) * cur[d];
    } else {
      // tf.reduce_mean without an axis: one scalar over all count * dim numbers.
      Real total = 0;
      for (int d = 0; d < dim; ++d) total += out[d];
      const Real half_mean = Real(0.5) * total / (Real(count) * Real(dim));
      for (int d = 0; d < dim; ++d) out[d] = half_mean + Real(0.5) * cur[d];
    }
  }
}

// body(part, parts) for each part of a pass over `positions`, one a thread: up to `threads`
// parts, one for a batch too small to share.
template <class Body>
void in_parts(int threads, int positions, Body body) {
  const int parts = positions >= 4096 ? std::max(1, threads) : 1;
#pragma omp parallel for schedule(static) num_threads(parts)
  for (int part = 0; part < parts; ++part) body(part, parts);
}

// Whether part `part` of `parts` owns embedding row `row` in the backward: blocks of rows of about
// 256 bytes, dealt in turn. Each row has one owner; two threads share a cache line at most where
// a block's edge falls inside one (a row not a whole number of lines): false sharing, no race.
inline bool owns(int32_t row, int part, int parts, int rows_per_block) {
  return parts == 1 || (row / rows_per_block) % parts == part;
}

}  // namespace

// Each position's row of x is its own: the positions split into contiguous parts, one a thread.
template <class Real>
void embedding_blend_forward(Real* x, const int32_t* identifier_offsets, const int32_t* identifier_ids,
                             const int32_t* cur_word_ids, const Real* embedding, int positions, int dim,
                             BlendMode mode, int threads) {
  in_parts(threads, positions, [&](int part, int parts) {
    blend_positions(x, identifier_offsets, identifier_ids, cur_word_ids, embedding,
                    static_cast<int>(static_cast<int64_t>(positions) * part / parts),
                    static_cast<int>(static_cast<int64_t>(positions) * (part + 1) / parts), dim, mode);
  });
}

namespace {

// The backward's updates to the rows part `part` owns, every position in order: each row sums its
// updates in the order one thread would, whatever the parts (the same bits).
template <class Real>
void blend_gradient_rows(Real* dembedding, const Real* dx, const int32_t* identifier_offsets,
                         const int32_t* identifier_ids, const int32_t* cur_word_ids, int positions, int dim,
                         BlendMode mode, int part, int parts) {
  const int rows_per_block = std::max(1, 256 / std::max(1, static_cast<int>(dim * sizeof(Real))));
  const auto own = [&](int32_t row) { return owns(row, part, parts, rows_per_block); };
  for (int p = 0; p < positions; ++p) {
    prefetch_rows(dembedding, identifier_offsets, identifier_ids, cur_word_ids, p + kPrefetchAhead, positions, dim,
                  own);
    const Real* grad = dx + static_cast<size_t>(p) * dim;
    const int32_t cur_row = cur_word_ids[p];
    Real* dcur = dembedding + static_cast<size_t>(cur_row) * dim;
    const bool own_cur = own(cur_row);
    const int begin = identifier_offsets[p], end = identifier_offsets[p + 1];
    const int count = end - begin;
    if (count == 0) {
      if (own_cur)
        for (int d = 0; d < dim; ++d) dcur[d] += grad[d];
      continue;
    }
    if (own_cur)
      for (int d = 0; d < dim; ++d) dcur[d] += Real(0.5) * grad[d];
    if (mode == BlendMode::mean) {
      const Real scale = Real(0.5) / Real(count);
      for (int j = begin; j < end; ++j) {
        if (!own(identifier_ids[j])) continue;
        Real* drow = dembedding + static_cast<size_t>(identifier_ids[j]) * dim;
        for (int d = 0; d < dim; ++d) drow[d] += scale * grad[d];
      }
    } else {
      // Every one of the count * dim numbers gets the same share of sum_d grad[d].
      Real total = 0;
      for (int d = 0; d < dim; ++d) total += grad[d];
      const Real share = Real(0.5) * total / (Real(count) * Real(dim));
      for (int j = begin; j < end; ++j) {
        if (!own(identifier_ids[j])) continue;
        Real* drow = dembedding + static_cast<size_t>(identifier_ids[j]) * dim;
        for (int d = 0; d < dim; ++d) drow[d] += share;
      }
    }
  }
}

}  // namespace

// Rows collide across positions, so the threads split the table's rows, not the positions.
template <class Real>
void embedding_blend_backward(Real* dembedding, const Real* dx, const int32_t* identifier_offsets,
                              const int32_t* identifier_ids, const int32_t* cur_word_ids, int positions, int dim,
                              BlendMode mode, int threads) {
  in_parts(threads, positions, [&](int part, int parts) {
    blend_gradient_rows(dembedding, dx, identifier_offsets, identifier_ids, cur_word_ids, positions, dim, mode, part,
                        parts);
  });
}

void embedding_touched_rows(std::vector<int32_t>& rows, const int32_t* identifier_ids, int64_t num_identifier_ids,
                            const int32_t* cur_word_ids, int positions) {
  rows.clear();
  rows.insert(rows.end(), identifier_ids, identifier_ids + num_identifier_ids);
  rows.insert(rows.end(), cur_word_ids, cur_word_ids + positions);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
}

template void embedding_blend_forward<float>(float*, const int32_t*, const int32_t*, const int32_t*, const float*,
                                             int, int, BlendMode, int);
template void embedding_blend_forward<double>(double*, const int32_t*, const int32_t*, const int32_t*,
                                              const double*, int, int, BlendMode, int);
template void embedding_blend_backward<float>(float*, const float*, const int32_t*, const int32_t*, const int32_t*,
                                              int, int, BlendMode, int);
template void embedding_blend_backward<double>(double*, const double*, const int32_t*, const int32_t*,
                                               const int32_t*, int, int, BlendMode, int);

}  // namespace enhanced
