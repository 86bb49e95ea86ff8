// Reading and writing safetensors files: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets}, "__metadata__": {string: string}}, then the raw data.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace enhanced {

struct SafetensorsTensor {
  std::string dtype;  // "F32", "F64", "I32", "I64", "U64"
  std::vector<int64_t> shape;
  size_t begin = 0, end = 0;  // byte range in the data section
};

class SafetensorsReader {
 public:
  // Reads and validates the whole file: the header (at most 100 MB, nested no deeper than the
  // format's 3 levels), every tensor's dtype, shape and byte range (exactly product(shape) *
  // itemsize bytes), and the layout: the tensors cover the data section exactly, no byte shared,
  // no gap, no trailing bytes; all checked before the data is read. Errors name the file and the tensor.
  explicit SafetensorsReader(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  std::string metadata_value(const std::string& key) const;  // throws when missing
  // The tensor, after checking that it exists with this dtype and shape; errors name the file and the tensor.
  const SafetensorsTensor& check_tensor(const std::string& name, const char* dtype, const std::vector<int64_t>& shape) const;
  // Copies a tensor out after checking its dtype and shape.
  std::vector<float> floats(const std::string& name, const std::vector<int64_t>& shape) const;
  std::vector<int32_t> int32s(const std::string& name) const;
  std::vector<uint64_t> uint64s(const std::string& name) const;

 private:
  const SafetensorsTensor& find(const std::string& name, const char* dtype) const;

  std::string path_;
  std::vector<char> data_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

class SafetensorsWriter {
 public:
  void add(const std::string& name, const float* values, const std::vector<int64_t>& shape);
  void add(const std::string& name, const int32_t* values, const std::vector<int64_t>& shape);
  void add(const std::string& name, const uint64_t* values, const std::vector<int64_t>& shape);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Writes to a temporary file beside `path`, flushes it to disk and renames it over `path`, so
  // a crash or a full disk leaves any previous file intact.
  void write(const std::string& path) const;

 private:
  void add_raw(const std::string& name, const char* dtype, const void* values, size_t bytes,
               const std::vector<int64_t>& shape);

  struct Entry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<char> bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace enhanced
