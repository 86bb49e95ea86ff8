#include "enhanced/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <cmath>
#include <cstring>
#include <string>

#include "enhanced/batch.h"
#include "enhanced/common.h"

namespace enhanced {
namespace {

// A metadata integer in [lowest, highest]: a value out of range is refused with its key, never
// wrapped into the int the field holds.
int64_t parse_integer(const SafetensorsReader& file, const std::string& key, int64_t lowest = INT64_MIN,
                      int64_t highest = INT64_MAX) {
  const std::string text = file.metadata_value(key);
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range || (error == std::errc() && end == text.data() + text.size() &&
                                                  (value < lowest || value > highest)))
    fail(file.path(), ": metadata '", key, "' is ", text, ", outside ", lowest, "..", highest);
  if (error != std::errc() || end != text.data() + text.size() || text.empty())
    fail(file.path(), ": metadata '", key, "' is not an integer: '", text, "'");
  return value;
}

// The model's hyper-parameters in a checkpoint's metadata: one row per field, written and read
// from this table only.
struct MetadataField {
  const char* key;
  std::string (*write)(const ModelConfig&);
  void (*read)(ModelConfig&, const std::string& text);  // text already checked when an integer
  int64_t highest;  // integers: the largest value the field holds (ModelConfig::validate asks more); 0: a string
};

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

const MetadataField kModelMetadata[] = {
    {"vocab_size", [](const ModelConfig& c) { return std::to_string(c.vocab_size); },
     [](ModelConfig& c, const std::string& t) { c.vocab_size = std::stoll(t); }, INT64_MAX},
    {"embedding_dim", [](const ModelConfig& c) { return std::to_string(c.embedding_dim); },
     [](ModelConfig& c, const std::string& t) { c.embedding_dim = static_cast<int>(std::stoll(t)); }, kIntMax},
    {"hidden", [](const ModelConfig& c) { return std::to_string(c.hidden); },
     [](ModelConfig& c, const std::string& t) { c.hidden = static_cast<int>(std::stoll(t)); }, kIntMax},
    {"seq_len", [](const ModelConfig& c) { return std::to_string(c.seq_len); },
     [](ModelConfig& c, const std::string& t) { c.seq_len = static_cast<int>(std::stoll(t)); }, kIntMax},
    {"num_labels", [](const ModelConfig& c) { return std::to_string(c.num_labels); },
     [](ModelConfig& c, const std::string& t) { c.num_labels = static_cast<int>(std::stoll(t)); }, kIntMax},
    {"blend", [](const ModelConfig& c) { return std::string(to_string(c.blend)); },
     [](ModelConfig& c, const std::string& t) { c.blend = parse_blend_mode(t); }, 0},
    {"pool", [](const ModelConfig& c) { return std::string(to_string(c.pool)); },
     [](ModelConfig& c, const std::string& t) { c.pool = parse_pool_mode(t); }, 0},
};

}  // namespace

void add_model(SafetensorsWriter& writer, const ParameterBuffer<float>& params, const std::string& prefix) {
  const ModelConfig& c = params.config;
  for (const TensorSlot& slot : parameter_layout(c))
    writer.add(prefix + slot.name, params.data.data() + slot.offset, slot.shape);
  writer.set_metadata("format", "enhanced-checkpoint");
  writer.set_metadata("format_version", "1");
  for (const MetadataField& field : kModelMetadata) writer.set_metadata(field.key, field.write(c));
}

void save_checkpoint(const std::string& path, const ParameterBuffer<float>& params,
                     const std::map<std::string, std::string>& extra_metadata) {
  SafetensorsWriter writer;
  add_model(writer, params);
  for (const auto& [key, value] : extra_metadata) writer.set_metadata(key, value);
  writer.write(path);
}

void save_batch(const std::string& path, const Batch& batch) {
  SafetensorsWriter writer;
  auto add = [&](const char* name, const std::vector<int32_t>& values) {
    writer.add(name, values.data(), {static_cast<int64_t>(values.size())});
  };
  add("identifier_offsets", batch.identifier_offsets);
  add("identifier_ids", batch.identifier_ids);
  add("cur_word_ids", batch.cur_word_ids);
  add("labels", batch.labels);
  writer.set_metadata("batch_size", std::to_string(batch.size));
  writer.set_metadata("seq_len", std::to_string(batch.seq_len));
  writer.write(path);
}

ModelConfig checkpoint_config(const SafetensorsReader& file) {
  ModelConfig c;
  for (const MetadataField& field : kModelMetadata)
    if (field.highest) {
      const int64_t value = parse_integer(file, field.key, std::numeric_limits<int>::min(), field.highest);
      field.read(c, std::to_string(value));
    }
  try {
    for (const MetadataField& field : kModelMetadata)
      if (!field.highest) field.read(c, file.metadata_value(field.key));
    c.validate();
  } catch (const Error& e) {
    fail(file.path(), ": ", e.what());
  }
  return c;
}

ParameterBuffer<float> read_model(const SafetensorsReader& file, const std::string& prefix) {
  const ModelConfig config = checkpoint_config(file);
  // Every tensor the config implies is checked before the buffer is allocated: metadata claiming
  // a huge model in a small file is refused by its first mismatching tensor, not by the allocator.
  for (const TensorSlot& slot : parameter_layout(config)) file.check_tensor(prefix + slot.name, "F32", slot.shape);
  ParameterBuffer<float> params(config);
  for (const TensorSlot& slot : parameter_layout(params.config)) {
    const std::vector<float> values = file.floats(prefix + slot.name, slot.shape);
    for (size_t i = 0; i < values.size(); ++i)
      if (!std::isfinite(values[i])) fail(file.path(), ": tensor '", prefix + slot.name, "' element ", i, " is ", values[i]);
    if (!values.empty()) std::memcpy(params.data.data() + slot.offset, values.data(), values.size() * sizeof(float));
  }
  return params;
}

ParameterBuffer<float> load_checkpoint(const std::string& path) { return read_model(SafetensorsReader(path)); }

int64_t metadata_integer(const SafetensorsReader& file, const std::string& key) { return parse_integer(file, key); }

}  // namespace enhanced
