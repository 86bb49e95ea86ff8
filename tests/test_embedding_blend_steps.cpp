// The CUDA embedding blend's forward and backward, run on the CPU: every kernel of
// embedding_blend.cu is a thread index around one step of steps/embedding_blend_steps.h; here
// each step runs thread by thread, std::stable_sort standing in for CUB's stable radix sort and a
// loop for its exclusive scans. The results must be the float CPU layer's bits (and, backward,
// its touched rows), with the sort exact or padded (as a captured CUDA graph pads it). This checks
// the arithmetic and the index work on every machine; CudaParity.EmbeddingBlendMatchesCpu checks
// the kernels themselves on a GPU. Backward rows with more than kChunkEntries terms are summed in
// fixed chunks: checked against a reference written from that rule, which on short rows is itself
// checked to be the CPU layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "embedding_reference.h"
#include "gradcheck.h"
#include "steps/embedding_blend_steps.h"
#include "layers/embedding_blend.h"

namespace enhanced {
namespace {


struct Emulated {
  std::vector<float> gradient;
  std::vector<int32_t> touched_rows;
};

// embedding_blend_backward (src/kernels/embedding_blend.cu) step by step on the host; the
// gradient starts at zero, as the model's does.
Emulated emulate_backward(const Batch& batch, const std::vector<float>& dx, int vocab, int dim, BlendMode mode,
                          int64_t max_identifier_ids) {
  const int P = batch.positions();
  const int entries = static_cast<int>(P + max_identifier_ids);
  const bool scalar = mode == BlendMode::scalar_mean;
  const int32_t sentinel = vocab;
  // Padding entries the kernels never write hold garbage on the device: start from garbage too.
  std::vector<int32_t> keys(entries, -7), values(entries, -7), position(entries, -7);
  std::vector<float> id_coefficient(P, -7.0f), cur_coefficient(P, -7.0f);
  const int32_t* ids = batch.identifier_ids.empty() ? nullptr : batch.identifier_ids.data();
  for (int p = 0; p < P; ++p)
    steps::write_entries(p, keys.data(), values.data(), position.data(), id_coefficient.data(), cur_coefficient.data(),
                         dx.data(), batch.identifier_offsets.data(), ids, batch.cur_word_ids.data(), dim, scalar);
  for (int64_t e = P; e < entries; ++e)
    steps::pad_entry(e, keys.data(), values.data(), batch.identifier_offsets.data(), P, sentinel);
  // CUB's LSD radix sort is stable: so is this.
  std::vector<int> order(entries);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return keys[a] < keys[b]; });
  std::vector<int32_t> sorted_keys(entries), sorted_values(entries);
  for (int i = 0; i < entries; ++i) {
    sorted_keys[i] = keys[order[i]];
    sorted_values[i] = values[order[i]];
  }
  std::vector<int32_t> heads(entries), run_index(entries), rows(entries, -7), run_offsets(entries + 1, -7);
  for (int i = 0; i < entries; ++i) steps::mark_run_head(i, heads.data(), sorted_keys.data());
  std::exclusive_scan(heads.begin(), heads.end(), run_index.begin(), 0);
  int32_t run_count = -7;
  for (int i = 0; i < entries; ++i)
    steps::record_run_start(i, rows.data(), run_offsets.data(), &run_count, heads.data(), run_index.data(),
                            sorted_keys.data(), entries, sentinel);
  const size_t max_chunks = static_cast<size_t>(steps::max_chunks(entries));
  std::vector<int32_t> chunk_counts(entries, -7), chunk_offsets(entries), chunk_begin(max_chunks, -7),
      chunk_end(max_chunks, -7);
  for (int r = 0; r < entries; ++r) steps::count_chunks(r, chunk_counts.data(), run_offsets.data(), &run_count);
  std::exclusive_scan(chunk_counts.begin(), chunk_counts.end(), chunk_offsets.begin(), 0);
  int32_t chunk_count = -7;
  for (int r = 0; r < entries; ++r)
    steps::write_chunks(r, chunk_begin.data(), chunk_end.data(), &chunk_count, chunk_counts.data(),
                        chunk_offsets.data(), run_offsets.data(), entries);
  std::vector<float> chunk_sums(max_chunks * dim, -7.0f);
  for (int64_t index = 0; index < static_cast<int64_t>(max_chunks) * dim; ++index)
    steps::sum_chunk(index, chunk_sums.data(), chunk_begin.data(), chunk_end.data(), &chunk_count,
                     sorted_values.data(), position.data(), batch.identifier_offsets.data(), id_coefficient.data(),
                     cur_coefficient.data(), dx.data(), dim, scalar);
  Emulated out;
  out.gradient.assign(static_cast<size_t>(vocab) * dim, 0.0f);
  for (int64_t index = 0; index < static_cast<int64_t>(entries) * dim; ++index)
    steps::sum_run(index, out.gradient.data(), rows.data(), run_offsets.data(), &run_count, chunk_counts.data(),
                   chunk_offsets.data(), chunk_sums.data(), sorted_values.data(), position.data(),
                   batch.identifier_offsets.data(), id_coefficient.data(), cur_coefficient.data(), dx.data(), dim,
                   scalar);
  out.touched_rows.assign(rows.begin(), rows.begin() + run_count);
  return out;
}

