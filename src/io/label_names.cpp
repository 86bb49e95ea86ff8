#include "enhanced/label_names.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>

#include "enhanced/common.h"
#include "enhanced/text.h"
#include "io/line_reader.h"

namespace enhanced {
namespace {

// A name longer than this is no label name (and no line of a names file is read past it).
constexpr size_t kMaxNameBytes = 1024;

// What is wrong with a name ("" when nothing is); `seen`: the names before it.
std::string name_problem(const std::string& name, const std::set<std::string>& seen) {
  if (name.empty()) return "an empty name (every label needs one)";
  if (name.size() > kMaxNameBytes) return cat("a name longer than ", kMaxNameBytes, " bytes");
  for (size_t at = 0; at < name.size();) {
    const size_t length = utf8_sequence(name, at);
    if (length == 0) return cat("not UTF-8 (byte ", at + 1, " of the name)");
    if (length == 1 && (static_cast<unsigned char>(name[at]) < 0x20 || name[at] == 0x7F))
      return cat("a control character (byte ", at + 1, " of the name)");
    at += length;
  }
  if (seen.count(name)) return cat("'", excerpt(name), "' is a duplicate (each label needs its own name)");
  return "";
}

}  // namespace

std::vector<std::string> read_label_names(const std::string& path) {
  LineReader reader(path, kMaxNameBytes, "a label name");
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (std::string line; reader.next(line);) {
    if (names.empty() && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    if (const std::string problem = name_problem(line, seen); !problem.empty())
      fail(path, ": line ", names.size() + 1, ": ", problem);
    seen.insert(line);
    names.push_back(std::move(line));
  }
  if (names.empty()) fail(path, ": no label names (one name a line, a line for each label)");
  return names;
}

void check_label_names_count(const std::vector<std::string>& names, int num_labels, const std::string& source) {
  if (names.size() != static_cast<size_t>(num_labels))
    fail(source, ": ", names.size(), " label names, but the model has ", num_labels,
         " labels (one name a line, a line for each label)");
}

void check_label_names(const std::vector<std::string>& names, const std::string& source) {
  std::set<std::string> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    if (const std::string problem = name_problem(names[i], seen); !problem.empty())
      fail(source, " item ", i, ": ", problem);
    seen.insert(names[i]);
  }
}

std::string label_names_json(const std::vector<std::string>& names) { return nlohmann::json(names).dump(); }

std::map<std::string, std::string> with_label_names(std::map<std::string, std::string> metadata,
                                                    const std::vector<std::string>& names) {
  if (!names.empty()) metadata[kLabelNamesKey] = label_names_json(names);
  return metadata;
}

std::vector<std::string> checkpoint_label_names(const SafetensorsReader& file, int num_labels) {
  if (!file.metadata().count(kLabelNamesKey)) return {};
  const std::string what = cat(file.path(), ": metadata '", kLabelNamesKey, "'");
  const nlohmann::json j = nlohmann::json::parse(file.metadata_value(kLabelNamesKey), nullptr, false);
  if (!j.is_array()) fail(what, " is not a JSON array of names");
  std::vector<std::string> names;
  for (const nlohmann::json& name : j) {
    if (!name.is_string()) fail(what, " item ", names.size(), " is not a string");
    names.push_back(name.get<std::string>());
  }
  check_label_names(names, what);
  check_label_names_count(names, num_labels, what);
  return names;
}

std::string csv_field(const std::string& text) {
  const bool quote = text.find_first_of(",\"") != std::string::npos ||
                     (!text.empty() && (text.front() == ' ' || text.back() == ' '));
  if (!quote) return text;
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace enhanced
