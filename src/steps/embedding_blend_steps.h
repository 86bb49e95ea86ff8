// The per-thread steps of the CUDA embedding blend (embedding_blend.cu), forward and backward,
// written once for the device and the host: each kernel is a thread index and a call to one of
// these, and a CPU test (tests/test_embedding_blend_steps.cpp) runs them thread by thread, a
// stable sort standing in for CUB's, against the CPU layer bit for bit. So the arithmetic and the
// index work (entry layout, padding, runs, the sentinel, chunks) are tested on every machine, not
// only where there is a GPU.
//
// The backward's algorithm: entries are laid out in the CPU layer's order of accumulation (position p owns
// entries offsets[p] + p, its cur word, and the next n_p, its identifier ids in order); keys are
// embedding rows, values entry indices. After a stable sort by key each row's entries are still
// in that order, so summing a row's run in order adds the CPU's terms in the CPU's order (in
// fixed chunks for very frequent rows: see kChunkEntries).
#pragma once

#include <cstdint>

#include "steps/host_device.h"

namespace enhanced::steps {

// ---- forward --------------------------------------------------------------------------------

// Mean mode, index = p * dim + d: the ids' rows summed in order, then the CPU layer's
// scale * sum + 0.5 * cur (cur alone when p has no ids).
ENHANCED_HOST_DEVICE inline void blend_mean_at(int64_t index, float* x, const int32_t* offsets, const int32_t* ids,
                                               const int32_t* cur, const float* embedding, int dim) {
  const int p = static_cast<int>(index / dim), d = static_cast<int>(index % dim);
  const float current = embedding[static_cast<int64_t>(cur[p]) * dim + d];
  const int begin = offsets[p], end = offsets[p + 1];
  if (begin == end) {
    x[index] = current;
    return;
  }
  float sum = 0.0f;
  for (int j = begin; j < end; ++j) sum = add_rn(sum, embedding[static_cast<int64_t>(ids[j]) * dim + d]);
  const float scale = div_rn(0.5f, static_cast<float>(end - begin));
  x[index] = add_rn(mul_rn(scale, sum), mul_rn(0.5f, current));
}

// Scalar-mean mode, position p (the scalar needs all D sums first): one mean over the ids' count
// x D numbers, halved, plus half the cur word's row.
ENHANCED_HOST_DEVICE inline void blend_scalar_at(int p, float* x, const int32_t* offsets, const int32_t* ids,
                                                 const int32_t* cur, const float* embedding, int dim) {
  float* out = x + static_cast<int64_t>(p) * dim;
  const float* current = embedding + static_cast<int64_t>(cur[p]) * dim;
  const int begin = offsets[p], end = offsets[p + 1];
  if (begin == end) {
    for (int d = 0; d < dim; ++d) out[d] = current[d];
    return;
  }
  float total = 0.0f;
  for (int d = 0; d < dim; ++d) {
    float sum = 0.0f;
    for (int j = begin; j < end; ++j) sum = add_rn(sum, embedding[static_cast<int64_t>(ids[j]) * dim + d]);
    total = add_rn(total, sum);
  }
  const float half_mean = div_rn(mul_rn(0.5f, total), mul_rn(static_cast<float>(end - begin), static_cast<float>(dim)));
  for (int d = 0; d < dim; ++d) out[d] = add_rn(half_mean, mul_rn(0.5f, current[d]));
}

// ---- backward -------------------------------------------------------------------------------

// Position p: its entries (key, value = entry index, position) and its coefficients. An id entry
// contributes id_coefficient[p] * dx[p, d] (mean) or id_coefficient[p] itself (scalar-mean: the
// same share for every d); the cur entry cur_coefficient[p] * dx[p, d].
ENHANCED_HOST_DEVICE inline void write_entries(int p, int32_t* keys, int32_t* values, int32_t* entry_position,
                                               float* id_coefficient, float* cur_coefficient, const float* dx,
                                               const int32_t* offsets, const int32_t* ids, const int32_t* cur,
                                               int dim, bool scalar) {
  const int begin = offsets[p], end = offsets[p + 1];
  const int count = end - begin;
  const int first = begin + p;
  keys[first] = cur[p];
  values[first] = first;
  entry_position[first] = p;
  for (int j = 0; j < count; ++j) {
    keys[first + 1 + j] = ids[begin + j];
    values[first + 1 + j] = first + 1 + j;
    entry_position[first + 1 + j] = p;
  }
  cur_coefficient[p] = count == 0 ? 1.0f : 0.5f;
  if (count == 0) {
    id_coefficient[p] = 0.0f;
  } else if (!scalar) {
    id_coefficient[p] = div_rn(0.5f, static_cast<float>(count));
  } else {
    const float* grad = dx + static_cast<int64_t>(p) * dim;
    float total = 0.0f;
    for (int d = 0; d < dim; ++d) total = add_rn(total, grad[d]);
    id_coefficient[p] = div_rn(mul_rn(0.5f, total), mul_rn(static_cast<float>(count), static_cast<float>(dim)));
  }
}

// Entry e in [positions, entries): past the batch's own (P + offsets[P], read here, so the
// caller need not know the id count) it gets the sentinel row V, which sorts last and forms no
// run. This lets a captured CUDA graph sort a fixed number of entries whatever the id count.
ENHANCED_HOST_DEVICE inline void pad_entry(int64_t e, int32_t* keys, int32_t* values, const int32_t* offsets,
                                           int positions, int32_t sentinel) {
  if (e < positions + static_cast<int64_t>(offsets[positions])) return;
  keys[e] = sentinel;
  values[e] = static_cast<int32_t>(e);
}

// heads[i] = 1 at the first entry of each row's run in the sorted keys.
ENHANCED_HOST_DEVICE inline void mark_run_head(int i, int32_t* heads, const int32_t* keys) {
  heads[i] = (i == 0 || keys[i] != keys[i - 1]) ? 1 : 0;
}

// With run_index = exclusive sum of heads: each head writes its run's row and start; the last
// entry closes the last run (run_offsets[runs] = entries) and counts the runs, leaving out the
// sentinel's: its start is then the end of the last real run.
ENHANCED_HOST_DEVICE inline void record_run_start(int i, int32_t* rows, int32_t* run_offsets, int32_t* run_count,
                                                  const int32_t* heads, const int32_t* run_index,
                                                  const int32_t* keys, int entries, int32_t sentinel) {
  if (heads[i]) {
    rows[run_index[i]] = keys[i];
    run_offsets[run_index[i]] = i;
  }
  if (i == entries - 1) {
    const int runs = run_index[i] + heads[i];
    run_offsets[runs] = entries;
    *run_count = keys[i] == sentinel ? runs - 1 : runs;
  }
}

// A row's run of at most kChunkEntries entries is summed in order by one thread per d, exactly
// as the CPU does (its bits). A longer run (a frequent token can occur thousands of times a
// batch) is cut into chunks of kChunkEntries consecutive entries, each summed in order by one
// thread per d, and the chunk sums are added in order: the same fixed order every time, and
// kChunkEntries dependent additions per thread instead of thousands.
constexpr int kChunkEntries = 64;

// chunk_counts[r] = number of chunks of run r: 0 for a short run (summed directly) and past the
// runs. With chunk_offsets = their exclusive sum, write_chunks lays the chunks out run by run.
ENHANCED_HOST_DEVICE inline void count_chunks(int r, int32_t* chunk_counts, const int32_t* run_offsets,
                                              const int32_t* run_count) {
  const int length = r < *run_count ? run_offsets[r + 1] - run_offsets[r] : 0;
  chunk_counts[r] = length > kChunkEntries ? (length + kChunkEntries - 1) / kChunkEntries : 0;
}

// Run r's chunks: [begin, end) in the sorted entries. Thread bound - 1 (the last of the launch)
// writes the total, which the chunk counts' exclusive sum gives whatever the number of runs.
ENHANCED_HOST_DEVICE inline void write_chunks(int r, int32_t* chunk_begin, int32_t* chunk_end, int32_t* chunk_count,
                                              const int32_t* chunk_counts, const int32_t* chunk_offsets,
                                              const int32_t* run_offsets, int bound) {
  if (r == bound - 1) *chunk_count = chunk_offsets[r] + chunk_counts[r];
  const int chunks = chunk_counts[r];
  if (chunks == 0) return;  // a short run, or past the runs: run_offsets[r + 1] may be unwritten
  const int first = chunk_offsets[r], end = run_offsets[r + 1];
  for (int m = 0; m < chunks; ++m) {
    const int begin = run_offsets[r] + m * kChunkEntries;
    chunk_begin[first + m] = begin;
    chunk_end[first + m] = begin + kChunkEntries < end ? begin + kChunkEntries : end;
  }
}

// The sorted entries [begin, end) summed in order for column d: the CPU's terms in its order.
ENHANCED_HOST_DEVICE inline float sum_entries(int begin, int end, int d, const int32_t* sorted_entries,
                                              const int32_t* entry_position, const int32_t* offsets,
                                              const float* id_coefficient, const float* cur_coefficient,
                                              const float* dx, int dim, bool scalar) {
  float sum = 0.0f;
  for (int k = begin; k < end; ++k) {
    const int e = sorted_entries[k];
    const int p = entry_position[e];
    const float grad = dx[static_cast<int64_t>(p) * dim + d];
    float value;
    if (e == offsets[p] + p) value = mul_rn(cur_coefficient[p], grad);
    else value = scalar ? id_coefficient[p] : mul_rn(id_coefficient[p], grad);
    sum = add_rn(sum, value);
  }
  return sum;
}

// index = chunk * dim + d: one chunk of a long run.
ENHANCED_HOST_DEVICE inline void sum_chunk(int64_t index, float* chunk_sums, const int32_t* chunk_begin,
                                           const int32_t* chunk_end, const int32_t* chunk_count,
                                           const int32_t* sorted_entries, const int32_t* entry_position,
                                           const int32_t* offsets, const float* id_coefficient,
                                           const float* cur_coefficient, const float* dx, int dim, bool scalar) {
  const int64_t chunk = index / dim;
  const int d = static_cast<int>(index % dim);
  if (chunk >= *chunk_count) return;
  chunk_sums[index] = sum_entries(chunk_begin[chunk], chunk_end[chunk], d, sorted_entries, entry_position, offsets,
                                  id_coefficient, cur_coefficient, dx, dim, scalar);
}

// index = run * dim + d: a short run summed directly, a long one's chunk sums added in order;
// the total is added into dembedding. Each (row, d) has exactly one writer: no atomics, the same
// bits every run.
ENHANCED_HOST_DEVICE inline void sum_run(int64_t index, float* dembedding, const int32_t* rows,
                                         const int32_t* run_offsets, const int32_t* run_count,
                                         const int32_t* chunk_counts, const int32_t* chunk_offsets,
                                         const float* chunk_sums, const int32_t* sorted_entries,
                                         const int32_t* entry_position, const int32_t* offsets,
                                         const float* id_coefficient, const float* cur_coefficient, const float* dx,
                                         int dim, bool scalar) {
  const int64_t run = index / dim;
  const int d = static_cast<int>(index % dim);
  if (run >= *run_count) return;
  float sum;
  if (chunk_counts[run] == 0) {
    sum = sum_entries(run_offsets[run], run_offsets[run + 1], d, sorted_entries, entry_position, offsets,
                      id_coefficient, cur_coefficient, dx, dim, scalar);
  } else {
    const int64_t first = chunk_offsets[run];
    sum = chunk_sums[first * dim + d];
    for (int m = 1; m < chunk_counts[run]; ++m) sum = add_rn(sum, chunk_sums[(first + m) * dim + d]);
  }
  float* out = dembedding + static_cast<int64_t>(rows[run]) * dim + d;
  *out = add_rn(*out, sum);
}

// Chunks a batch of `entries` entries can have: only runs longer than kChunkEntries have any, at
// most 2 per kChunkEntries of their entries.
inline int64_t max_chunks(int64_t entries) { return entries / (kChunkEntries / 2) + 1; }

}  // namespace enhanced::steps
