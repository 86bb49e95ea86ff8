// JSON Lines <-> .ebin conversion. The JSONL side is streamed line by line, each line bounded by
// the longest a sample of T can be; each .ebin section goes to its own temporary file, which are
// then assembled behind the header into a temporary output that is renamed into place. Memory
// use does not depend on the input size.
#include "enhanced/jsonl.h"

#include <charconv>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "enhanced/atomic_file.h"
#include "enhanced/progress.h"
#include "enhanced/common.h"
#include "enhanced/dataset.h"
#include "enhanced/text.h"
#include "io/line_reader.h"

namespace enhanced {

namespace {

using nlohmann::json;

// The most of a line's text an error quotes: the parser's sentence and the token it last read.
constexpr size_t kQuotedBytes = 200;

const char* field_name(int field) {
  switch (field) {
    case 0: return "identifier";
    case 1: return "auxiliary";
    default: return "cur_word";
  }
}

const char* type_name(const json& v) {
  if (v.is_number_float()) return "a non-integer number";
  return v.type_name();
}

// Pulls the human part out of an nlohmann parse error ("syntax error while parsing ..."). It
// quotes the line's bytes ("last read: '...'") as they are: escaped here (excerpt).
std::string parse_error_text(const json::parse_error& e) {
  std::string what = e.what();
  auto col = what.find("column ");
  if (col != std::string::npos) {
    auto colon = what.find(": ", col);
    if (colon != std::string::npos) return excerpt(what.substr(colon + 2), kQuotedBytes);
  }
  auto bracket = what.find("] ");
  return excerpt(bracket == std::string::npos ? what : what.substr(bracket + 2), kQuotedBytes);
}

// Finds where in a sample line the JSON parser gave up and what it was reading, as "position t:
// field f (name)" or "\"key\"": nlohmann reports a number that overflows a double (1e999) with
// neither. Run only on a line that failed to parse; it builds nothing.
class ErrorLocator {
 public:
  // The parser's byte position and the place in the sample; false when the line parses.
  static bool locate(const std::string& line, size_t& byte, std::string& place) {
    ErrorLocator locator;
    if (json::sax_parse(line, &locator)) return false;
    byte = locator.byte_;
    place = locator.place();
    return true;
  }

  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }
  bool number_unsigned(json::number_unsigned_t) { return value(); }
  bool number_float(json::number_float_t, const json::string_t&) { return value(); }
  bool string(json::string_t&) { return value(); }
  bool binary(json::binary_t&) { return value(); }
  bool start_object(size_t) { return open(false); }
  bool end_object() { return close(); }
  bool start_array(size_t) { return open(true); }
  bool end_array() { return close(); }
  bool key(json::string_t& key) {
    frames_.back().key = key;
    return true;
  }
  bool parse_error(size_t byte, const std::string&, const nlohmann::detail::exception&) {
    byte_ = byte;
    return false;
  }

