#include "enhanced/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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

}  // namespace

void add_model(SafetensorsWriter& writer, const ParameterBuffer<float>& params, const std::string& prefix) {
  const ModelConfig& c = params.config;
  for (const TensorSlot& slot : parameter_layout(c))
    writer.add(prefix + slot.name, params.data.data() + slot.offset, slot.shape);
  writer.set_metadata("format", "enhanced-checkpoint");
  writer.set_metadata("format_version", "1");
  writer.set_metadata("vocab_size", std::to_string(c.vocab_size));
  writer.set_metadata("embedding_dim", std::to_string(c.embedding_dim));
  writer.set_metadata("hidden", std::to_string(c.hidden));
  writer.set_metadata("seq_len", std::to_string(c.seq_len));
  writer.set_metadata("num_labels", std::to_string(c.num_labels));
  writer.set_metadata("blend", to_string(c.blend));
  writer.set_metadata("pool", to_string(c.pool));
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
  c.vocab_size = parse_integer(file, "vocab_size");
  c.embedding_dim = static_cast<int>(parse_integer(file, "embedding_dim"));
  c.hidden = static_cast<int>(parse_integer(file, "hidden"));
  c.seq_len = static_cast<int>(parse_integer(file, "seq_len"));
  c.num_labels = static_cast<int>(parse_integer(file, "num_labels"));
  try {
    c.blend = parse_blend_mode(file.metadata_value("blend"));
    c.pool = parse_pool_mode(file.metadata_value("pool"));
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
