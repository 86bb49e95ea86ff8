// Memory-mapped .ebin reader with full validation on open.
#include "enhanced/dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ios>
#include <algorithm>
#include <limits>
#include <utility>

#include "enhanced/common.h"
#include "io/input_file.h"

namespace enhanced {

namespace {

const char* field_name(int field) {
  switch (field) {
    case 0: return "identifier";
    case 1: return "auxiliary";
    default: return "cur_word";
  }
}

// Checks that [offset, offset + count * elem) lies inside the file and is 8-byte aligned.
void check_section(const std::string& path, const char* name, uint64_t offset, uint64_t count,
                   uint64_t elem, uint64_t file_size) {
  if (offset % 8 != 0) fail(path, ": section ", name, " at offset ", offset, " is not 8-byte aligned");
  if (offset < sizeof(DatasetHeader))
    fail(path, ": section ", name, " at offset ", offset, " overlaps the header");
  if (count > (std::numeric_limits<uint64_t>::max() - offset) / elem || offset + count * elem > file_size)
    fail(path, ": section ", name, " (offset ", offset, ", ", count, " entries of ", elem,
         " bytes) extends past the end of the file (", file_size, " bytes)");
}

// Every section inside the file, aligned, after the header and after the one before it in the
// header's order: no two share a byte (a reader trusting one section never reads another's).
void check_sections(const std::string& path, const DatasetHeader& h, uint64_t file_size) {
  const uint64_t n = h.num_samples, np = n * h.seq_len;  // checked against the file's size already
  struct Section {
    const char* name;
    uint64_t offset, count, element;
  };
  const Section in_file_order[] = {{"labels", h.labels_offset, n, 4},
                                   {"cur_word", h.cur_word_offset, np, 4},
                                   {"identifier_offsets", h.identifier_offsets_offset, np + 1, 8},
                                   {"identifier_ids", h.identifier_ids_offset, h.num_identifier_ids, 4},
                                   {"auxiliary_offsets", h.auxiliary_offsets_offset, np + 1, 8},
                                   {"auxiliary_ids", h.auxiliary_ids_offset, h.num_auxiliary_ids, 4}};
  const Section* before = nullptr;
  for (const Section& section : in_file_order) {
    if (&section == &in_file_order[0] && (h.flags & kDatasetUnlabeled) != 0) continue;  // no labels section
    check_section(path, section.name, section.offset, section.count, section.element, file_size);
    const uint64_t before_end = before ? before->offset + before->count * before->element : 0;
    if (before && section.offset < before_end)
      fail(path, ": section ", section.name, " at offset ", section.offset, " overlaps section ", before->name, " [",
           before->offset, ", ", before_end, "): sections are disjoint, in the header's order");
    before = &section;
  }
}

// The reserved header bytes are zero: a file with them set is a newer format's or a damaged one.
void check_reserved(const std::string& path, const DatasetHeader& h) {
  for (size_t i = 0; i < sizeof h.reserved; ++i)
    if (h.reserved[i] != 0)
      fail(path, ": reserved header byte ", offsetof(DatasetHeader, reserved) + i, " is ",
           static_cast<int>(h.reserved[i]), ", must be 0");
}

// Whether the file starts like JSON Lines (a '{' after any blanks or a UTF-8 byte-order mark),
// as the input of enhanced-data convert does and no .ebin can (its magic is "ENHDATA"): giving
// the JSONL file where the .ebin is expected is a common slip, worth naming with its fix.
bool looks_like_json_lines(const unsigned char* head, size_t got) {
  size_t at = got >= 3 && head[0] == 0xEF && head[1] == 0xBB && head[2] == 0xBF ? 3 : 0;
  while (at < got && (head[at] == ' ' || head[at] == '\t' || head[at] == '\r' || head[at] == '\n')) ++at;
  return at < got && head[at] == '{';
}

bool looks_like_json_lines(int fd) {
  unsigned char head[256];
  const ssize_t got = ::pread(fd, head, sizeof head, 0);
  return got > 0 && looks_like_json_lines(head, static_cast<size_t>(got));
}

// The text of each reason a file or image is no .ebin before its header is read.
[[noreturn]] void fail_json_lines(const std::string& path) {
  fail(path, ": looks like JSON Lines, not .ebin: run enhanced-data convert ", path, " OUT.ebin first");
}
[[noreturn]] void fail_empty(const std::string& path) { fail(path, ": empty file (not an .ebin dataset)"); }
[[noreturn]] void fail_no_header(const std::string& path, uint64_t size) {
  fail(path, ": truncated: ", size, " bytes, smaller than the ", sizeof(DatasetHeader), "-byte header");
}

}  // namespace

void lay_out_sections(DatasetHeader& h) {
  const uint64_t np = h.num_samples * h.seq_len;
  const bool labeled = (h.flags & kDatasetUnlabeled) == 0;
  struct Section {
    uint64_t* offset;
    uint64_t bytes;
  };
  const Section in_file_order[] = {{&h.labels_offset, labeled ? h.num_samples * 4 : 0},
                                   {&h.cur_word_offset, np * 4},
                                   {&h.identifier_offsets_offset, (np + 1) * 8},
                                   {&h.identifier_ids_offset, h.num_identifier_ids * 4},
                                   {&h.auxiliary_offsets_offset, (np + 1) * 8},
                                   {&h.auxiliary_ids_offset, h.num_auxiliary_ids * 4}};
  uint64_t at = sizeof(DatasetHeader);
  for (const Section& section : in_file_order) {
    if (section.offset == &h.labels_offset && !labeled) {
      h.labels_offset = 0;
      continue;
    }
    *section.offset = at;
    at = (at + section.bytes + 7) / 8 * 8;
  }
  h.file_size = at;
}

Dataset Dataset::open(const std::string& path, const std::string& name) {
  Dataset ds;
  ds.path_ = path;
  ds.map_file();  // from here on `ds` owns the mapping; its destructor unmaps on any throw
  if (!name.empty()) ds.path_ = name;
  ds.header_ = static_cast<const DatasetHeader*>(ds.mapping_);
  ds.check_and_carve();
  return ds;
}

// operator new's alignment is the sections' (8) or more: the image is used where it lies.
static_assert(__STDCPP_DEFAULT_NEW_ALIGNMENT__ >= 8);

Dataset Dataset::from_bytes(std::vector<uint8_t> image, const std::string& name) {
  Dataset ds = view(image, name);  // checked where the vector's buffer lies, which the move keeps
  ds.image_ = std::move(image);
  return ds;
}

Dataset Dataset::view(std::span<const uint8_t> image, const std::string& name) {
  Dataset ds;
  ds.path_ = name;
  const size_t size = image.size();
  if (looks_like_json_lines(image.data(), std::min<size_t>(size, 256))) fail_json_lines(name);
  if (size == 0) fail_empty(name);
  if (size < sizeof(DatasetHeader)) fail_no_header(name, size);
  if (reinterpret_cast<uintptr_t>(image.data()) % 8 != 0)
    fail(name, ": the image's bytes start at an address that is not 8-byte aligned");
  ds.mapping_size_ = size;
  ds.header_ = reinterpret_cast<const DatasetHeader*>(image.data());
  ds.check_and_carve();
  return ds;
}

void Dataset::check_and_carve() {
  check_header();
  carve_sections();
  check_offsets();
  check_ids();
  check_labels();
}

void Dataset::map_file() {
  const std::string& path = path_;
  uint64_t real_size = 0;
  const int fd = open_input_descriptor(path, real_size);  // a FIFO or a directory is refused by name
  if (looks_like_json_lines(fd)) {
    ::close(fd);
    fail_json_lines(path);
  }
  if (real_size == 0) {
    ::close(fd);
    fail_empty(path);
  }
  if (real_size < sizeof(DatasetHeader)) {
    ::close(fd);
    fail_no_header(path, real_size);
  }
  void* map = ::mmap(nullptr, real_size, PROT_READ, MAP_SHARED, fd, 0);
  int map_err = errno;
  ::close(fd);
  if (map == MAP_FAILED) fail(path, ": cannot mmap: ", std::strerror(map_err));
  mapping_ = map;
  mapping_size_ = real_size;
}

void Dataset::check_header() const {
  const std::string& path = path_;
  const DatasetHeader* h = header_;
  const uint64_t real_size = mapping_size_;
  if (std::memcmp(h->magic, kDatasetMagic, sizeof(kDatasetMagic)) != 0) fail(path, ": bad magic: not an .ebin dataset");
  if (h->version != kDatasetVersion)
    fail(path, ": unsupported version ", h->version, " (this build reads version ", kDatasetVersion, ")");
  if (h->file_size != real_size) {
    if (h->file_size > real_size) fail(path, ": truncated: header says ", h->file_size, " bytes, file has ", real_size);
    fail(path, ": size mismatch: header says ", h->file_size, " bytes, file has ", real_size);
  }
  if (h->seq_len == 0) fail(path, ": seq_len (T) is 0");
  const uint64_t n = h->num_samples;
  const uint64_t T = h->seq_len;
  if (n > real_size / 4 || (n != 0 && T > real_size / 4 / n))
    fail(path, ": header claims ", n, " samples of ", T, " positions, more than the file can hold");
  if ((h->flags & ~kDatasetUnlabeled) != 0)
    fail(path, ": unknown header flags 0x", std::hex, h->flags & ~kDatasetUnlabeled, std::dec,
         " (this build knows only bit 0, unlabeled)");
  if ((h->flags & kDatasetUnlabeled) != 0) {
    if (h->labels_offset != 0) fail(path, ": unlabeled, but labels_offset is ", h->labels_offset, " (must be 0)");
    if (h->num_labels != 0) fail(path, ": unlabeled, but num_labels is ", h->num_labels, " (must be 0)");
  }
  check_reserved(path, *h);
  check_sections(path, *h, real_size);
}

void Dataset::carve_sections() {
  const auto* base = reinterpret_cast<const unsigned char*>(header_);  // the mapping or the image
  const DatasetHeader* h = header_;
  labels_ = has_labels() ? reinterpret_cast<const int32_t*>(base + h->labels_offset) : nullptr;
  cur_word_ = reinterpret_cast<const int32_t*>(base + h->cur_word_offset);
  identifier_offsets_ = reinterpret_cast<const uint64_t*>(base + h->identifier_offsets_offset);
  identifier_ids_ = reinterpret_cast<const int32_t*>(base + h->identifier_ids_offset);
  auxiliary_offsets_ = reinterpret_cast<const uint64_t*>(base + h->auxiliary_offsets_offset);
  auxiliary_ids_ = reinterpret_cast<const int32_t*>(base + h->auxiliary_ids_offset);
}

// Offsets: start at 0, monotone, end at the id counts.
void Dataset::check_offsets() const {
  const uint64_t T = header_->seq_len, np = header_->num_samples * T;
  auto check = [&](const uint64_t* off, uint64_t total, const char* name, int field) {
    if (off[0] != 0) fail(path_, ": ", name, "[0] is ", off[0], ", must be 0");
    for (uint64_t p = 0; p < np; ++p) {
      if (off[p + 1] < off[p] || off[p + 1] > total)
        fail(path_, ": sample ", p / T, ": position ", p % T, ": field ", field, " (", field_name(field),
             ") offsets out of range: ", off[p], " .. ", off[p + 1], " (", total, " ids in all)");
    }
    if (off[np] != total) fail(path_, ": ", name, " end at ", off[np], " but the header says ", total, " ids");
  };
  check(identifier_offsets_, header_->num_identifier_ids, "identifier_offsets", 0);
  check(auxiliary_offsets_, header_->num_auxiliary_ids, "auxiliary_offsets", 1);
}

// Ids non-negative, the largest one the header's.
void Dataset::check_ids() {
  const uint64_t T = header_->seq_len, np = header_->num_samples * T;
  int32_t max_id = -1;
  auto check = [&](const int32_t* ids, const uint64_t* off, int field) {
    for (uint64_t p = 0; p < np; ++p) {
      for (uint64_t k = off[p]; k < off[p + 1]; ++k) {
        if (ids[k] < 0)
          fail(path_, ": sample ", p / T, ": position ", p % T, ": field ", field, " (", field_name(field),
               ") has negative id ", ids[k]);
        if (ids[k] > max_id) max_id = ids[k];
      }
    }
  };
  check(identifier_ids_, identifier_offsets_, 0);
  // The largest id the model looks up: fields 0 and 2 (field 1 is only carried).
  int32_t max_model_id = max_id;
  check(auxiliary_ids_, auxiliary_offsets_, 1);
  for (uint64_t p = 0; p < np; ++p) {
    if (cur_word_[p] < 0)
      fail(path_, ": sample ", p / T, ": position ", p % T, ": field 2 (cur_word) has negative id ", cur_word_[p]);
    max_id = std::max(max_id, cur_word_[p]);
    max_model_id = std::max(max_model_id, cur_word_[p]);
  }
  if (max_id != header_->max_token_id)
    fail(path_, ": header says the largest id is ", header_->max_token_id, " but the data holds ", max_id);
  max_model_token_id_ = max_model_id;
}

// Labels in [0, num_labels), the largest one num_labels - 1.
void Dataset::check_labels() const {
  if (!has_labels()) return;
  const uint32_t num_labels = header_->num_labels;
  if (num_labels > static_cast<uint32_t>(std::numeric_limits<int32_t>::max()))
    fail(path_, ": header says ", num_labels, " labels, more than an int32 count");
  int32_t max_label = -1;
  for (uint64_t s = 0; s < header_->num_samples; ++s) {
    if (labels_[s] < 0) fail(path_, ": sample ", s, ": negative label ", labels_[s]);
    if (static_cast<uint32_t>(labels_[s]) >= num_labels)
      fail(path_, ": sample ", s, ": label ", labels_[s], " >= num_labels ", num_labels, " in the header");
    if (labels_[s] > max_label) max_label = labels_[s];
  }
  if (static_cast<int64_t>(num_labels) != static_cast<int64_t>(max_label) + 1)
    fail(path_, ": header says ", num_labels, " labels but the largest label is ", max_label);
}

Dataset::Dataset(Dataset&& other) noexcept { *this = std::move(other); }

Dataset& Dataset::operator=(Dataset&& other) noexcept {
  if (this != &other) {
    if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    image_ = std::move(other.image_);  // a moved vector keeps its buffer: the pointers below stay valid
    header_ = std::exchange(other.header_, nullptr);
    labels_ = std::exchange(other.labels_, nullptr);
    cur_word_ = std::exchange(other.cur_word_, nullptr);
    identifier_offsets_ = std::exchange(other.identifier_offsets_, nullptr);
    identifier_ids_ = std::exchange(other.identifier_ids_, nullptr);
    auxiliary_offsets_ = std::exchange(other.auxiliary_offsets_, nullptr);
    auxiliary_ids_ = std::exchange(other.auxiliary_ids_, nullptr);
    max_model_token_id_ = std::exchange(other.max_model_token_id_, -1);
  }
  return *this;
}

Dataset::~Dataset() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

std::span<const int32_t> Dataset::identifier(int64_t sample, int t) const {
  const int64_t p = position(sample, t);
  const uint64_t b = identifier_offsets_[p], e = identifier_offsets_[p + 1];
  return {identifier_ids_ + b, static_cast<size_t>(e - b)};
}

std::span<const int32_t> Dataset::auxiliary(int64_t sample, int t) const {
  const int64_t p = position(sample, t);
  const uint64_t b = auxiliary_offsets_[p], e = auxiliary_offsets_[p + 1];
  return {auxiliary_ids_ + b, static_cast<size_t>(e - b)};
}

uint64_t Dataset::identifier_count(int64_t sample) const {
  const int64_t p0 = position(sample, 0);
  return identifier_offsets_[p0 + header_->seq_len] - identifier_offsets_[p0];
}

void Dataset::check_fits_model(int64_t vocab_size, int num_labels) const {
  if (header_ == nullptr) fail("check_fits_model on an unopened dataset");
  // A set read from JSON Lines names its samples as the parser does: by 1-based line.
  const bool jsonl = path_.size() >= 6 && path_.compare(path_.size() - 6, 6, ".jsonl") == 0;
  const auto sample_text = [&](int64_t s) { return jsonl ? cat("line ", s + 1) : cat("sample ", s); };
  const int T = seq_len();
  const int64_t n = num_samples();
  if (max_token_id() < vocab_size) {
    // Fast path for ids; labels are checked below. Field 1 (auxiliary) is never looked up by
    // the model, so its ids are not held against the vocabulary.
  } else {
    for (int64_t s = 0; s < n; ++s) {
      for (int t = 0; t < T; ++t) {
        for (int32_t id : identifier(s, t))
          if (id >= vocab_size)
            fail(path_, ": ", sample_text(s), ": position ", t, ": field 0 (identifier) id ", id,
                 " does not fit the vocabulary of ", vocab_size);
        if (cur_word(s, t) >= vocab_size)
          fail(path_, ": ", sample_text(s), ": position ", t, ": field 2 (cur_word) id ", cur_word(s, t),
               " does not fit the vocabulary of ", vocab_size);
      }
    }
  }
  for (int64_t s = 0; has_labels() && s < n; ++s)
    if (label(s) >= num_labels)
      fail(path_, ": ", sample_text(s), ": label ", label(s), " does not fit the model's ", num_labels,
           " labels");
}

}  // namespace enhanced
