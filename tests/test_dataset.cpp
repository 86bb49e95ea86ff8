// .ebin reader and JSONL <-> .ebin conversion through the library API.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstddef>
#include <cstring>
#include <filesystem>

#include "data_test_util.h"
#include "enhanced/common.h"
#include "enhanced/dataset.h"
#include "enhanced/demo.h"
#include "enhanced/jsonl.h"
#include "enhanced/loader.h"

namespace enhanced {
namespace {

using namespace enhanced::test_util;

// Writes `samples` as JSONL and converts them, returning the .ebin path.
std::string make_ebin(const std::string& dir, const std::vector<RaggedSample>& samples, int T) {
  write_text(dir + "/in.jsonl", samples_jsonl(samples));
  convert_jsonl_to_ebin(dir + "/in.jsonl", dir + "/data.ebin", T);
  return dir + "/data.ebin";
}

TEST(Dataset, RoundTripJsonlEbinJsonlIsByteExact) {
  const std::string dir = scratch_dir();
  for (int T : {1, 3, 17}) {
    auto samples = random_samples(53, T, static_cast<uint32_t>(T) * 7u + 1u);
    const std::string text = samples_jsonl(samples);
    write_text(dir + "/in.jsonl", text);
    ConvertStats st = convert_jsonl_to_ebin(dir + "/in.jsonl", dir + "/data.ebin", T);
    EXPECT_EQ(st.samples, 53);
    EXPECT_EQ(st.seq_len, T);
    EXPECT_EQ(st.bytes_written, std::filesystem::file_size(dir + "/data.ebin"));
    ConvertStats back = convert_ebin_to_jsonl(dir + "/data.ebin", dir + "/out.jsonl");
    EXPECT_EQ(back.samples, 53);
    EXPECT_EQ(read_text(dir + "/out.jsonl"), text) << "T = " << T;
  }
  EXPECT_EQ(list_dir(dir), (std::vector<std::string>{"data.ebin", "in.jsonl", "out.jsonl"}));
}

TEST(Dataset, FieldsMatchTheInput) {
  const std::string dir = scratch_dir();
  const int T = 11;
  auto samples = random_samples(40, T, 99);
  Dataset ds = Dataset::open(make_ebin(dir, samples, T));
  ASSERT_EQ(ds.num_samples(), 40);
  ASSERT_EQ(ds.seq_len(), T);
  int max_label = 0;
  int32_t max_id = -1;
  uint64_t total_ident = 0;
  for (int64_t s = 0; s < 40; ++s) {
    const auto& in = samples[static_cast<size_t>(s)];
    EXPECT_EQ(ds.label(s), in.label);
    max_label = std::max(max_label, in.label);
    uint64_t count = 0;
    for (int t = 0; t < T; ++t) {
      auto id = ds.identifier(s, t);
      auto aux = ds.auxiliary(s, t);
      EXPECT_EQ(std::vector<int32_t>(id.begin(), id.end()), in.identifier[t]);
      EXPECT_EQ(std::vector<int32_t>(aux.begin(), aux.end()), in.auxiliary[t]);
      EXPECT_EQ(ds.cur_word(s, t), in.cur[t]);
      count += id.size();
      for (int32_t x : in.identifier[t]) max_id = std::max(max_id, x);
      for (int32_t x : in.auxiliary[t]) max_id = std::max(max_id, x);
      max_id = std::max(max_id, in.cur[t]);
    }
    EXPECT_EQ(ds.identifier_count(s), count);
    total_ident += count;
  }
  EXPECT_EQ(ds.num_labels(), max_label + 1);
  EXPECT_EQ(ds.max_token_id(), max_id);
  EXPECT_EQ(ds.header().num_identifier_ids, total_ident);
  // Sections are 8-byte aligned.
  for (uint64_t off : {ds.header().labels_offset, ds.header().cur_word_offset, ds.header().identifier_offsets_offset,
                       ds.header().identifier_ids_offset, ds.header().auxiliary_offsets_offset,
                       ds.header().auxiliary_ids_offset})
    EXPECT_EQ(off % 8, 0u);
}

TEST(Dataset, BatchesEqualTheInput) {
  const std::string dir = scratch_dir();
  const int T = 9;
  auto samples = random_samples(37, T, 5);
  Dataset ds = Dataset::open(make_ebin(dir, samples, T));
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.shuffle = true;
  opt.seed = 3;
  BatchLoader loader(ds, opt);
  loader.start_epoch(0);
  std::vector<int> seen(37, 0);
  while (const Batch* b = loader.next()) {
    ASSERT_EQ(b->seq_len, T);
    ASSERT_EQ(b->identifier_offsets.size(), static_cast<size_t>(b->positions() + 1));
    ASSERT_EQ(b->cur_word_ids.size(), static_cast<size_t>(b->positions()));
    ASSERT_EQ(b->identifier_offsets.back(), static_cast<int32_t>(b->identifier_ids.size()));
    for (int r = 0; r < b->size; ++r) {
      const auto& in = samples[static_cast<size_t>(b->sample_indices[r])];
      ++seen[static_cast<size_t>(b->sample_indices[r])];
      EXPECT_EQ(b->labels[r], in.label);
      for (int t = 0; t < T; ++t) {
        const int p = r * T + t;
        std::vector<int32_t> ids(b->identifier_ids.begin() + b->identifier_offsets[p],
                                 b->identifier_ids.begin() + b->identifier_offsets[p + 1]);
        EXPECT_EQ(ids, in.identifier[t]);
        EXPECT_EQ(b->cur_word_ids[p], in.cur[t]);
      }
    }
  }
  EXPECT_EQ(seen, std::vector<int>(37, 1));
}

TEST(Dataset, MoveKeepsTheMapping) {
  const std::string dir = scratch_dir();
  auto samples = random_samples(5, 4, 1);
  Dataset a = Dataset::open(make_ebin(dir, samples, 4));
  Dataset b(std::move(a));
  EXPECT_EQ(b.num_samples(), 5);
  Dataset c;
  c = std::move(b);
  EXPECT_EQ(c.label(4), samples[4].label);
  c = Dataset::open(dir + "/data.ebin");  // replacing an open mapping unmaps the old one
  EXPECT_EQ(c.cur_word(2, 3), samples[2].cur[3]);
  // What open() derived moves with the data (a moved-into validation set sizes the vocabulary).
  const Dataset opened = Dataset::open(dir + "/data.ebin");
  EXPECT_GE(opened.max_model_token_id(), 0);
  EXPECT_EQ(c.max_model_token_id(), opened.max_model_token_id());
  // An in-memory image moves as a mapping does: its buffer, not a copy.
  const std::string bytes = read_text(dir + "/data.ebin");
  Dataset d = Dataset::from_bytes(std::vector<uint8_t>(bytes.begin(), bytes.end()), "image");
  c = std::move(d);
  EXPECT_EQ(c.path(), "image");
  EXPECT_EQ(c.cur_word(2, 3), samples[2].cur[3]);
  EXPECT_EQ(c.max_model_token_id(), opened.max_model_token_id());
}

TEST(Dataset, CheckFitsModelNamesSamplePositionAndField) {
  const std::string dir = scratch_dir();
  auto samples = random_samples(6, 5, 2, /*max_id=*/50, /*num_labels=*/3);
  samples[4].cur[3] = 700;
  samples[2].label = 2;
  Dataset ds = Dataset::open(make_ebin(dir, samples, 5));
  EXPECT_NO_THROW(ds.check_fits_model(701, 3));
  std::string msg = error_of([&] { ds.check_fits_model(700, 3); });
  EXPECT_NE(msg.find("data.ebin: sample 4: position 3: field 2 (cur_word) id 700"), std::string::npos) << msg;
  msg = error_of([&] { ds.check_fits_model(701, 2); });
  EXPECT_NE(msg.find(": label 2 does not fit the model's 2 labels"), std::string::npos) << msg;
  samples[4].cur[3] = 1;
  samples[1].identifier[2] = {3, 9000};
  Dataset ds2 = Dataset::open(make_ebin(dir, samples, 5));
  msg = error_of([&] { ds2.check_fits_model(100, 3); });
  EXPECT_NE(msg.find("sample 1: position 2: field 0 (identifier) id 9000"), std::string::npos) << msg;
}

// ---- corrupted binaries -------------------------------------------------------------------

struct Corrupt {
  std::string dir, path, bytes;
  int written = 0;
  explicit Corrupt(const std::string& d) : dir(d) {
    auto samples = random_samples(4, 3, 8);
    path = make_ebin(dir, samples, 3);
    drop_fuzz_seed("ebin", path, ".valid");
    bytes = read_text(path);
  }
  template <class T>
  void set(size_t offset, T value) {
    std::memcpy(bytes.data() + offset, &value, sizeof(T));
  }
  DatasetHeader header() const {
    DatasetHeader h;
    std::memcpy(&h, bytes.data(), sizeof(h));
    return h;
  }
  std::string open_error() {
    write_text(path, bytes);
    drop_fuzz_seed("ebin", path, "." + std::to_string(++written));
    return error_of([&] { Dataset::open(path); });
  }
};

TEST(DatasetErrors, WrongMagic) {
  Corrupt c(scratch_dir());
  c.bytes[0] = 'X';
  EXPECT_CONTAINS(c.open_error(), "data.ebin: bad magic");
}

TEST(DatasetErrors, WrongVersion) {
  Corrupt c(scratch_dir());
  c.set<uint32_t>(offsetof(DatasetHeader, version), 7);
  EXPECT_CONTAINS(c.open_error(), "data.ebin: unsupported version 7");
}

TEST(DatasetErrors, Truncated) {
  Corrupt c(scratch_dir());
  const size_t full = c.bytes.size();
  c.bytes.resize(full - 8);
  EXPECT_CONTAINS(c.open_error(), cat("data.ebin: truncated: header says ", full, " bytes, file has ", full - 8));
  c.bytes.resize(100);
  EXPECT_CONTAINS(c.open_error(), "data.ebin: truncated: 100 bytes, smaller than the 128-byte header");
}

TEST(DatasetErrors, SizeMismatch) {
  Corrupt c(scratch_dir());
  const size_t full = c.bytes.size();
  c.bytes += std::string(8, '\0');
  EXPECT_CONTAINS(c.open_error(), cat("data.ebin: size mismatch: header says ", full, " bytes, file has ", full + 8));
}

TEST(DatasetErrors, EmptyFile) {
  Corrupt c(scratch_dir());
  c.bytes.clear();
  EXPECT_CONTAINS(c.open_error(), "data.ebin: empty file");
}

TEST(DatasetErrors, SectionOutsideTheFile) {
  Corrupt c(scratch_dir());
  c.set<uint64_t>(offsetof(DatasetHeader, identifier_ids_offset), c.header().file_size);
  EXPECT_CONTAINS(c.open_error(), "data.ebin: section identifier_ids");
}

TEST(DatasetErrors, OffsetsOutOfRange) {
  Corrupt c(scratch_dir());
  const DatasetHeader h = c.header();
  // Position p = 5 (sample 1, t = 2): make its end offset jump past the total.
  c.set<uint64_t>(h.identifier_offsets_offset + 8 * 6, h.num_identifier_ids + 1);
  EXPECT_CONTAINS(c.open_error(), "data.ebin: sample 1: position 2: field 0 (identifier) offsets out of range");
}

TEST(DatasetErrors, OffsetsNotStartingAtZero) {
  Corrupt c(scratch_dir());
  c.set<uint64_t>(c.header().auxiliary_offsets_offset, 1);
  EXPECT_CONTAINS(c.open_error(), "data.ebin: auxiliary_offsets[0] is 1, must be 0");
}

TEST(DatasetErrors, NegativeIdAndBadLabel) {
  Corrupt c(scratch_dir());
  const DatasetHeader h = c.header();
  c.set<int32_t>(h.cur_word_offset + 4 * 7, -3);  // sample 2, t = 1
  EXPECT_CONTAINS(c.open_error(), "data.ebin: sample 2: position 1: field 2 (cur_word) has negative id -3");
  Corrupt d(scratch_dir());
  d.set<int32_t>(d.header().labels_offset + 4 * 3, static_cast<int32_t>(d.header().num_labels));
  EXPECT_CONTAINS(d.open_error(), "data.ebin: sample 3: label");
}

// A section inside the file and aligned, but starting inside the one before it (cur_word over the
// labels): a reader trusting both would read one as the other.
TEST(DatasetErrors, OverlappingSections) {
  Corrupt c(scratch_dir());
  const DatasetHeader h = c.header();
  c.set<uint64_t>(offsetof(DatasetHeader, cur_word_offset), h.labels_offset);
  EXPECT_CONTAINS(c.open_error(), cat("data.ebin: section cur_word at offset ", h.labels_offset,
                                      " overlaps section labels [", h.labels_offset, ", ", h.labels_offset + 16, ")"));
  Corrupt d(scratch_dir());
  d.set<uint64_t>(offsetof(DatasetHeader, auxiliary_ids_offset), h.identifier_ids_offset);
  EXPECT_CONTAINS(d.open_error(), "data.ebin: section auxiliary_ids at offset");
  EXPECT_CONTAINS(d.open_error(), "overlaps section auxiliary_offsets");
}

TEST(DatasetErrors, ReservedBytesMustBeZero) {
  Corrupt c(scratch_dir());
  c.bytes[offsetof(DatasetHeader, reserved) + 5] = 7;
  EXPECT_CONTAINS(c.open_error(), "data.ebin: reserved header byte 113 is 7, must be 0");
}

// A directory or a FIFO is refused by name (a FIFO without waiting for a writer).
TEST(DatasetErrors, NotARegularFile) {
  const std::string dir = scratch_dir();
  EXPECT_EQ(error_of([&] { Dataset::open(dir); }), dir + ": not a regular file (a directory)");
  const std::string fifo = dir + "/fifo.ebin";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { Dataset::open(fifo); }), fifo + ": not a regular file (a FIFO)");
}

