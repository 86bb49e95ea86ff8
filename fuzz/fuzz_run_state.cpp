// Fuzzes what --resume reads from a training state file's metadata: the run's position, totals
// and validations (read_run_position) and the recorded options through the option table
// (recorded_options, resumed_options). The input is the metadata itself, one "key=value" a line
// (the value runs to the line's end; the state file's values are one-line JSON or numbers), so
// that mutations reach the values instead of breaking the file's framing; it is written as the
// header of a safetensors file without tensors and opened as --resume opens one. Seeds: the
// state files the tests write, turned into lines by scripts/fuzz. Any Error is a refusal.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "enhanced/common.h"
#include "enhanced/safetensors.h"
#include "fuzz_file.h"
#include "train/run_options.h"
#include "train/run_state.h"

namespace {

// A safetensors file whose header holds only `metadata`: its 8-byte length, then the JSON.
std::string state_file_of(std::string_view input) {
  nlohmann::json metadata = nlohmann::json::object();
  for (size_t at = 0; at < input.size();) {
    const size_t end = std::min(input.find('\n', at), input.size());
    const std::string_view line = input.substr(at, end - at);
    const size_t equals = line.find('=');
    if (equals != std::string_view::npos) metadata[std::string(line.substr(0, equals))] = std::string(line.substr(equals + 1));
    at = end + 1;
  }
  // Bytes that are not UTF-8 become U+FFFD (JSON text must be UTF-8).
  const std::string header =
      nlohmann::json{{"__metadata__", metadata}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string file(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(file.data(), &length, 8);  // little-endian, as on every machine this builds for
  return file + header;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace enhanced;
  const std::string file = state_file_of(std::string_view(reinterpret_cast<const char*>(data), size));
  const std::string& path = fuzz::input_file().hold(reinterpret_cast<const uint8_t*>(file.data()), file.size());
  try {
    const SafetensorsReader state(path);
    try {
      read_run_position(state);
    } catch (const Error&) {
    }
    resumed_options(TrainOptions{}, recorded_options(state), state.path());
  } catch (const Error&) {
  }
  return 0;
}