void check(const Batch& batch, int vocab, int dim, BlendMode mode, uint64_t seed, const std::string& what) {
  Random random(seed);
  const int P = batch.positions();
  std::vector<float> dx(static_cast<size_t>(P) * dim);
  for (float& v : dx) v = static_cast<float>(random.uniform(-1, 1));
  std::vector<float> want(static_cast<size_t>(vocab) * dim, 0.0f);
  embedding_blend_backward(want.data(), dx.data(), batch.identifier_offsets.data(), batch.identifier_ids.data(),
                           batch.cur_word_ids.data(), P, dim, mode);
  // The reference: the CPU layer's terms in its order, a row of more than kChunkEntries summed
  // in chunks. Every row short enough to be one chunk must have the CPU layer's bits in it,
  // whatever other rows do.
  const std::vector<float> cpu = want;
  want = testing::chunked_embedding_gradient(batch, dx, vocab, dim, mode, steps::kChunkEntries);
  const std::vector<int64_t> terms = testing::terms_per_row(batch, vocab);
  for (int row = 0; row < vocab; ++row) {
    if (terms[row] > steps::kChunkEntries) continue;
    for (int d = 0; d < dim; ++d)
      ASSERT_EQ(want[static_cast<size_t>(row) * dim + d], cpu[static_cast<size_t>(row) * dim + d])
          << what << ": row " << row << " (" << terms[row] << " terms) is not the CPU layer's";
  }
  std::vector<int32_t> want_rows;
  const int64_t n = static_cast<int64_t>(batch.identifier_ids.size());
  embedding_touched_rows(want_rows, batch.identifier_ids.data(), n, batch.cur_word_ids.data(), P);
  for (const int64_t extra : {int64_t{0}, int64_t{1}, int64_t{37}}) {  // exact, then padded sorts
    const Emulated got = emulate_backward(batch, dx, vocab, dim, mode, n + extra);
    EXPECT_EQ(got.gradient, want) << what << ", " << extra << " padding entries: not the reference's bits";
    EXPECT_EQ(got.touched_rows, want_rows) << what << ", " << extra << " padding entries";
  }
}

