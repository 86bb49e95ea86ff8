// Epoch order, fill_batch and the BatchLoader (sequential vs prefetch, drop_last, resume).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "data_test_util.h"
#include "enhanced/common.h"
#include "enhanced/jsonl.h"
#include "enhanced/loader.h"

namespace enhanced {
namespace {

using namespace enhanced::test_util;

bool is_permutation_of_n(const std::vector<int64_t>& v, int64_t n) {
  std::vector<int64_t> sorted = v, iota(static_cast<size_t>(n));
  std::sort(sorted.begin(), sorted.end());
  std::iota(iota.begin(), iota.end(), int64_t{0});
  return sorted == iota;
}

TEST(EpochOrder, ShuffleIsAPermutationThatRepeatsWithTheSeed) {
  for (int64_t n : {0, 1, 2, 10, 1000}) {
    auto a = epoch_order(n, true, 42, 3);
    EXPECT_TRUE(is_permutation_of_n(a, n)) << n;
    EXPECT_EQ(a, epoch_order(n, true, 42, 3));
  }
  auto e0 = epoch_order(1000, true, 42, 0), e1 = epoch_order(1000, true, 42, 1);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, epoch_order(1000, true, 43, 0));
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), int64_t{0});
  EXPECT_NE(e0, identity);
  EXPECT_EQ(epoch_order(1000, false, 42, 5), identity);
}

TEST(EpochOrder, IsPinned) {
  // The order is defined by splitmix64 + Fisher-Yates, not by the standard library: it must not
  // change between builds, or resumed runs would see other batches.
  EXPECT_EQ(epoch_order(10, true, 0, 0), (std::vector<int64_t>{9, 1, 7, 8, 0, 5, 3, 6, 2, 4}));
  EXPECT_EQ(epoch_order(10, true, 12345, 7), (std::vector<int64_t>{6, 2, 4, 1, 0, 8, 3, 7, 5, 9}));
}

TEST(EpochOrder, IsRoughlyUniform) {
  // Where sample 0 lands over many epochs: every slot of 8 should be hit about 1/8 of the time.
  std::vector<int> hits(8, 0);
  for (int64_t e = 0; e < 8000; ++e) {
    auto o = epoch_order(8, true, 9, e);
    ++hits[static_cast<size_t>(std::find(o.begin(), o.end(), 0) - o.begin())];
  }
  for (int h : hits) EXPECT_NEAR(h, 1000, 150);
}

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir();
    samples_ = random_samples(45, 6, 77);
    write_text(dir_ + "/in.jsonl", samples_jsonl(samples_));
    convert_jsonl_to_ebin(dir_ + "/in.jsonl", dir_ + "/d.ebin", 6);
    ds_ = Dataset::open(dir_ + "/d.ebin");
  }
  // All batches of one epoch, copied.
  std::vector<Batch> epoch(BatchLoader& loader, int64_t e, int64_t first = 0) {
    loader.start_epoch(e, first);
    std::vector<Batch> out;
    while (const Batch* b = loader.next()) out.push_back(*b);
    EXPECT_EQ(loader.next(), nullptr);  // stays at the end
    return out;
  }
  std::string dir_;
  std::vector<RaggedSample> samples_;
  Dataset ds_;
};

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].size, b[i].size) << i;
    EXPECT_EQ(a[i].seq_len, b[i].seq_len) << i;
    EXPECT_EQ(a[i].identifier_offsets, b[i].identifier_offsets) << i;
    EXPECT_EQ(a[i].identifier_ids, b[i].identifier_ids) << i;
    EXPECT_EQ(a[i].cur_word_ids, b[i].cur_word_ids) << i;
    EXPECT_EQ(a[i].labels, b[i].labels) << i;
    EXPECT_EQ(a[i].sample_indices, b[i].sample_indices) << i;
  }
}

TEST_F(LoaderTest, PrefetchGivesTheSequentialBatches) {
  for (bool shuffle : {false, true}) {
    for (bool drop_last : {false, true}) {
      for (int bs : {1, 7, 45, 64}) {
        LoaderOptions opt;
        opt.batch_size = bs;
        opt.shuffle = shuffle;
        opt.drop_last = drop_last;
        opt.seed = 11;
        opt.prefetch = false;
        BatchLoader seq(ds_, opt);
        opt.prefetch = true;
        BatchLoader pre(ds_, opt);
        const int64_t expect_batches = drop_last ? 45 / bs : (45 + bs - 1) / bs;
        EXPECT_EQ(seq.batches_per_epoch(), expect_batches);
        EXPECT_EQ(pre.batches_per_epoch(), expect_batches);
        for (int64_t e = 0; e < 3; ++e) {
          auto a = epoch(seq, e), b = epoch(pre, e);
          SCOPED_TRACE(::testing::Message() << "shuffle " << shuffle << " drop_last " << drop_last << " bs " << bs
                                          << " epoch " << e);
          ASSERT_EQ(static_cast<int64_t>(a.size()), expect_batches);
          expect_same(a, b);
          int64_t rows = 0;
          for (const auto& batch : a) rows += batch.size;
          EXPECT_EQ(rows, drop_last ? 45 / bs * bs : 45);
          if (!drop_last && !a.empty()) {
            EXPECT_EQ(a.back().size, 45 - (expect_batches - 1) * bs);
          }
        }
      }
    }
  }
}

