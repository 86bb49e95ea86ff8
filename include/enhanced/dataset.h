// The engine's binary dataset (.ebin): a read-only, memory-mapped CSR file (or the same bytes
// held in memory, from_bytes) with O(1) access to any sample. Layout in docs/data-format.md; conversion from/to JSON Lines in jsonl.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace enhanced {

inline constexpr char kDatasetMagic[8] = {'E', 'N', 'H', 'D', 'A', 'T', 'A', '\0'};
inline constexpr uint32_t kDatasetVersion = 1;
// DatasetHeader::flags bits; any other bit set is refused (a newer writer's feature).
inline constexpr uint32_t kDatasetUnlabeled = 1;  // no labels section: labels_offset = 0, num_labels = 0

// Fixed 128-byte little-endian header at offset 0. Section offsets are absolute byte offsets,
// each 8-byte aligned. Positions are numbered p = sample * seq_len + t.
struct DatasetHeader {
  char magic[8];                      // kDatasetMagic
  uint32_t version;                   // kDatasetVersion
  uint32_t seq_len;                   // T
  uint64_t num_samples;               // N
  uint32_t num_labels;                // largest label + 1 (0 when N == 0 or unlabeled)
  int32_t max_token_id;               // largest id in any field, -1 when there is none
  uint64_t num_identifier_ids;        // total ids in field 0
  uint64_t num_auxiliary_ids;         // total ids in field 1
  uint64_t labels_offset;             // int32[N]; 0 when unlabeled (no labels section)
  uint64_t cur_word_offset;           // int32[N*T]                (field 2)
  uint64_t identifier_offsets_offset; // uint64[N*T+1], into identifier ids, [0] = 0
  uint64_t identifier_ids_offset;     // int32[num_identifier_ids] (field 0)
  uint64_t auxiliary_offsets_offset;  // uint64[N*T+1], into auxiliary ids, [0] = 0
  uint64_t auxiliary_ids_offset;      // int32[num_auxiliary_ids]  (field 1)
  uint64_t file_size;                 // total bytes, checked against the real size
  uint32_t flags;                     // kDatasetUnlabeled or 0 (files before the flag: 0)
  uint8_t reserved[20];               // zero
};
static_assert(sizeof(DatasetHeader) == 128);
static_assert(offsetof(DatasetHeader, flags) == 104 && offsetof(DatasetHeader, reserved) == 108);

// Lays out the sections of `h` from its seq_len, num_samples, id counts and flags: each section
// in the order of the header's offsets (the labels section left out when unlabeled), the first at
// 128, each at the next multiple of 8 after the one before, and file_size the end of the last one
// rounded up to 8. Every writer of .ebin files uses this, so their files are byte-identical.
void lay_out_sections(DatasetHeader& h);

// A mapped dataset. Opening validates the header, the section bounds, the offsets (monotone,
// in range) and every id and label (non-negative), so readers can trust it afterwards.
// The name of a set that is no file (a set held in memory, a stream of batches, as the Python
// package names them: "<x: 16 samples in memory>"): in angle brackets.
inline bool is_memory_name(const std::string& name) {
  return name.size() >= 2 && name.front() == '<' && name.back() == '>';
}

class Dataset {
 public:
  // `name`: what errors and path() call the set when it is not `path` (a temporary converted
  // from the user's JSON Lines file is named after that file).
  static Dataset open(const std::string& path, const std::string& name = "");
  // A dataset held in memory: `image` is the bytes of an .ebin file (the exact layout, as
  // python/enhanced/ebin.py writes it), checked as open() checks a file, with the same errors
  // naming `name` where open()'s name the path. `name` is also path(): what a training run
  // records as its data (docs/python.md says what a resume does with it); a name in angle
  // brackets (is_memory_name) is recorded as it is, never made a path.
  static Dataset from_bytes(std::vector<uint8_t> image, const std::string& name);
  // The same checks over bytes the caller owns: no copy is taken, so the caller keeps them alive
  // and unchanged while the Dataset is used (Model.fit's image stays the one copy of the data; a
  // streamed batch is viewed where the host holds it). Their start must be 8-byte aligned.
  static Dataset view(std::span<const uint8_t> image, const std::string& name);
  Dataset() = default;
  Dataset(Dataset&& other) noexcept;
  Dataset& operator=(Dataset&& other) noexcept;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;
  ~Dataset();

  const std::string& path() const { return path_; }
  const DatasetHeader& header() const { return *header_; }
  int64_t num_samples() const { return static_cast<int64_t>(header_->num_samples); }
  int seq_len() const { return static_cast<int>(header_->seq_len); }
  int num_labels() const { return static_cast<int>(header_->num_labels); }
  // Whether the file holds labels (a set to train or evaluate on) or not (one to predict).
  bool has_labels() const { return (header_->flags & kDatasetUnlabeled) == 0; }
  int32_t max_token_id() const { return header_->max_token_id; }
  // The largest id the model looks up (fields 0 and 2; field 1 is carried, never used), -1 if none.
  int32_t max_model_token_id() const { return max_model_token_id_; }
  uint64_t file_size() const { return header_->file_size; }

  int32_t label(int64_t sample) const { return labels_[sample]; }  // only when has_labels()
  int32_t cur_word(int64_t sample, int t) const { return cur_word_[position(sample, t)]; }
  std::span<const int32_t> identifier(int64_t sample, int t) const;
  std::span<const int32_t> auxiliary(int64_t sample, int t) const;
  // Total identifier ids of one sample (sizes batch buffers).
  uint64_t identifier_count(int64_t sample) const;

  // Ids >= vocab_size and labels >= num_labels are errors once the model is known: throws an
  // Error naming the file, the sample, the position and the field. Unlabeled: the ids only.
  void check_fits_model(int64_t vocab_size, int num_labels) const;

 private:
  int64_t position(int64_t sample, int t) const { return sample * header_->seq_len + t; }
  // The steps of open(), each throwing Error naming the file.
  void map_file();           // mapping_, mapping_size_ (a file of at least a header)
  void check_and_carve();    // from header_ and mapping_size_: every check below, the section pointers
  void check_header() const; // magic, version, size, section bounds
  void carve_sections();     // the section pointers
  void check_offsets() const;
  void check_ids();          // and sets max_model_token_id_
  void check_labels() const;

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;  // the mapping's or the image's bytes
  std::vector<uint8_t> image_;  // from_bytes: the bytes (no mapping); view: empty, the caller's
  const DatasetHeader* header_ = nullptr;
  const int32_t* labels_ = nullptr;
  const int32_t* cur_word_ = nullptr;
  const uint64_t* identifier_offsets_ = nullptr;
  const int32_t* identifier_ids_ = nullptr;
  const uint64_t* auxiliary_offsets_ = nullptr;
  const int32_t* auxiliary_ids_ = nullptr;
  int32_t max_model_token_id_ = -1;
};

}  // namespace enhanced