 private:
  struct Frame {
    bool array = false;
    size_t index = 0;  // arrays: the element being read
    std::string key;   // objects: the key being read
  };
  bool value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    return true;
  }
  bool open(bool array) {
    frames_.push_back(Frame{array, 0, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value();
  }
  std::string place() const {
    if (frames_.empty() || frames_[0].array) return "the line";
    if (frames_[0].key != "tokens" || frames_.size() < 2) return cat("\"", excerpt(frames_[0].key), "\"");
    if (frames_.size() < 3) return cat("position ", frames_[1].index);
    const int field = static_cast<int>(frames_[2].index);
    return cat("position ", frames_[1].index, ": field ", field, " (", field_name(field), ")");
  }

  std::vector<Frame> frames_;
  size_t byte_ = 0;
};

// "FILE: N lines, R lines/s" at most once a second, checked every 1024 lines.
class ConvertProgress {
 public:
  ConvertProgress(bool enabled, std::string what) : line_(enabled, 1.0), what_(std::move(what)) {}
  void tick(int64_t lines) {
    if ((lines & 1023) == 0) line_.show(text(lines));
  }
  void done(int64_t lines) {
    line_.show(text(lines), true);
    line_.finish();
  }

 private:
  std::string text(int64_t lines) const {
    const double seconds = line_.elapsed_seconds();
    char rate[32];
    std::snprintf(rate, sizeof rate, "%.0f", seconds > 0 ? static_cast<double>(lines) / seconds : 0.0);
    return cat(what_, ": ", lines, " lines, ", rate, " lines/s");
  }
  ProgressLine line_;
  std::string what_;
};

// The .ebin sections being written, one temporary file each, and what the header needs of them.
struct SectionWriters {
  FileWriter labels, cur_word, id_offsets, id_ids, aux_offsets, aux_ids;
  uint64_t num_id = 0, num_aux = 0;
  int32_t max_id = -1, max_label = -1;
  int64_t samples = 0;
  int seq_len = 0;       // T: given, or that of the first sample
  int64_t labeled = -1;  // whether the samples have labels (-1 until the first one is read)

  SectionWriters(TempFiles& temps, const std::string& out_path)
      : labels(temps.add(temp_name(out_path, ".labels"))), cur_word(temps.add(temp_name(out_path, ".cur_word"))),
        id_offsets(temps.add(temp_name(out_path, ".id_offsets"))), id_ids(temps.add(temp_name(out_path, ".id_ids"))),
        aux_offsets(temps.add(temp_name(out_path, ".aux_offsets"))),
        aux_ids(temps.add(temp_name(out_path, ".aux_ids"))) {
    id_offsets.put<uint64_t>(0);
    aux_offsets.put<uint64_t>(0);
  }
  // The sections the file holds, in file order (no labels section when unlabeled).
  std::vector<FileWriter*> in_file_order() {
    std::vector<FileWriter*> all = {&labels, &cur_word, &id_offsets, &id_ids, &aux_offsets, &aux_ids};
    if (labeled == 0) all.erase(all.begin());
    return all;
  }
};

// One JSONL line at a time into the sections; every error names the file, the line, the
// position and the field. T is the given one, or (given 0) that of the first sample; the first
// sample also decides whether the file is labeled, and every other line must agree with it.
class JsonlSampleParser {
 public:
  JsonlSampleParser(const std::string& file, int seq_len, SectionWriters& out)
      : file_(file), seq_len_given_(seq_len > 0), out_(out) {
    out_.seq_len = seq_len;
    if (seq_len > 0) cur_words_.resize(static_cast<size_t>(seq_len));
  }

  void add(const std::string& line, int64_t line_no) {
    line_no_ = line_no;
    if (line.find_first_not_of(" \t") == std::string::npos) fail(file_, ": line ", line_no_, ": blank line");
    json doc;
    try {
      doc = json::parse(line);
    } catch (const json::parse_error& e) {
      fail(file_, ": line ", line_no_, ": column ", e.byte, ": malformed JSON: ", parse_error_text(e));
    } catch (const json::out_of_range&) {  // a number beyond a double (nlohmann's 406)
      size_t byte = 0;
      std::string place = "the line";
      ErrorLocator::locate(line, byte, place);
      fail(file_, ": line ", line_no_, ": column ", byte, ": ", place, ": number does not fit a double");
    }
    if (!doc.is_object()) fail(file_, ": line ", line_no_, ": expected a JSON object, got ", type_name(doc));
    const bool has_label = doc.contains("label");
    if (out_.labeled < 0) out_.labeled = has_label ? 1 : 0;
    if (has_label != (out_.labeled == 1))
      fail(file_, ": line ", line_no_, has_label ? ": has a \"label\", but line 1 has none"
                                                 : ": missing \"label\", but line 1 has one",
           " (a file is all labeled or all unlabeled)");
    const int32_t label_value = has_label ? label(doc) : 0;
    const json& tokens = positions(doc);
    for (int t = 0; t < out_.seq_len; ++t) add_position(tokens[static_cast<size_t>(t)], t);
    out_.cur_word.write(cur_words_.data(), cur_words_.size() * sizeof(int32_t));
    if (has_label) {
      out_.labels.put(label_value);
      out_.max_label = std::max(out_.max_label, label_value);
    }
    ++out_.samples;
  }

 private:
  int32_t label(const json& doc) const {
    const json& label = doc["label"];
    if (!label.is_number_integer())
      fail(file_, ": line ", line_no_, ": \"label\" holds ", type_name(label), ", expected an integer");
    // The number of labels (largest + 1) must fit int32 too, hence the strict bound.
    if (label.is_number_unsigned() ? label.get<uint64_t>() >= static_cast<uint64_t>(std::numeric_limits<int32_t>::max())
                                   : label.get<int64_t>() >= std::numeric_limits<int32_t>::max())
      fail(file_, ": line ", line_no_, ": label ", label.dump(), " does not fit int32 (nor may the label count, largest + 1)");
    if (!label.is_number_unsigned() && label.get<int64_t>() < 0)
      fail(file_, ": line ", line_no_, ": negative label ", label.get<int64_t>());
    return static_cast<int32_t>(label.get<int64_t>());
  }

  const json& positions(const json& doc) {
    auto tokens_it = doc.find("tokens");
    if (tokens_it == doc.end()) fail(file_, ": line ", line_no_, ": missing \"tokens\"");
    const json& tokens = *tokens_it;
    if (!tokens.is_array())
      fail(file_, ": line ", line_no_, ": \"tokens\" holds ", type_name(tokens), ", expected a list of positions");
    if (out_.seq_len == 0) {  // T from the first sample
      if (tokens.empty()) fail(file_, ": line ", line_no_, ": no positions (T would be 0)");
      if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        fail(file_, ": line ", line_no_, ": ", tokens.size(), " positions, more than an int32 T");
      out_.seq_len = static_cast<int>(tokens.size());
      cur_words_.resize(tokens.size());
    }
    if (tokens.size() != static_cast<size_t>(out_.seq_len))
      fail(file_, ": line ", line_no_, ": expected ", out_.seq_len, " positions (",
           seq_len_given_ ? "--seq-len" : "T of line 1", "), got ", tokens.size());
    return tokens;
  }

  void add_position(const json& pos, int t) {
    if (!pos.is_array() || pos.size() != 3)
      fail(file_, ": line ", line_no_, ": position ", t, ": expected exactly 3 lists, got ",
           pos.is_array() ? cat(pos.size(), pos.size() == 1 ? " element" : " elements") : std::string(type_name(pos)));
    for (int f = 0; f < 3; ++f) {
      if (!pos[static_cast<size_t>(f)].is_array())
        fail(file_, ": line ", line_no_, ": position ", t, ": field ", f, " (", field_name(f), ") holds ",
             type_name(pos[static_cast<size_t>(f)]), ", expected a list");
    }
    const json& cur = pos[2];
    if (cur.size() != 1)
      fail(file_, ": line ", line_no_, ": position ", t, ": field 2 (cur_word) must hold exactly one id, got ",
           cur.size());
    add_ragged(pos[0], t, 0, out_.id_ids, out_.id_offsets, out_.num_id);
    add_ragged(pos[1], t, 1, out_.aux_ids, out_.aux_offsets, out_.num_aux);
    const int32_t cur_word = id(cur[0], t, 2);
    out_.max_id = std::max(out_.max_id, cur_word);
    cur_words_[static_cast<size_t>(t)] = cur_word;
  }

  // Fields 0 and 1: ragged ids into their section, then the running count into its offsets.
  void add_ragged(const json& list, int t, int field, FileWriter& ids, FileWriter& offsets, uint64_t& count) {
    if (list.size() > static_cast<size_t>(kMaxIdsPerList))
      fail(file_, ": line ", line_no_, ": position ", t, ": field ", field, " (", field_name(field), ") holds ",
           list.size(), " ids, more than the ", kMaxIdsPerList, " a list may hold");
    for (const json& v : list) {
      const int32_t value = id(v, t, field);
      ids.put(value);
      out_.max_id = std::max(out_.max_id, value);
      ++count;
    }
    offsets.put(count);
  }

  int32_t id(const json& v, int t, int field) const {
    if (!v.is_number_integer())
      fail(file_, ": line ", line_no_, ": position ", t, ": field ", field, " (", field_name(field), ") holds ",
           type_name(v), ", expected an integer id");
    if (v.is_number_unsigned()) {
      const auto u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
        fail(file_, ": line ", line_no_, ": position ", t, ": field ", field, " (", field_name(field), ") id ", u,
             " does not fit int32");
      return static_cast<int32_t>(u);
    }
    const auto s = v.get<int64_t>();
    if (s < 0)
      fail(file_, ": line ", line_no_, ": position ", t, ": field ", field, " (", field_name(field),
           ") has negative id ", s);
    if (s > std::numeric_limits<int32_t>::max())
      fail(file_, ": line ", line_no_, ": position ", t, ": field ", field, " (", field_name(field), ") id ", s,
           " does not fit int32");
    return static_cast<int32_t>(s);
  }

  const std::string& file_;
  bool seq_len_given_;
  SectionWriters& out_;
  std::vector<int32_t> cur_words_;
  int64_t line_no_ = 0;
};

// The header for the written sections (lay_out_sections places them).
DatasetHeader ebin_header(const SectionWriters& sections) {
  DatasetHeader h{};
  std::memcpy(h.magic, kDatasetMagic, sizeof(kDatasetMagic));
  h.version = kDatasetVersion;
  h.seq_len = static_cast<uint32_t>(sections.seq_len);
  h.num_samples = static_cast<uint64_t>(sections.samples);
  h.flags = sections.labeled == 1 ? 0 : kDatasetUnlabeled;
  h.num_labels = static_cast<uint32_t>(sections.max_label + 1);
  h.max_token_id = sections.max_id;
  h.num_identifier_ids = sections.num_id;
  h.num_auxiliary_ids = sections.num_aux;
  lay_out_sections(h);
  return h;
}

// The header, then each section padded to 8 bytes, into `path`.
void assemble_ebin(const std::string& path, const DatasetHeader& h, SectionWriters& sections) {
  FileWriter out(path);
  out.put(h);
  for (FileWriter* section : sections.in_file_order()) {
    out.append_file(section->path());
    out.pad_to(8);
  }
  if (out.size() != h.file_size) fail(path, ": internal error: wrote ", out.size(), " bytes, expected ", h.file_size);
  out.close();
}

}  // namespace

uint64_t jsonl_line_limit(int seq_len) {
  if (seq_len <= 0) return kFirstLineLimit;
  constexpr uint64_t kId = 12;                                      // "2147483647, " (or "[2147483647]")
  constexpr uint64_t kList = 2 + kId * kMaxIdsPerList;              // "[" ids "]"
  constexpr uint64_t kPosition = 1 + kList + 2 + kList + 2 + kId + 1 + 2;  // "[" list ", " list ", " [id] "]" ", "
  constexpr uint64_t kFrame = 64;  // {"label": 2147483646, "tokens": [ ... ]}, 36 bytes, and room
  return kFrame + static_cast<uint64_t>(seq_len) * kPosition;
}

std::string jsonl_line_limit_reason(int seq_len) {
  if (seq_len <= 0) return "the longest first line read before T is known; give --seq-len T for longer samples";
  return cat("the longest line a sample of T=", seq_len, " can be");
}

ConvertStats convert_jsonl_to_ebin(const std::string& jsonl_path, const std::string& out_path, int seq_len,
                                   bool show_progress) {
  if (seq_len < 0) fail(jsonl_path, ": sequence length must be positive (or 0: from the first sample), got ", seq_len);
  if (same_file(jsonl_path, out_path)) fail(out_path, ": output would overwrite the input");
  remove_stale_temp_files_beside(out_path);
  LineReader in(jsonl_path, jsonl_line_limit(seq_len), jsonl_line_limit_reason(seq_len));

  TempFiles temps;
  const std::string tmp_out = temps.add(temp_name(out_path));
  SectionWriters sections(temps, out_path);
  JsonlSampleParser parser(jsonl_path, seq_len, sections);
  ConvertProgress progress(show_progress, jsonl_path);
  std::string line;
  int64_t line_no = 0;
  while (in.next(line)) {
    line_no = in.line_number();
    parser.add(line, line_no);
    if (line_no == 1 && seq_len == 0)  // T of line 1 bounds every other line
      in.set_limit(jsonl_line_limit(sections.seq_len), jsonl_line_limit_reason(sections.seq_len));
    progress.tick(line_no);
  }
  if (sections.samples == 0) fail(jsonl_path, ": no samples");
  progress.done(line_no);
  for (FileWriter* section : sections.in_file_order()) section->close();

  const DatasetHeader h = ebin_header(sections);
  assemble_ebin(tmp_out, h, sections);
  commit_file(tmp_out, out_path);
  temps.remove_all();  // the section files; tmp_out no longer exists under its temporary name
  return ConvertStats{sections.samples, sections.seq_len, h.file_size, sections.labeled == 1};
}

namespace {

void append_int(std::string& s, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  s.append(buf, r.ptr);
}

void append_list(std::string& s, std::span<const int32_t> ids) {
  s.push_back('[');
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k > 0) s.push_back(',');
    append_int(s, ids[k]);
  }
  s.push_back(']');
}

}  // namespace