TEST(EmbeddingBackwardSteps, MatchTheCpuLayerBitForBitExactAndPadded) {
  for (BlendMode mode : {BlendMode::mean, BlendMode::scalar_mean}) {
    const std::string name = to_string(mode);
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      Random random(seed);
      const int B = 1 + static_cast<int>(random.below(4)), T = 1 + static_cast<int>(random.below(9));
      const int V = 2 + static_cast<int>(random.below(30)), D = 1 + static_cast<int>(random.below(9));
      check(testing::random_batch(B, T, V, 3, random), V, D, mode, seed + 100, name + " seed " + std::to_string(seed));
    }
  }
}

// Runs at the chunk boundaries, cur words only: 64 (one chunk, summed directly), 65, 128 (two
// chunks), 129 (three) and a short one.
TEST(EmbeddingBackwardSteps, RunsAtTheChunkBoundaries) {
  Batch batch;
  batch.size = 1;
  batch.labels = {0};
  for (const auto& [row, count] : {std::pair{0, 64}, std::pair{1, 65}, std::pair{2, 128}, std::pair{3, 129},
                                   std::pair{4, 5}})
    batch.cur_word_ids.insert(batch.cur_word_ids.end(), count, row);
  batch.seq_len = static_cast<int>(batch.cur_word_ids.size());
  batch.identifier_offsets.assign(batch.cur_word_ids.size() + 1, 0);
  for (BlendMode mode : {BlendMode::mean, BlendMode::scalar_mean})
    check(batch, 5, 4, mode, 12, std::string("chunk boundaries, ") + to_string(mode));
}

// Frequent rows: row 0 spans several chunks, row 1 is exactly one full chunk, row 2 is short.
TEST(EmbeddingBackwardSteps, FrequentRowsAreSummedInFixedChunks) {
  for (BlendMode mode : {BlendMode::mean, BlendMode::scalar_mean}) {
    Random random(7);
    Batch batch;
    batch.size = 4;
    batch.seq_len = 60;
    batch.labels = {0, 1, 2, 0};
    batch.identifier_offsets.push_back(0);
    for (int p = 0; p < batch.positions(); ++p) {
      batch.cur_word_ids.push_back(p < steps::kChunkEntries ? 1 : 0);  // row 1: exactly one chunk of cur words
      if (p % 3 != 0)
        for (int j = 0; j < 1 + p % 2; ++j) batch.identifier_ids.push_back(p % 7 == 0 ? 2 : 0);
      batch.identifier_offsets.push_back(static_cast<int32_t>(batch.identifier_ids.size()));
    }
    check(batch, 5, 3, mode, 11, std::string("frequent rows, ") + to_string(mode));
  }
}

// The forward: every (p, d) (mean) or position (scalar-mean) step on the host against the float
// CPU layer, bit for bit, on random shapes with empty identifier lists.
TEST(EmbeddingForwardSteps, MatchTheCpuLayerBitForBit) {
  for (BlendMode mode : {BlendMode::mean, BlendMode::scalar_mean}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      Random random(seed + 50);
      const int B = 1 + static_cast<int>(random.below(4)), T = 1 + static_cast<int>(random.below(9));
      const int V = 2 + static_cast<int>(random.below(30)), D = 1 + static_cast<int>(random.below(9));
      const Batch batch = testing::random_batch(B, T, V, 3, random);
      std::vector<float> table(static_cast<size_t>(V) * D);
      for (float& v : table) v = static_cast<float>(random.uniform(-1, 1));
      const int P = batch.positions();
      std::vector<float> want(static_cast<size_t>(P) * D), got(want.size(), -7.0f);
      const int32_t* ids = batch.identifier_ids.empty() ? nullptr : batch.identifier_ids.data();
      embedding_blend_forward(want.data(), batch.identifier_offsets.data(), ids, batch.cur_word_ids.data(),
                              table.data(), P, D, mode);
      if (mode == BlendMode::mean) {
        for (int64_t index = 0; index < static_cast<int64_t>(P) * D; ++index)
          steps::blend_mean_at(index, got.data(), batch.identifier_offsets.data(), ids, batch.cur_word_ids.data(),
                               table.data(), D);
      } else {
        for (int p = 0; p < P; ++p)
          steps::blend_scalar_at(p, got.data(), batch.identifier_offsets.data(), ids, batch.cur_word_ids.data(),
                                 table.data(), D);
      }
      EXPECT_EQ(got, want) << to_string(mode) << " seed " << seed << ": not the CPU layer's bits";
    }
  }
}

