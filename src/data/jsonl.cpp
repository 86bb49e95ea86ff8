// JSON Lines <-> .ebin conversion. The JSONL side is streamed line by line; each .ebin section
// goes to its own temporary file, which are then assembled behind the header into a temporary
// output that is renamed into place. Memory use does not depend on the input size.
#include "enhanced/jsonl.h"

#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "enhanced/atomic_file.h"
#include "enhanced/progress.h"
#include "enhanced/common.h"
#include "enhanced/dataset.h"

namespace enhanced {

namespace {

using nlohmann::json;

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

// Pulls the human part out of an nlohmann parse error ("syntax error while parsing ...").
std::string parse_error_text(const json::parse_error& e) {
  std::string what = e.what();
  auto col = what.find("column ");
  if (col != std::string::npos) {
    auto colon = what.find(": ", col);
    if (colon != std::string::npos) return what.substr(colon + 2);
  }
  auto bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

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

struct SectionWriters {
  FileWriter labels, cur_word, id_offsets, id_ids, aux_offsets, aux_ids;
  SectionWriters(const std::string& l, const std::string& c, const std::string& io, const std::string& ii,
                 const std::string& ao, const std::string& ai)
      : labels(l), cur_word(c), id_offsets(io), id_ids(ii), aux_offsets(ao), aux_ids(ai) {}
};

// The same file under two names (relative and absolute paths, links), not only the same string.
bool same_file(const std::string& a, const std::string& b) {
  std::error_code error;
  return a == b || std::filesystem::equivalent(a, b, error);
}

}  // namespace

ConvertStats convert_jsonl_to_ebin(const std::string& jsonl_path, const std::string& out_path,
                                   int seq_len, bool show_progress) {
  if (seq_len <= 0) fail(jsonl_path, ": sequence length must be positive, got ", seq_len);
  if (same_file(jsonl_path, out_path)) fail(out_path, ": output would overwrite the input");
  std::ifstream in(jsonl_path, std::ios::binary);
  if (!in) fail(jsonl_path, ": cannot open: ", std::strerror(errno));
  std::vector<char> inbuf(1 << 20);
  in.rdbuf()->pubsetbuf(inbuf.data(), static_cast<std::streamsize>(inbuf.size()));

  TempFiles temps;
  const std::string tmp_out = temps.add(temp_name(out_path, ""));
  SectionWriters sec(temps.add(temp_name(out_path, ".labels")),
                     temps.add(temp_name(out_path, ".cur_word")),
                     temps.add(temp_name(out_path, ".id_offsets")),
                     temps.add(temp_name(out_path, ".id_ids")),
                     temps.add(temp_name(out_path, ".aux_offsets")),
                     temps.add(temp_name(out_path, ".aux_ids")));

  const std::string& file = jsonl_path;
  uint64_t num_id = 0, num_aux = 0;
  sec.id_offsets.put<uint64_t>(0);
  sec.aux_offsets.put<uint64_t>(0);
  int32_t max_id = -1, max_label = -1;
  int64_t samples = 0, line_no = 0;
  ConvertProgress progress(show_progress, jsonl_path);
  std::string line;
  std::vector<int32_t> cur_words(static_cast<size_t>(seq_len));

  auto get_id = [&](const json& v, int t, int field) -> int32_t {
    if (!v.is_number_integer())
      fail(file, ": line ", line_no, ": position ", t, ": field ", field, " (", field_name(field),
           ") holds ", type_name(v), ", expected an integer id");
    if (v.is_number_unsigned()) {
      auto u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
        fail(file, ": line ", line_no, ": position ", t, ": field ", field, " (", field_name(field), ") id ", u,
             " does not fit int32");
      return static_cast<int32_t>(u);
    }
    auto s = v.get<int64_t>();
    if (s < 0)
      fail(file, ": line ", line_no, ": position ", t, ": field ", field, " (", field_name(field),
           ") has negative id ", s);
    if (s > std::numeric_limits<int32_t>::max())
      fail(file, ": line ", line_no, ": position ", t, ": field ", field, " (", field_name(field), ") id ", s,
           " does not fit int32");
    return static_cast<int32_t>(s);
  };

  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) fail(file, ": line ", line_no, ": blank line");
    json doc;
    try {
      doc = json::parse(line);
    } catch (const json::parse_error& e) {
      fail(file, ": line ", line_no, ": column ", e.byte, ": malformed JSON: ", parse_error_text(e));
    }
    if (!doc.is_object()) fail(file, ": line ", line_no, ": expected a JSON object, got ", type_name(doc));
    auto label_it = doc.find("label");
    if (label_it == doc.end()) fail(file, ": line ", line_no, ": missing \"label\"");
    const json& label = *label_it;
    if (!label.is_number_integer())
      fail(file, ": line ", line_no, ": \"label\" holds ", type_name(label), ", expected an integer");
    // The number of labels (largest + 1) must fit int32 too, hence the strict bound.
    if (label.is_number_unsigned() ? label.get<uint64_t>() >= static_cast<uint64_t>(std::numeric_limits<int32_t>::max())
                                   : label.get<int64_t>() >= std::numeric_limits<int32_t>::max())
      fail(file, ": line ", line_no, ": label ", label.dump(), " does not fit int32 (nor may the label count, largest + 1)");
    if (!label.is_number_unsigned() && label.get<int64_t>() < 0)
      fail(file, ": line ", line_no, ": negative label ", label.get<int64_t>());
    const auto label_value = static_cast<int32_t>(label.get<int64_t>());

