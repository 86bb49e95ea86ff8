// Fuzzes Dataset::open (header, section bounds, offsets, ids, labels) and then walks every
// sample as the loader does: every position's three fields, and each sample into a batch.
// Whatever open() accepts must be safe to read everywhere. The custom mutator below keeps the
// header coherent some of the time, so that inputs reach past the header checks.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "enhanced/batch.h"
#include "enhanced/common.h"
#include "enhanced/dataset.h"
#include "enhanced/loader.h"
#include "fuzz_file.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

using enhanced::DatasetHeader;

template <class T>
T get(const std::vector<uint8_t>& file, uint64_t offset) {
  T value;
  std::memcpy(&value, file.data() + offset, sizeof value);
  return value;
}

template <class T>
void put(std::vector<uint8_t>& file, uint64_t offset, T value) {
  std::memcpy(file.data() + offset, &value, sizeof value);
}

// Makes the sections agree with the header: each offset array spreads its ids evenly over the
// positions (from 0, non-decreasing, to the count), ids and labels are folded into small ranges,
// max_token_id and num_labels are the data's.
void make_coherent(std::vector<uint8_t>& file, DatasetHeader& h) {
  const uint64_t np = h.num_samples * h.seq_len;
  int32_t max_id = -1;
  const auto fold_ids = [&](uint64_t offset, uint64_t count) {
    for (uint64_t k = 0; k < count; ++k) {
      const int32_t id = get<int32_t>(file, offset + 4 * k) & 0xff;
      put(file, offset + 4 * k, id);
      max_id = std::max(max_id, id);
    }
  };
  const auto spread = [&](uint64_t offset, uint64_t count) {
    for (uint64_t p = 0; p <= np; ++p) put<uint64_t>(file, offset + 8 * p, np ? count * p / np : 0);
  };
  spread(h.identifier_offsets_offset, h.num_identifier_ids);
  spread(h.auxiliary_offsets_offset, h.num_auxiliary_ids);
  fold_ids(h.identifier_ids_offset, h.num_identifier_ids);
  fold_ids(h.auxiliary_ids_offset, h.num_auxiliary_ids);
  fold_ids(h.cur_word_offset, np);
  h.max_token_id = max_id;
  int32_t max_label = -1;
  for (uint64_t s = 0; (h.flags & enhanced::kDatasetUnlabeled) == 0 && s < h.num_samples; ++s) {
    const int32_t label = get<int32_t>(file, h.labels_offset + 4 * s) & 0x7;
    put(file, h.labels_offset + 4 * s, label);
    max_label = std::max(max_label, label);
  }
  h.num_labels = static_cast<uint32_t>(max_label + 1);
}

// One header field changed (a count, T, the unlabeled flag) and the rest laid out and filled to
// agree with it; a quarter of the time one thing broken again (a section moved by 8 bytes onto
// its neighbour, a reserved byte set), so the checks of a coherent file's layout are exercised too.
std::vector<uint8_t> coherent_mutation(const uint8_t* data, size_t size, std::minstd_rand& rng) {
  DatasetHeader h;
  std::memcpy(&h, data, sizeof h);
  switch (rng() % 5) {
    case 0: h.num_samples = rng(); break;
    case 1: h.seq_len = static_cast<uint32_t>(rng()); break;
    case 2: h.num_identifier_ids = rng(); break;
    case 3: h.num_auxiliary_ids = rng(); break;
    default: h.flags ^= enhanced::kDatasetUnlabeled;
  }
  std::memcpy(h.magic, enhanced::kDatasetMagic, sizeof h.magic);
  h.version = enhanced::kDatasetVersion;
  h.flags &= enhanced::kDatasetUnlabeled;
  std::memset(h.reserved, 0, sizeof h.reserved);
  h.num_samples %= 8;  // small files: most fit libFuzzer's max_len
  h.seq_len = 1 + h.seq_len % 8;
  const bool no_positions = h.num_samples == 0;  // then both offset arrays are [0]: no ids
  h.num_identifier_ids = no_positions ? 0 : h.num_identifier_ids % 64;
  h.num_auxiliary_ids = no_positions ? 0 : h.num_auxiliary_ids % 64;
  enhanced::lay_out_sections(h);
  std::vector<uint8_t> file(data, data + std::min<size_t>(size, h.file_size));
  file.resize(h.file_size);
  make_coherent(file, h);
  if (rng() % 4 == 0) {
    uint64_t* offsets[] = {&h.cur_word_offset, &h.identifier_offsets_offset, &h.identifier_ids_offset,
                           &h.auxiliary_offsets_offset, &h.auxiliary_ids_offset};
    if (rng() % 2) *offsets[rng() % 5] -= 8;
    else h.reserved[rng() % sizeof h.reserved] = static_cast<uint8_t>(1 + rng() % 255);
  }
  std::memcpy(file.data(), &h, sizeof h);
  return file;
}

}  // namespace

// A third of the time (and for inputs shorter than a header) libFuzzer's own byte mutations;
// else a coherent header mutation, when its file fits in max_size.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::minstd_rand rng(seed);
  if (size < sizeof(DatasetHeader) || rng() % 3 == 0) return LLVMFuzzerMutate(data, size, max_size);
  const std::vector<uint8_t> file = coherent_mutation(data, size, rng);
  if (file.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, file.data(), file.size());
  return file.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace enhanced;
  try {
    const Dataset dataset = Dataset::open(fuzz::input_file().hold(data, size));
    int64_t sum = 0;
    for (int64_t s = 0; s < dataset.num_samples(); ++s) {
      sum += (dataset.has_labels() ? dataset.label(s) : 0) + static_cast<int64_t>(dataset.identifier_count(s));
      for (int t = 0; t < dataset.seq_len(); ++t) {
        for (int32_t id : dataset.identifier(s, t)) sum += id;
        for (int32_t id : dataset.auxiliary(s, t)) sum += id;
        sum += dataset.cur_word(s, t);
      }
      Batch batch;
      fill_batch(batch, dataset, &s, 1);
    }
    dataset.check_fits_model(static_cast<int64_t>(dataset.max_model_token_id()) + 1, dataset.num_labels());
    volatile int64_t keep = sum;
    (void)keep;
  } catch (const Error&) {
  }
  return 0;
}
