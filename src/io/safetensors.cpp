#include "enhanced/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "enhanced/atomic_file.h"
#include "enhanced/common.h"
#include "enhanced/text.h"
#include "io/input_file.h"

namespace enhanced {
namespace {

size_t dtype_size(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  return 0;
}

// The product of the extents, or false when it does not fit size_t (a header can claim any shape).
bool checked_element_count(const std::vector<int64_t>& shape, size_t& count) {
  count = 1;
  for (int64_t extent : shape)
    if (extent < 0 || __builtin_mul_overflow(count, static_cast<size_t>(extent), &count)) return false;
  return true;
}

// The element count of a shape already validated (the reader's) or built by the caller (the writer's).
size_t element_count(const std::vector<int64_t>& shape) {
  size_t count = 0;
  if (!checked_element_count(shape, count)) fail("safetensors: element count of a shape overflows");
  return count;
}

// Copies `bytes` bytes; a zero-element tensor may have null pointers on either side, which
// memcpy does not allow even for zero bytes.
void copy_bytes(void* to, const void* from, size_t bytes) {
  if (bytes) std::memcpy(to, from, bytes);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

namespace {

// The format's own bound on the header (the safetensors crate's MAX_HEADER_SIZE), checked before
// the header is read: a length field of 2^60 never becomes an allocation.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// The deepest the format nests: the header object, a tensor's entry, its shape or offsets list.
constexpr int kMaxHeaderDepth = 3;

// Refuses a header nested deeper than the format's three levels, before it is parsed: a value
// 100,000 lists deep would overflow the stack of any recursive walk (dump(), a comparison).
// Brackets inside strings do not count.
void check_nesting(const std::string& path, const std::string& header) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < header.size(); ++i) {
    const char c = header[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxHeaderDepth)
        fail(path, ": header nests deeper than ", kMaxHeaderDepth, " levels (object, tensor, shape), at byte ", 8 + i);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

// A JSON value from the header as a message quotes it: bounded (depth by check_nesting, length here).
std::string quoted(const nlohmann::json& value) { return excerpt(value.dump()); }

// One header entry {dtype, shape, data_offsets}, checked on its own: a known dtype, integer
// extents >= 0, two unsigned offsets in order inside the data section, and exactly
// product(shape) * itemsize bytes (the product checked for overflow).
SafetensorsTensor parse_tensor_entry(const std::string& path, const std::string& name, const nlohmann::json& entry,
                                     size_t data_size) {
  auto where = [&] { return cat(path, ": tensor '", excerpt(name), "': "); };
  if (!entry.is_object()) fail(where(), "entry is not an object");
  SafetensorsTensor tensor;
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) fail(where(), "malformed entry (no '", key, "')");
  const nlohmann::json &dtype = entry["dtype"], &shape = entry["shape"], &offsets = entry["data_offsets"];
  if (!dtype.is_string()) fail(where(), "dtype is not a string");
  tensor.dtype = dtype.get<std::string>();
  const size_t width = dtype_size(tensor.dtype);
  if (width == 0) fail(where(), "unsupported dtype ", excerpt(tensor.dtype));
  if (!shape.is_array()) fail(where(), "shape is not a list");
  for (const nlohmann::json& extent : shape) {
    if (!extent.is_number_integer() || (extent.is_number_unsigned() && extent.get<uint64_t>() > INT64_MAX))
      fail(where(), "shape holds ", quoted(extent), ", expected integers");
    tensor.shape.push_back(extent.get<int64_t>());
  }
  for (int64_t extent : tensor.shape)
    if (extent < 0) fail(where(), "negative extent in shape ", shape_text(tensor.shape));
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
    fail(where(), "data_offsets must hold 2 non-negative integers, got ", quoted(offsets));
  tensor.begin = offsets[0].get<uint64_t>();
  tensor.end = offsets[1].get<uint64_t>();
  if (tensor.begin > tensor.end || tensor.end > data_size)
    fail(where(), "data [", tensor.begin, ", ", tensor.end, ") outside the ", data_size,
         "-byte data section (truncated file?)");
  size_t count = 0, bytes = 0;
  if (!checked_element_count(tensor.shape, count) || __builtin_mul_overflow(count, width, &bytes))
    fail(where(), "shape ", shape_text(tensor.shape), " of ", tensor.dtype, " has more bytes than fit in memory");
  if (tensor.end - tensor.begin != bytes)
    fail(where(), tensor.end - tensor.begin, " bytes do not match shape ", shape_text(tensor.shape), " of ",
         tensor.dtype, " (", bytes, " bytes)");
  return tensor;
}

// The format's layout rule: in the order of their offsets, the tensors cover the data section
// from its first byte to its last, each beginning where the one before ends (no byte shared, no
// gap, nothing after the last). Returns the end of the last tensor.
size_t check_layout(const std::string& path, const std::map<std::string, SafetensorsTensor>& tensors) {
  std::vector<std::pair<const std::string*, const SafetensorsTensor*>> by_offset;
  for (const auto& [name, tensor] : tensors) by_offset.emplace_back(&name, &tensor);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  size_t end = 0;
  for (size_t i = 0; i < by_offset.size(); ++i) {
    const SafetensorsTensor& tensor = *by_offset[i].second;
    const auto where = [&] {
      return cat(path, ": tensor '", excerpt(*by_offset[i].first), "': data [", tensor.begin, ", ", tensor.end, ") ");
    };
    if (tensor.begin < end)
      fail(where(), "overlaps tensor '", excerpt(*by_offset[i - 1].first), "' at [", by_offset[i - 1].second->begin,
           ", ", end, ")");
    if (tensor.begin > end)
      fail(where(), "leaves bytes [", end, ", ", tensor.begin, ") of the data section unused");
    end = tensor.end;
  }
  return end;
}

// The header's JSON: bounded in length and depth before it is parsed.
nlohmann::json read_header(const std::string& path, std::ifstream& in, size_t file_size) {
  if (file_size < 8) fail(path, ": not a safetensors file (", file_size, " bytes, too short for a header)");
  uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), 8);
  if (header_size > kMaxHeaderBytes)
    fail(path, ": not safetensors: header of ", header_size, " bytes, more than the format's ", kMaxHeaderBytes);
  if (header_size > file_size - 8)
    fail(path, ": truncated or not safetensors: header of ", header_size, " bytes, file has ", file_size);
  std::string header(header_size, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_size));
  if (!in) fail(path, ": read error");
  check_nesting(path, header);
  try {
    return nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": header is not valid JSON (", excerpt(e.what(), 160), ")");
  }
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  InputFile file = open_input_file(path);
  const nlohmann::json json = read_header(path, file.stream, file.size);
  const size_t data_begin = static_cast<size_t>(file.stream.tellg());
  if (!json.is_object()) fail(path, ": header is not a JSON object");
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (it.key() != "__metadata__") {
      tensors_[it.key()] = parse_tensor_entry(path, it.key(), *it, file.size - data_begin);
      continue;
    }
    if (!it->is_object()) fail(path, ": __metadata__ is not an object");
    for (auto m = it->begin(); m != it->end(); ++m) {
      if (!m->is_string()) fail(path, ": metadata '", excerpt(m.key()), "' is not a string");
      metadata_[m.key()] = m->get<std::string>();
    }
  }
  // Checked before the data is read: a file padded to gigabytes is refused, not loaded.
  const size_t data_size = check_layout(path, tensors_);
  if (data_begin + data_size != file.size)
    fail(path, ": ", file.size, " bytes, but its tensors end at ", data_begin + data_size);
  allocating(cat("reading ", path, " (", data_size, " bytes of tensors)"), [&] { data_.resize(data_size); });
  file.stream.read(data_.data(), static_cast<std::streamsize>(data_.size()));
  if (!file.stream) fail(path, ": read error");
}

