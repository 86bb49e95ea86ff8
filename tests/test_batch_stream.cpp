// Dataset::view and StreamedBatches: a host's batches, one .ebin image at a time, read in its
// order and sizes, equal to the loader's in-order batches of the same set, and checked one by one.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <vector>

#include "data_test_util.h"
#include "enhanced/batch_stream.h"
#include "enhanced/jsonl.h"
#include "enhanced/loader.h"

namespace enhanced {
namespace {

using namespace enhanced::test_util;

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The images a host would hand over, from memory; a pass ends after the last. Counts the calls.
class VectorImages final : public BatchImages {
 public:
  explicit VectorImages(std::vector<std::vector<uint8_t>> images) : images_(std::move(images)) {}
  std::span<const uint8_t> next_image(bool new_pass) override {
    if (new_pass) next_ = 0, ++passes;
    if (next_ == interrupt_at) {
      interrupt_at = SIZE_MAX;
      interrupted_ = true;
      return {};
    }
    interrupted_ = false;
    if (next_ == images_.size() || passes > one_shot_after) return {};
    return images_[next_++];
  }
  bool interrupted() const override { return interrupted_; }
  int passes = 0;
  size_t interrupt_at = SIZE_MAX;  // the index of the image whose read a Ctrl-C interrupts, once
  int one_shot_after = INT_MAX;    // passes after it give nothing (a generator read again)

 private:
  std::vector<std::vector<uint8_t>> images_;
  size_t next_ = 0;
  bool interrupted_ = false;
};

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir();
    samples_ = random_samples(45, 6, 77, 5000, 7);
    write_text(dir_ + "/all.jsonl", samples_jsonl(samples_));
    convert_jsonl_to_ebin(dir_ + "/all.jsonl", dir_ + "/all.ebin", 6);
    for (size_t start = 0; start < samples_.size(); start += 7) {  // batches of 7: 6 whole, one of 3
      const std::vector<RaggedSample> part(samples_.begin() + static_cast<long>(start),
                                           samples_.begin() + static_cast<long>(std::min(start + 7, samples_.size())));
      images_.push_back(image_of(part));
    }
  }
  std::vector<uint8_t> image_of(const std::vector<RaggedSample>& part) {
    write_text(dir_ + "/part.jsonl", samples_jsonl(part));
    convert_jsonl_to_ebin(dir_ + "/part.jsonl", dir_ + "/part.ebin", 6);
    return file_bytes(dir_ + "/part.ebin");
  }
  StreamShape shape() const { return StreamShape{6, 5001, 7, 7}; }
  std::string dir_;
  std::vector<RaggedSample> samples_;
  std::vector<std::vector<uint8_t>> images_;
};

TEST(DatasetView, ReadsTheCallersBytesWithoutACopy) {
  const std::string dir = scratch_dir();
  write_text(dir + "/d.jsonl", samples_jsonl(random_samples(5, 3, 1)));
  convert_jsonl_to_ebin(dir + "/d.jsonl", dir + "/d.ebin", 3);
  const std::vector<uint8_t> image = file_bytes(dir + "/d.ebin");
  const Dataset view = Dataset::view(image, "<x>");
  EXPECT_EQ(static_cast<const void*>(&view.header()), static_cast<const void*>(image.data()));
  const Dataset file = Dataset::open(dir + "/d.ebin");
  ASSERT_EQ(view.num_samples(), file.num_samples());
  for (int64_t s = 0; s < file.num_samples(); ++s) EXPECT_EQ(view.label(s), file.label(s));
  EXPECT_NE(error_of([&] { Dataset::view(std::span(image).subspan(0, 100), "<x>"); }).find("<x>"), std::string::npos);
}

TEST_F(StreamTest, PassesGiveTheLoadersInOrderBatchesEachEpoch) {
  VectorImages images(images_);
  StreamedBatches stream(images, shape(), 0, "x");
  EXPECT_EQ(stream.batches_per_epoch(), 0);
  const Dataset all = Dataset::open(dir_ + "/all.ebin");
  BatchLoader loader(all, LoaderOptions{7, false, 0, false, false});
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    stream.start_epoch(epoch);
    loader.start_epoch(epoch);
    int batches = 0;
    while (const Batch* expected = loader.next()) {
      const Batch* got = stream.next();
      ASSERT_NE(got, nullptr) << batches;
      EXPECT_EQ(got->size, expected->size);
      EXPECT_EQ(got->identifier_offsets, expected->identifier_offsets);
      EXPECT_EQ(got->identifier_ids, expected->identifier_ids);
      EXPECT_EQ(got->cur_word_ids, expected->cur_word_ids);
      EXPECT_EQ(got->labels, expected->labels);
      ++batches;
    }
    EXPECT_EQ(stream.next(), nullptr);
    EXPECT_EQ(batches, 7);
    EXPECT_FALSE(stream.ran_out());
  }
  EXPECT_EQ(images.passes, 2);  // the first at construction, the second for epoch 2
}

