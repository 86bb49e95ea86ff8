#include "enhanced/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "enhanced/batch.h"
#include "enhanced/common.h"

namespace enhanced {
namespace {

int64_t parse_integer(const SafetensorsReader& file, const std::string& key) {
  const std::string text = file.metadata_value(key);
  try {
    size_t used = 0;
    const long long value = std::stoll(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  fail(file.path(), ": metadata '", key, "' is not an integer: '", text, "'");
}

// The model's hyper-parameters in a checkpoint's metadata: one row per field, written and read
// from this table only.
struct MetadataField {
  const char* key;
  std::string (*write)(const ModelConfig&);
  void (*read)(ModelConfig&, const std::string& text);  // text already checked when an integer
  bool integer;
};

const MetadataField kModelMetadata[] = {
    {"vocab_size", [](const ModelConfig& c) { return std::to_string(c.vocab_size); },
     [](ModelConfig& c, const std::string& t) { c.vocab_size = std::stoll(t); }, true},
    {"embedding_dim", [](const ModelConfig& c) { return std::to_string(c.embedding_dim); },
     [](ModelConfig& c, const std::string& t) { c.embedding_dim = static_cast<int>(std::stoll(t)); }, true},
    {"hidden", [](const ModelConfig& c) { return std::to_string(c.hidden); },
     [](ModelConfig& c, const std::string& t) { c.hidden = static_cast<int>(std::stoll(t)); }, true},
    {"seq_len", [](const ModelConfig& c) { return std::to_string(c.seq_len); },
     [](ModelConfig& c, const std::string& t) { c.seq_len = static_cast<int>(std::stoll(t)); }, true},
    {"num_labels", [](const ModelConfig& c) { return std::to_string(c.num_labels); },
     [](ModelConfig& c, const std::string& t) { c.num_labels = static_cast<int>(std::stoll(t)); }, true},
    {"blend", [](const ModelConfig& c) { return std::string(to_string(c.blend)); },
     [](ModelConfig& c, const std::string& t) { c.blend = parse_blend_mode(t); }, false},
    {"pool", [](const ModelConfig& c) { return std::string(to_string(c.pool)); },
     [](ModelConfig& c, const std::string& t) { c.pool = parse_pool_mode(t); }, false},
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
    if (field.integer) field.read(c, std::to_string(parse_integer(file, field.key)));
  try {
    for (const MetadataField& field : kModelMetadata)
      if (!field.integer) field.read(c, file.metadata_value(field.key));
    c.validate();
  } catch (const Error& e) {
    fail(file.path(), ": ", e.what());
  }
  return c;
}

ParameterBuffer<float> read_model(const SafetensorsReader& file, const std::string& prefix) {
  ParameterBuffer<float> params(checkpoint_config(file));
  for (const TensorSlot& slot : parameter_layout(params.config)) {
    const std::vector<float> values = file.floats(prefix + slot.name, slot.shape);
    for (size_t i = 0; i < values.size(); ++i)
      if (!std::isfinite(values[i])) fail(file.path(), ": tensor '", slot.name, "' element ", i, " is ", values[i]);
    std::memcpy(params.data.data() + slot.offset, values.data(), values.size() * sizeof(float));
  }
  return params;
}

ParameterBuffer<float> load_checkpoint(const std::string& path) { return read_model(SafetensorsReader(path)); }

int64_t metadata_integer(const SafetensorsReader& file, const std::string& key) { return parse_integer(file, key); }

}  // namespace enhanced