// ---- unlabeled sets ------------------------------------------------------------------------

TEST(UnlabeledDataset, RoundTripsAndHasNoLabelsSection) {
  const std::string dir = scratch_dir();
  const int T = 5;
  const auto samples = random_samples(9, T, 21);
  const std::string text = samples_jsonl(samples, false);
  write_text(dir + "/in.jsonl", text);
  const ConvertStats st = convert_jsonl_to_ebin(dir + "/in.jsonl", dir + "/u.ebin", 0);
  EXPECT_FALSE(st.labeled);
  EXPECT_EQ(st.seq_len, T);
  const Dataset ds = Dataset::open(dir + "/u.ebin");
  EXPECT_FALSE(ds.has_labels());
  EXPECT_EQ(ds.num_labels(), 0);
  const DatasetHeader& h = ds.header();
  EXPECT_EQ(h.flags, kDatasetUnlabeled);
  EXPECT_EQ(h.labels_offset, 0u);
  EXPECT_EQ(h.cur_word_offset, 128u);  // the first section sits right behind the header
  // The labeled file of the same samples is the unlabeled one plus a labels section (N int32,
  // padded to 8) in front: every later section moves by exactly that much.
  write_text(dir + "/l.jsonl", samples_jsonl(samples));
  convert_jsonl_to_ebin(dir + "/l.jsonl", dir + "/l.ebin", T);
  const Dataset labeled = Dataset::open(dir + "/l.ebin");
  EXPECT_TRUE(labeled.has_labels());
  EXPECT_EQ(labeled.header().flags, 0u);
  const uint64_t shift = (9 * 4 + 7) / 8 * 8;
  EXPECT_EQ(labeled.header().cur_word_offset, h.cur_word_offset + shift);
  EXPECT_EQ(labeled.header().auxiliary_ids_offset, h.auxiliary_ids_offset + shift);
  EXPECT_EQ(labeled.file_size(), ds.file_size() + shift);
  const std::string u = read_text(dir + "/u.ebin"), l = read_text(dir + "/l.ebin");
  EXPECT_EQ(u.substr(128), l.substr(128 + shift));
  for (int64_t s = 0; s < 9; ++s)
    for (int t = 0; t < T; ++t) EXPECT_EQ(ds.cur_word(s, t), samples[static_cast<size_t>(s)].cur[t]);
  convert_ebin_to_jsonl(dir + "/u.ebin", dir + "/back.jsonl");
  EXPECT_EQ(read_text(dir + "/back.jsonl"), text);
  // Batches carry label 0; the model's ids are checked, labels are not.
  Batch batch;
  const int64_t rows[] = {3, 7};
  fill_batch(batch, ds, rows, 2);
  EXPECT_EQ(batch.labels, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(error_of([&] { ds.check_fits_model(ds.max_model_token_id() + 1, 1); }), "<no error>");
  drop_fuzz_seed("ebin", dir + "/u.ebin");
}

TEST(UnlabeledDataset, MixedFileIsAnErrorNamingTheLine) {
  const std::string dir = scratch_dir();
  auto samples = random_samples(4, 2, 5);
  write_text(dir + "/a.jsonl", sample_json(samples[0]) + "\n" + sample_json(samples[1]) + "\n" +
                                   sample_json(samples[2], false) + "\n");
  EXPECT_CONTAINS(error_of([&] { convert_jsonl_to_ebin(dir + "/a.jsonl", dir + "/a.ebin", 0); }),
                  "a.jsonl: line 3: missing \"label\", but line 1 has one (a file is all labeled or all unlabeled)");
  write_text(dir + "/b.jsonl", sample_json(samples[0], false) + "\n" + sample_json(samples[1]) + "\n");
  EXPECT_CONTAINS(error_of([&] { convert_jsonl_to_ebin(dir + "/b.jsonl", dir + "/b.ebin", 0); }),
                  "b.jsonl: line 2: has a \"label\", but line 1 has none");
  EXPECT_EQ(list_dir(dir), (std::vector<std::string>{"a.jsonl", "b.jsonl"}));
}

TEST(UnlabeledDataset, SeqLenFromTheFirstSampleIsCheckedOnEveryLine) {
  const std::string dir = scratch_dir();
  const auto four = random_samples(2, 4, 1), three = random_samples(1, 3, 2);
  write_text(dir + "/in.jsonl", sample_json(four[0]) + "\n" + sample_json(four[1]) + "\n" + sample_json(three[0]) + "\n");
  EXPECT_CONTAINS(error_of([&] { convert_jsonl_to_ebin(dir + "/in.jsonl", dir + "/o.ebin", 0); }),
                  "in.jsonl: line 3: expected 4 positions (T of line 1), got 3");
  EXPECT_CONTAINS(error_of([&] { convert_jsonl_to_ebin(dir + "/in.jsonl", dir + "/o.ebin", 3); }),
                  "in.jsonl: line 1: expected 3 positions (--seq-len), got 4");
  write_text(dir + "/empty-tokens.jsonl", "{\"label\": 0, \"tokens\": []}\n");
  EXPECT_CONTAINS(error_of([&] { convert_jsonl_to_ebin(dir + "/empty-tokens.jsonl", dir + "/o.ebin", 0); }),
                  "empty-tokens.jsonl: line 1: no positions (T would be 0)");
  // Inferred and given T make the same file.
  write_text(dir + "/ok.jsonl", samples_jsonl(four));
  convert_jsonl_to_ebin(dir + "/ok.jsonl", dir + "/a.ebin", 0);
  convert_jsonl_to_ebin(dir + "/ok.jsonl", dir + "/b.ebin", 4);
  EXPECT_EQ(read_text(dir + "/a.ebin"), read_text(dir + "/b.ebin"));
}

TEST(UnlabeledDataset, HeaderFlagErrors) {
  const std::string dir = scratch_dir();
  write_text(dir + "/in.jsonl", samples_jsonl(random_samples(3, 2, 4), false));
  convert_jsonl_to_ebin(dir + "/in.jsonl", dir + "/u.ebin", 0);
  const std::string good = read_text(dir + "/u.ebin");
  auto open_with = [&](size_t offset, uint32_t value) {
    std::string bytes = good;
    std::memcpy(bytes.data() + offset, &value, sizeof value);
    write_text(dir + "/bad.ebin", bytes);
    drop_fuzz_seed("ebin", dir + "/bad.ebin", "." + std::to_string(offset) + "." + std::to_string(value));
    return error_of([&] { Dataset::open(dir + "/bad.ebin"); });
  };
  EXPECT_CONTAINS(open_with(offsetof(DatasetHeader, flags), 3), "bad.ebin: unknown header flags 0x2");
  EXPECT_CONTAINS(open_with(offsetof(DatasetHeader, flags), 0x80000001u), "unknown header flags 0x80000000");
  EXPECT_CONTAINS(open_with(offsetof(DatasetHeader, num_labels), 2), "bad.ebin: unlabeled, but num_labels is 2 (must be 0)");
  EXPECT_CONTAINS(open_with(offsetof(DatasetHeader, labels_offset), 128),
                  "bad.ebin: unlabeled, but labels_offset is 128 (must be 0)");
  // Clearing the flag makes it a labeled file whose labels section (offset 0) overlaps the header.
  EXPECT_CONTAINS(open_with(offsetof(DatasetHeader, flags), 0), "bad.ebin: section labels at offset 0 overlaps the header");
}

TEST(DatasetErrors, MissingFile) {
  const std::string dir = scratch_dir();
  EXPECT_CONTAINS(error_of([&] { Dataset::open(dir + "/nope.ebin"); }), "nope.ebin: cannot open");
}

TEST(Demo, GeneratingTwiceGivesIdenticalFiles) {
  const std::string dir = scratch_dir();
  DemoOptions opt;
  opt.train_samples = 300;
  opt.valid_samples = 50;
  opt.test_samples = 50;
  DemoFiles a = write_demo(dir + "/a", opt);
  DemoFiles b = write_demo(dir + "/b", opt);
  for (auto [x, y] : {std::pair{a.train_jsonl, b.train_jsonl}, {a.valid_jsonl, b.valid_jsonl},
                      {a.test_jsonl, b.test_jsonl}, {a.train_ebin, b.train_ebin}, {a.test_ebin, b.test_ebin},
                      {a.embeddings, b.embeddings}}) {
    EXPECT_EQ(read_text(x), read_text(y)) << x;
  }
  EXPECT_EQ(std::filesystem::file_size(a.embeddings), 2000u * 32u * 4u);
  Dataset ds = Dataset::open(a.train_ebin);
  EXPECT_EQ(ds.num_samples(), 300);
  EXPECT_EQ(ds.seq_len(), 100);
  EXPECT_EQ(ds.num_labels(), 4);
  EXPECT_LT(ds.max_token_id(), 2000);
  // Every sample has exactly one KEY-after-TRIGGER position, in the segment its label names.
  for (int64_t s = 0; s < ds.num_samples(); ++s) {
    int marked = -1, count = 0;
    for (int t = 1; t < 100; ++t) {
      bool trig = false, key = false;
      for (int k = 0; k < kDemoTriggerCount; ++k) trig |= ds.cur_word(s, t - 1) == demo_trigger_id(k, 2000);
      for (int32_t id : ds.identifier(s, t))
        for (int k = 0; k < kDemoKeyCount; ++k) key |= id == demo_key_id(k, 2000);
      if (trig && key) marked = t, ++count;
    }
    ASSERT_EQ(count, 1) << "sample " << s;
    EXPECT_EQ(ds.label(s), marked * 4 / 100);
  }
  // The committed data/emb.bin is what the generator writes.
  const std::string committed = std::string(ENHANCED_SOURCE_DIR) + "/data/emb.bin";
  if (std::filesystem::exists(committed)) {
    DemoFiles full = write_demo(dir + "/full");
    EXPECT_EQ(read_text(full.embeddings), read_text(committed));
  }
}

}  // namespace
}  // namespace enhanced