TEST_F(StreamTest, StepsPerEpochGoOnAcrossEpochsAndRunOutWhenTheDataEnds) {
  VectorImages images(images_);
  StreamedBatches stream(images, shape(), 3, "x");
  std::vector<int> sizes;
  for (int64_t epoch = 0; epoch < 3 && !stream.ran_out(); ++epoch) {
    stream.start_epoch(epoch);
    while (const Batch* batch = stream.next()) sizes.push_back(batch->size);
  }
  EXPECT_EQ(sizes, (std::vector<int>{7, 7, 7, 7, 7, 7, 3}));  // one pass: 7 of the 9 steps planned
  EXPECT_TRUE(stream.ran_out());
  EXPECT_EQ(images.passes, 1);
}

TEST_F(StreamTest, EachBatchIsCheckedAndItsErrorsNameIt) {
  std::vector<RaggedSample> bad(samples_.begin(), samples_.begin() + 2);
  bad[1].identifier[4] = {5001};
  std::vector<std::vector<uint8_t>> with_bad_id = {images_[0], images_[1], image_of(bad)};
  VectorImages images(with_bad_id);
  StreamedBatches stream(images, shape(), 0, "x");
  stream.start_epoch(0);
  stream.next();
  stream.next();
  EXPECT_EQ(error_of([&] { stream.next(); }).rfind("x: batch 2: sample 1: position 4: field 0", 0), 0u);

  std::vector<std::vector<uint8_t>> too_big = {image_of(std::vector<RaggedSample>(samples_.begin(), samples_.begin() + 8))};
  VectorImages big(too_big);
  EXPECT_NE(error_of([&] { StreamedBatches(big, shape(), 0, "x"); }).find("x: batch 0: 8 samples"), std::string::npos);
  VectorImages none(std::vector<std::vector<uint8_t>>{});
  EXPECT_NE(error_of([&] { StreamedBatches(none, shape(), 0, "x"); }).find("x: the stream gave no batches"),
            std::string::npos);
  StreamShape other_t = shape();
  other_t.seq_len = 5;
  VectorImages images2(images_);
  EXPECT_NE(error_of([&] { StreamedBatches(images2, other_t, 0, "x"); }).find("x: batch 0: T = 6"), std::string::npos);
}

TEST_F(StreamTest, AStreamCannotBeReplayedToAResumedPosition) {
  VectorImages images(images_);
  StreamedBatches stream(images, shape(), 3, "x");
  EXPECT_NE(error_of([&] { stream.start_epoch(1, 0); }).find("cannot be replayed"), std::string::npos);
  EXPECT_NE(error_of([&] { stream.start_epoch(0, 2); }).find("cannot be replayed"), std::string::npos);
}

TEST_F(StreamTest, AValidationStreamBeginsAPassEachEpochAndTakesAtMostItsSteps) {
  VectorImages images(images_);
  StreamedBatches stream(images, shape(), 2, "validation_data", true);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    stream.start_epoch(epoch);
    std::vector<int32_t> labels;
    while (const Batch* batch = stream.next()) labels.insert(labels.end(), batch->labels.begin(), batch->labels.end());
    ASSERT_EQ(labels.size(), 14u) << epoch;  // the same first two batches each time, as Keras's validation_steps
    for (size_t i = 0; i < labels.size(); ++i) EXPECT_EQ(labels[i], samples_[i].label) << epoch << " " << i;
  }
  EXPECT_EQ(images.passes, 3);

  VectorImages once(images_);
  once.one_shot_after = 1;
  StreamedBatches one_shot(once, shape(), 0, "validation_data", true);
  one_shot.start_epoch(0);
  while (one_shot.next()) {
  }
  one_shot.start_epoch(1);
  EXPECT_EQ(error_of([&] { one_shot.next(); }).rfind("validation_data: its pass 2 gave no batches", 0), 0u);
}

TEST_F(StreamTest, AnInterruptWhileTheHostMakesABatchIsNotTheDataEnding) {
  VectorImages images(images_);
  images.interrupt_at = 2;
  StreamedBatches stream(images, shape(), 0, "x");
  stream.start_epoch(0);
  ASSERT_NE(stream.next(), nullptr);
  ASSERT_NE(stream.next(), nullptr);
  EXPECT_EQ(stream.next(), nullptr);
  EXPECT_TRUE(stream.interrupted());
  EXPECT_FALSE(stream.ran_out());
}

}  // namespace
}  // namespace enhanced