ConvertStats convert_ebin_to_jsonl(const std::string& ebin_path, const std::string& out_path) {
  if (same_file(ebin_path, out_path)) fail(out_path, ": output would overwrite the input");
  remove_stale_temp_files_beside(out_path);
  Dataset ds = Dataset::open(ebin_path);
  TempFiles temps;
  const std::string tmp_out = temps.add(temp_name(out_path, ""));
  FileWriter out(tmp_out);
  std::string line;
  const int T = ds.seq_len();
  for (int64_t s = 0; s < ds.num_samples(); ++s) {
    line.clear();
    if (ds.has_labels()) {
      line += "{\"label\":";
      append_int(line, ds.label(s));
      line += ",\"tokens\":[";
    } else {
      line += "{\"tokens\":[";
    }
    for (int t = 0; t < T; ++t) {
      if (t > 0) line.push_back(',');
      line.push_back('[');
      append_list(line, ds.identifier(s, t));
      line.push_back(',');
      append_list(line, ds.auxiliary(s, t));
      line += ",[";
      append_int(line, ds.cur_word(s, t));
      line += "]]";
    }
    line += "]}\n";
    out.write(line.data(), line.size());
  }
  const uint64_t bytes = out.size();
  out.close();
  commit_file(tmp_out, out_path);
  temps.remove_all();

  ConvertStats stats;
  stats.samples = ds.num_samples();
  stats.seq_len = T;
  stats.bytes_written = bytes;
  stats.labeled = ds.has_labels();
  return stats;
}

}  // namespace enhanced
