// Fuzzes the labels' names both ways they are read. The input as a --label-names file
// (read_label_names: lines, a byte-order mark, CRLF, UTF-8, control characters, duplicates, the
// length bound); names it accepts must go into a checkpoint's metadata (label_names_json) and come
// back out of it (checkpoint_label_names) unchanged, as enhanced-eval and enhanced-predict read
// them, and each must make a CSV field. Then the input as that metadata value itself, a JSON array
// of names (checkpoint_label_names with L = 4, the label-names tests' L). Any Error is a refusal;
// a crash, a sanitizer report or names that do not come back is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "enhanced/common.h"
#include "enhanced/label_names.h"
#include "enhanced/safetensors.h"
#include "fuzz_file.h"

namespace {

// A safetensors file without tensors whose metadata holds `names` under label_names: its 8-byte
// length, then the JSON header (bytes that are not UTF-8 become U+FFFD: JSON text is UTF-8).
std::string checkpoint_with_names(std::string_view names) {
  const nlohmann::json header{{"__metadata__", {{enhanced::kLabelNamesKey, std::string(names)}}}};
  const std::string text = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string file(8, '\0');
  const uint64_t length = text.size();
  std::memcpy(file.data(), &length, 8);  // little-endian, as on every machine this builds for
  return file + text;
}

// checkpoint_label_names on a checkpoint whose metadata value is `names`, read from `file`.
std::vector<std::string> names_in_checkpoint(enhanced::fuzz::FuzzFile& file, std::string_view names,
                                             int num_labels) {
  const std::string bytes = checkpoint_with_names(names);
  const std::string& path = file.hold(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return enhanced::checkpoint_label_names(enhanced::SafetensorsReader(path), num_labels);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace enhanced;
  static fuzz::FuzzFile checkpoint;  // a second in-memory file: the input file stays as it is
  std::vector<std::string> names;
  try {
    names = read_label_names(fuzz::input_file().hold(data, size));
  } catch (const Error&) {
  }
  if (!names.empty()) {
    for (const std::string& name : names) static_cast<void>(csv_field(name));
    // A names file enhanced-train takes must give a checkpoint whose names the other apps take.
    try {
      if (names_in_checkpoint(checkpoint, label_names_json(names), static_cast<int>(names.size())) != names)
        std::abort();
    } catch (const Error&) {
      std::abort();
    }
  }
  try {
    names_in_checkpoint(checkpoint, std::string_view(reinterpret_cast<const char*>(data), size), 4);
  } catch (const Error&) {
  }
  return 0;
}
