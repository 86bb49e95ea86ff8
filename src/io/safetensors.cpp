#include "enhanced/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "enhanced/atomic_file.h"
#include "enhanced/common.h"

namespace enhanced {
namespace {

size_t dtype_size(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  return 0;
}

size_t element_count(const std::vector<int64_t>& shape) {
  size_t count = 1;
  for (int64_t extent : shape) count *= static_cast<size_t>(extent);
  return count;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  std::error_code error;
  if (std::filesystem::exists(path, error) && !std::filesystem::is_regular_file(path, error))
    fail(path, ": not a regular file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, ": cannot open (", std::strerror(errno), ")");
  const auto size = static_cast<size_t>(in.tellg());
  in.seekg(0);
  if (size < 8) fail(path, ": not a safetensors file (", size, " bytes, too short for a header)");
  uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), 8);
  if (header_size > size - 8) fail(path, ": truncated or not safetensors: header of ", header_size, " bytes, file has ", size);
  std::string header(header_size, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_size));
  allocating(cat("reading ", path, " (", size, " bytes)"), [&] { data_.resize(size - 8 - header_size); });
  in.read(data_.data(), static_cast<std::streamsize>(data_.size()));
  if (!in) fail(path, ": read error");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": header is not valid JSON (", e.what(), ")");
  }
  if (!json.is_object()) fail(path, ": header is not a JSON object");
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(path, ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail(path, ": metadata '", m.key(), "' is not a string");
        metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    SafetensorsTensor tensor;
    try {
      tensor.dtype = it->at("dtype").get<std::string>();
      tensor.shape = it->at("shape").get<std::vector<int64_t>>();
      const auto offsets = it->at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2) fail(path, ": tensor '", it.key(), "': data_offsets must hold 2 numbers");
      tensor.begin = offsets[0];
      tensor.end = offsets[1];
    } catch (const nlohmann::json::exception& e) {
      fail(path, ": tensor '", it.key(), "': malformed entry (", e.what(), ")");
    }
    const size_t width = dtype_size(tensor.dtype);
    if (width == 0) fail(path, ": tensor '", it.key(), "': unsupported dtype ", tensor.dtype);
    for (int64_t extent : tensor.shape)
      if (extent < 0) fail(path, ": tensor '", it.key(), "': negative extent in shape ", shape_text(tensor.shape));
    if (tensor.begin > tensor.end || tensor.end > data_.size())
      fail(path, ": tensor '", it.key(), "': data [", tensor.begin, ", ", tensor.end, ") outside the ", data_.size(),
           "-byte data section (truncated file?)");
    if (tensor.end - tensor.begin != element_count(tensor.shape) * width)
      fail(path, ": tensor '", it.key(), "': ", tensor.end - tensor.begin, " bytes do not match shape ",
           shape_text(tensor.shape), " of ", tensor.dtype);
    tensors_[it.key()] = tensor;
  }
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

std::vector<float> SafetensorsReader::floats(const std::string& name, const std::vector<int64_t>& shape) const {
  const SafetensorsTensor& tensor = find(name, "F32");
  if (tensor.shape != shape)
    fail(path_, ": tensor '", name, "' has shape ", shape_text(tensor.shape), ", the model expects ", shape_text(shape));
  std::vector<float> values(element_count(shape));
  std::memcpy(values.data(), data_.data() + tensor.begin, tensor.end - tensor.begin);
  return values;
}

std::vector<int32_t> SafetensorsReader::int32s(const std::string& name) const {
  const SafetensorsTensor& tensor = find(name, "I32");
  std::vector<int32_t> values(element_count(tensor.shape));
  std::memcpy(values.data(), data_.data() + tensor.begin, tensor.end - tensor.begin);
  return values;
}

std::vector<uint64_t> SafetensorsReader::uint64s(const std::string& name) const {
  const SafetensorsTensor& tensor = find(name, "U64");
  std::vector<uint64_t> values(element_count(tensor.shape));
  std::memcpy(values.data(), data_.data() + tensor.begin, tensor.end - tensor.begin);
  return values;
}

void SafetensorsWriter::add_raw(const std::string& name, const char* dtype, const void* values, size_t bytes,
                                const std::vector<int64_t>& shape) {
  Entry entry{name, dtype, shape, std::vector<char>(bytes)};
  if (bytes) std::memcpy(entry.bytes.data(), values, bytes);
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
