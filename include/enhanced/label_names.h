// A model's labels by name: `enhanced-train --label-names FILE` (one name a line), kept in the
// checkpoint's metadata as a JSON array of strings under "label_names", shown by enhanced-eval
// and enhanced-predict. A checkpoint without names is read and written exactly as before.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "enhanced/safetensors.h"

namespace enhanced {

// The metadata key of the names in last/best checkpoints (and the run state's run_options).
inline constexpr const char* kLabelNamesKey = "label_names";

// FILE's names, one a line, in label order: UTF-8, none empty, none repeated, no control
// characters (a "\r\n" line end and a leading byte-order mark are taken off). Errors name the
// file and the line: "FILE: line N: ...".
std::vector<std::string> read_label_names(const std::string& path);

// Each name as a file's are checked (none empty or repeated, UTF-8, no control characters):
// errors name `source` and the item ("SOURCE item 2: an empty name ...").
void check_label_names(const std::vector<std::string>& names, const std::string& source);

// Exactly one name a label: errors name `source` (the file or checkpoint they came from).
void check_label_names_count(const std::vector<std::string>& names, int num_labels, const std::string& source);

// The names as the metadata holds them: a JSON array of strings.
std::string label_names_json(const std::vector<std::string>& names);

// `metadata` with the names added (unchanged when there are none, so a run without names writes
// the same bytes as before names existed).
std::map<std::string, std::string> with_label_names(std::map<std::string, std::string> metadata,
                                                    const std::vector<std::string>& names);

// A checkpoint's names, checked as a file's are and against its num_labels; empty when it has
// none. Errors name the file.
std::vector<std::string> checkpoint_label_names(const SafetensorsReader& file, int num_labels);

// A CSV field (RFC 4180): quoted, quotes doubled, when it holds a comma, a quote or a space at
// either end; as it is otherwise.
std::string csv_field(const std::string& text);

}  // namespace enhanced