    auto tokens_it = doc.find("tokens");
    if (tokens_it == doc.end()) fail(file, ": line ", line_no, ": missing \"tokens\"");
    const json& tokens = *tokens_it;
    if (!tokens.is_array())
      fail(file, ": line ", line_no, ": \"tokens\" holds ", type_name(tokens), ", expected a list of positions");
    if (tokens.size() != static_cast<size_t>(seq_len))
      fail(file, ": line ", line_no, ": expected ", seq_len, " positions, got ", tokens.size());
    for (int t = 0; t < seq_len; ++t) {
      const json& pos = tokens[static_cast<size_t>(t)];
      if (!pos.is_array() || pos.size() != 3)
        fail(file, ": line ", line_no, ": position ", t, ": expected exactly 3 lists, got ",
             pos.is_array() ? cat(pos.size(), pos.size() == 1 ? " element" : " elements") : std::string(type_name(pos)));
      for (int f = 0; f < 3; ++f) {
        if (!pos[static_cast<size_t>(f)].is_array())
          fail(file, ": line ", line_no, ": position ", t, ": field ", f, " (", field_name(f), ") holds ",
               type_name(pos[static_cast<size_t>(f)]), ", expected a list");
      }
      const json& cur = pos[2];
      if (cur.size() != 1)
        fail(file, ": line ", line_no, ": position ", t, ": field 2 (cur_word) must hold exactly one id, got ",
             cur.size());
      // Fields 0 and 1: ragged ids into their section, then the running count into its offsets.
      auto put_field = [&](int field, auto& ids_out, auto& offsets_out, uint64_t& count) {
        for (const json& v : pos[static_cast<size_t>(field)]) {
          const int32_t id = get_id(v, t, field);
          ids_out.put(id);
          if (id > max_id) max_id = id;
          ++count;
        }
        offsets_out.put(count);
      };
      put_field(0, sec.id_ids, sec.id_offsets, num_id);
      put_field(1, sec.aux_ids, sec.aux_offsets, num_aux);
      int32_t cw = get_id(cur[0], t, 2);
      if (cw > max_id) max_id = cw;
      cur_words[static_cast<size_t>(t)] = cw;
    }
    sec.cur_word.write(cur_words.data(), cur_words.size() * sizeof(int32_t));
    sec.labels.put(label_value);
    if (label_value > max_label) max_label = label_value;
    ++samples;
    progress.tick(line_no);
  }
  if (in.bad()) fail(file, ": read failed after line ", line_no);
  if (samples == 0) fail(file, ": no samples");
  progress.done(line_no);

  sec.labels.close();
  sec.cur_word.close();
  sec.id_offsets.close();
  sec.id_ids.close();
  sec.aux_offsets.close();
  sec.aux_ids.close();

  DatasetHeader h{};
  std::memcpy(h.magic, kDatasetMagic, sizeof(kDatasetMagic));
  h.version = kDatasetVersion;
  h.seq_len = static_cast<uint32_t>(seq_len);
  h.num_samples = static_cast<uint64_t>(samples);
  h.num_labels = static_cast<uint32_t>(max_label + 1);
  h.max_token_id = max_id;
  h.num_identifier_ids = num_id;
  h.num_auxiliary_ids = num_aux;
  auto align8 = [](uint64_t x) { return (x + 7) / 8 * 8; };
  uint64_t off = sizeof(DatasetHeader);
  h.labels_offset = off;
  off = align8(off + sec.labels.size());
  h.cur_word_offset = off;
  off = align8(off + sec.cur_word.size());
  h.identifier_offsets_offset = off;
  off = align8(off + sec.id_offsets.size());
  h.identifier_ids_offset = off;
  off = align8(off + sec.id_ids.size());
  h.auxiliary_offsets_offset = off;
  off = align8(off + sec.aux_offsets.size());
  h.auxiliary_ids_offset = off;
  off = align8(off + sec.aux_ids.size());
  h.file_size = off;

  {
    FileWriter out(tmp_out);
    out.put(h);
    for (FileWriter* s : {&sec.labels, &sec.cur_word, &sec.id_offsets, &sec.id_ids, &sec.aux_offsets,
                          &sec.aux_ids}) {
      out.append_file(s->path());
      out.pad_to(8);
    }
    if (out.size() != h.file_size) fail(tmp_out, ": internal error: wrote ", out.size(), " bytes, expected ", h.file_size);
    out.close();
  }
  commit_file(tmp_out, out_path);
  temps.remove_all();  // the section files; tmp_out no longer exists under its temporary name

  ConvertStats stats;
  stats.samples = samples;
  stats.seq_len = seq_len;
  stats.bytes_written = h.file_size;
  return stats;
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
  Dataset ds = Dataset::open(ebin_path);
  TempFiles temps;
  const std::string tmp_out = temps.add(temp_name(out_path, ""));
  FileWriter out(tmp_out);
  std::string line;
  const int T = ds.seq_len();
  for (int64_t s = 0; s < ds.num_samples(); ++s) {
    line.clear();
    line += "{\"label\":";
    append_int(line, ds.label(s));
    line += ",\"tokens\":[";
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
  return stats;
}

}  // namespace enhanced