TEST_F(LoaderTest, ResumeMidEpochContinuesTheSameOrder) {
  for (bool prefetch : {false, true}) {
    for (bool drop_last : {false, true}) {
      LoaderOptions opt;
      opt.batch_size = 4;
      opt.seed = 5;
      opt.drop_last = drop_last;
      opt.prefetch = prefetch;
      BatchLoader full(ds_, opt);
      auto all = epoch(full, 2);
      for (int64_t first : {int64_t{0}, int64_t{1}, int64_t{5}, static_cast<int64_t>(all.size())}) {
        BatchLoader resumed(ds_, opt);
        auto tail = epoch(resumed, 2, first);
        expect_same(tail, std::vector<Batch>(all.begin() + first, all.end()));
      }
      // Abandoning an epoch half-way and starting another gives that epoch from its start.
      BatchLoader loader(ds_, opt);
      loader.start_epoch(1);
      loader.next();
      loader.next();
      auto again = epoch(loader, 2, 3);
      expect_same(again, std::vector<Batch>(all.begin() + 3, all.end()));
    }
  }
}

TEST_F(LoaderTest, EpochsDifferAndCoverEverySample) {
  LoaderOptions opt;
  opt.batch_size = 10;
  opt.seed = 1;
  BatchLoader loader(ds_, opt);
  auto a = epoch(loader, 0), b = epoch(loader, 1);
  std::vector<int64_t> ia, ib;
  for (const auto& x : a) ia.insert(ia.end(), x.sample_indices.begin(), x.sample_indices.end());
  for (const auto& x : b) ib.insert(ib.end(), x.sample_indices.begin(), x.sample_indices.end());
  EXPECT_TRUE(is_permutation_of_n(ia, 45));
  EXPECT_TRUE(is_permutation_of_n(ib, 45));
  EXPECT_NE(ia, ib);
  EXPECT_EQ(ia, epoch_order(45, true, 1, 0));
}

TEST_F(LoaderTest, NextWithoutStartEpochBeginsEpochZero) {
  LoaderOptions opt;
  opt.batch_size = 9;
  opt.seed = 4;
  BatchLoader a(ds_, opt), b(ds_, opt);
  const Batch* first = a.next();
  ASSERT_NE(first, nullptr);
  b.start_epoch(0);
  EXPECT_EQ(first->sample_indices, b.next()->sample_indices);
}

TEST_F(LoaderTest, FillBatchReusesCapacity) {
  Batch batch;
  std::vector<int64_t> idx(45);
  std::iota(idx.begin(), idx.end(), int64_t{0});
  fill_batch(batch, ds_, idx.data(), 45);
  const size_t cap_ids = batch.identifier_ids.capacity(), cap_off = batch.identifier_offsets.capacity();
  const int32_t* data = batch.identifier_ids.data();
  fill_batch(batch, ds_, idx.data() + 3, 2);
  EXPECT_EQ(batch.size, 2);
  EXPECT_EQ(batch.identifier_offsets.size(), 13u);
  EXPECT_EQ(batch.identifier_ids.capacity(), cap_ids);
  EXPECT_EQ(batch.identifier_offsets.capacity(), cap_off);
  EXPECT_EQ(batch.identifier_ids.data(), data);
  EXPECT_EQ(batch.sample_indices, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(batch.labels[1], samples_[4].label);
}

TEST_F(LoaderTest, BadArgumentsAreErrors) {
  LoaderOptions opt;
  opt.batch_size = 0;
  EXPECT_THROW(BatchLoader(ds_, opt).next(), Error);
  opt.batch_size = 10;
  BatchLoader loader(ds_, opt);
  EXPECT_THROW(loader.start_epoch(0, 6), Error);
  EXPECT_THROW(loader.start_epoch(0, -1), Error);
  Batch batch;
  int64_t bad = 45;
  EXPECT_THROW(fill_batch(batch, ds_, &bad, 1), Error);
}

}  // namespace
}  // namespace enhanced