std::string SafetensorsReader::metadata_value(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) fail(path_, ": metadata has no '", key, "'");
  return it->second;
}

const SafetensorsTensor& SafetensorsReader::find(const std::string& name, const char* dtype) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path_, ": no tensor named '", name, "'");
  if (it->second.dtype != dtype) fail(path_, ": tensor '", name, "' is ", it->second.dtype, ", expected ", dtype);
  return it->second;
}

const SafetensorsTensor& SafetensorsReader::check_tensor(const std::string& name, const char* dtype,
                                                         const std::vector<int64_t>& shape) const {
  const SafetensorsTensor& tensor = find(name, dtype);
  if (tensor.shape != shape)
    fail(path_, ": tensor '", name, "' has shape ", shape_text(tensor.shape), ", expected ", shape_text(shape));
  return tensor;
}

std::vector<float> SafetensorsReader::floats(const std::string& name, const std::vector<int64_t>& shape) const {
  const SafetensorsTensor& tensor = check_tensor(name, "F32", shape);
  std::vector<float> values(element_count(shape));
  copy_bytes(values.data(), data_.data() + tensor.begin, tensor.end - tensor.begin);
  return values;
}

std::vector<int32_t> SafetensorsReader::int32s(const std::string& name) const {
  const SafetensorsTensor& tensor = find(name, "I32");
  std::vector<int32_t> values(element_count(tensor.shape));
  copy_bytes(values.data(), data_.data() + tensor.begin, tensor.end - tensor.begin);
  return values;
}

std::vector<uint64_t> SafetensorsReader::uint64s(const std::string& name) const {
  const SafetensorsTensor& tensor = find(name, "U64");
  std::vector<uint64_t> values(element_count(tensor.shape));
  copy_bytes(values.data(), data_.data() + tensor.begin, tensor.end - tensor.begin);
  return values;
}

void SafetensorsWriter::add_raw(const std::string& name, const char* dtype, const void* values, size_t bytes,
                                const std::vector<int64_t>& shape) {
  Entry entry{name, dtype, shape, std::vector<char>(bytes)};
  copy_bytes(entry.bytes.data(), values, bytes);
  entries_.push_back(std::move(entry));
}

void SafetensorsWriter::add(const std::string& name, const float* values, const std::vector<int64_t>& shape) {
  add_raw(name, "F32", values, element_count(shape) * 4, shape);
}
void SafetensorsWriter::add(const std::string& name, const int32_t* values, const std::vector<int64_t>& shape) {
  add_raw(name, "I32", values, element_count(shape) * 4, shape);
}
void SafetensorsWriter::add(const std::string& name, const uint64_t* values, const std::vector<int64_t>& shape) {
  add_raw(name, "U64", values, element_count(shape) * 8, shape);
}

void SafetensorsWriter::write(const std::string& path) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  size_t offset = 0;
  for (const Entry& entry : entries_) {
    header[entry.name] = {{"dtype", entry.dtype}, {"shape", entry.shape}, {"data_offsets", {offset, offset + entry.bytes.size()}}};
    offset += entry.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned, as the format suggests
  const uint64_t header_size = text.size();
  std::vector<std::pair<const void*, size_t>> pieces = {{&header_size, 8}, {text.data(), text.size()}};
  for (const Entry& entry : entries_) pieces.emplace_back(entry.bytes.data(), entry.bytes.size());
  write_file_atomically(path, pieces);
}

}  // namespace enhanced