TEST(EmbeddingBackwardSteps, EdgeCases) {
  for (BlendMode mode : {BlendMode::mean, BlendMode::scalar_mean}) {
    Batch empty;  // no identifier ids at all: only cur words, one row repeated
    empty.size = 1;
    empty.seq_len = 4;
    empty.identifier_offsets.assign(5, 0);
    empty.cur_word_ids = {3, 1, 3, 0};
    empty.labels = {0};
    check(empty, 5, 3, mode, 1, "no identifier ids");
    Batch last_row = empty;  // every entry on row V - 1, the one just below the sentinel
    last_row.identifier_offsets = {0, 2, 2, 5, 6};
    last_row.identifier_ids.assign(6, 4);
    last_row.cur_word_ids = {4, 4, 4, 4};
    check(last_row, 5, 2, mode, 2, "every entry on row V - 1");
    Batch one;  // one position, one id, V = 1
    one.size = 1;
    one.seq_len = 1;
    one.identifier_offsets = {0, 1};
    one.identifier_ids = {0};
    one.cur_word_ids = {0};
    one.labels = {0};
    check(one, 1, 1, mode, 3, "V = 1, P = 1");
  }
}

// The CPU layer on several threads (a batch of at least 4096 positions is shared): the forward
// splits the positions, the backward the table's rows, and each row sums its terms in position
// order, so every thread count gives one thread's bits. A small vocabulary makes rows collide
// across the threads' position ranges; D = 3 puts 21 rows in a thread's block of the table, D =
// 32 two.
TEST(EmbeddingBlendThreads, EveryThreadCountGivesOneThreadsBits) {
  for (BlendMode mode : {BlendMode::mean, BlendMode::scalar_mean})
    for (const int D : {3, 32}) {
      Random random(D + 5);
      const int V = 97, P_min = 4096;
      const Batch batch = testing::random_batch(16, 400, V, 3, random);
      const int P = batch.positions();
      ASSERT_GE(P, P_min);
      std::vector<float> table(static_cast<size_t>(V) * D), dx(static_cast<size_t>(P) * D);
      for (float& v : table) v = static_cast<float>(random.uniform(-1, 1));
      for (float& v : dx) v = static_cast<float>(random.uniform(-1, 1));
      auto run = [&](int threads, std::vector<float>& x, std::vector<float>& gradient) {
        x.assign(static_cast<size_t>(P) * D, -7.0f);
        gradient.assign(table.size(), 0.5f);  // += onto what is there
        embedding_blend_forward(x.data(), batch.identifier_offsets.data(), batch.identifier_ids.data(),
                                batch.cur_word_ids.data(), table.data(), P, D, mode, threads);
        embedding_blend_backward(gradient.data(), dx.data(), batch.identifier_offsets.data(),
                                 batch.identifier_ids.data(), batch.cur_word_ids.data(), P, D, mode, threads);
      };
      std::vector<float> x1, gradient1, x, gradient;
      run(1, x1, gradient1);
      for (const int threads : {2, 3}) {
        run(threads, x, gradient);
        const std::string what = std::string(to_string(mode)) + " D " + std::to_string(D) + ", " +
                                 std::to_string(threads) + " threads";
        EXPECT_EQ(0, std::memcmp(x.data(), x1.data(), x.size() * sizeof(float))) << what << ": x";
        EXPECT_EQ(0, std::memcmp(gradient.data(), gradient1.data(), gradient.size() * sizeof(float)))
            << what << ": the gradient";
      }
    }
}

}  // namespace
}  // namespace enhanced
