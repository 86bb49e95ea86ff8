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
#include "enhanced/text.h"

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
    fail(file.path(), ": metadata '", key, "' is ", excerpt(text), ", outside ", lowest, "..", highest);
  if (error != std::errc() || end != text.data() + text.size() || text.empty())
    fail(file.path(), ": metadata '", key, "' is not an integer: '", excerpt(text), "'");
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
    // Quoted short: no mode's name is longer than an excerpt, so a long value fails as one.
    for (const MetadataField& field : kModelMetadata)
      if (!field.highest) field.read(c, excerpt(file.metadata_value(field.key)));
    c.validate();
  } catch (const Error& e) {
    fail(file.path(), ": ", e.what());
  }
  return c;
}

namespace {

// The tensors of `config`'s model from `file`, checked (names, shapes, finite values).
ParameterBuffer<float> read_model_tensors(const SafetensorsReader& file, const ModelConfig& config,
                                          const std::string& prefix) {
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

// A tensor's shape where the bare model is read from it: present, F32 and of rank 2.
const std::vector<int64_t>& matrix_shape(const SafetensorsReader& file, const std::string& name, const char* meaning) {
  const auto it = file.tensors().find(name);
  if (it == file.tensors().end()) fail(file.path(), ": missing tensor '", name, "'");
  if (it->second.dtype != "F32")
    fail(file.path(), ": tensor '", name, "' is ", excerpt(it->second.dtype), ", expected F32");
  if (it->second.shape.size() != 2)
    fail(file.path(), ": tensor '", name, "' has ", it->second.shape.size(), " dimensions, expected 2 ", meaning);
  return it->second.shape;
}

std::string shape_summary(const ModelConfig& c) {
  return cat("V = ", c.vocab_size, ", D = ", c.embedding_dim, ", H = ", c.hidden, ", T = ", c.seq_len, ", L = ",
             c.num_labels, ", ", to_string(c.pool), " pooling");
}

}  // namespace

ParameterBuffer<float> read_model(const SafetensorsReader& file, const std::string& prefix) {
  return read_model_tensors(file, checkpoint_config(file), prefix);
}

bool has_model_metadata(const SafetensorsReader& file) {
  if (file.metadata().count("format") && file.metadata().at("format") == "enhanced-checkpoint") return true;
  for (const MetadataField& field : kModelMetadata)
    if (file.metadata().count(field.key)) return true;
  return false;
}

ModelConfig bare_checkpoint_config(const SafetensorsReader& file, const BareModelChoice& choice) {
  ModelConfig c;
  c.num_labels = 1;  // the names of the tensors do not depend on the sizes
  std::string missing, unknown;
  const std::vector<TensorSlot> names = parameter_layout(c);
  for (const TensorSlot& slot : names)
    if (!file.has(slot.name)) missing += cat(missing.empty() ? "" : ", ", "'", slot.name, "'");
  for (const auto& entry : file.tensors()) {  // not a structured binding: clang 14 cannot capture one
    const std::string& name = entry.first;
    if (std::none_of(names.begin(), names.end(), [&](const TensorSlot& slot) { return slot.name == name; }))
      unknown += cat(unknown.empty() ? "" : ", ", "'", excerpt(name), "'");
  }
  if (!missing.empty() || !unknown.empty())
    fail(file.path(), ": no engine metadata, and the tensors are not the model's:", missing.empty() ? "" : " missing ",
         missing, !missing.empty() && !unknown.empty() ? ";" : "", unknown.empty() ? "" : " unknown ", excerpt(unknown, 300));
  // Copies of two numbers each: GCC 13 warns that a reference might dangle through the name's temporary.
  const std::vector<int64_t> embedding = matrix_shape(file, "embedding.weight", "(V, D)");
  const std::vector<int64_t> recurrent = matrix_shape(file, "lstm.weight_hh_l0", "(4H, H)");
  const std::vector<int64_t> dense = matrix_shape(file, "dense.weight", "(L, F)");
  if (recurrent[0] != 4 * recurrent[1])
    fail(file.path(), ": tensor 'lstm.weight_hh_l0' is (", recurrent[0], ", ", recurrent[1], "): (4H, H) needs ",
         recurrent[0], " rows = 4 x ", recurrent[1], " = ", 4 * recurrent[1]);
  const auto in_int = [&](int64_t value, const char* what) {
    if (value <= 0 || value > std::numeric_limits<int>::max())
      fail(file.path(), ": ", what, " is ", value, ", outside 1..", std::numeric_limits<int>::max());
    return static_cast<int>(value);
  };
  c.vocab_size = embedding[0];
  c.embedding_dim = in_int(embedding[1], "D (embedding.weight's columns)");
  c.hidden = in_int(recurrent[1], "H (lstm.weight_hh_l0's columns)");
  c.num_labels = in_int(dense[0], "L (dense.weight's rows)");
  c.blend = choice.blend;
  c.pool = choice.pool;
  if (c.pool == PoolMode::feature) {
    c.seq_len = in_int(dense[1], "T (dense.weight's columns, feature pooling)");
  } else {
    if (dense[1] != 2 * c.hidden)
      fail(file.path(), ": tensor 'dense.weight' has ", dense[1], " columns; time pooling needs 2H = ", 2 * c.hidden,
           " (H = ", c.hidden, " from lstm.weight_hh_l0)");
    if (choice.seq_len <= 0) fail(file.path(), ": time pooling: T is in no tensor, and no data gives it");
    c.seq_len = choice.seq_len;
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail(file.path(), ": ", e.what());
  }
  return c;
}

ParameterBuffer<float> load_checkpoint(const std::string& path, const BareModelChoice& bare) {
  return read_checkpoint(SafetensorsReader(path), bare);
}

ParameterBuffer<float> read_checkpoint(const SafetensorsReader& file, const BareModelChoice& bare) {
  if (has_model_metadata(file)) return read_model(file);
  const ModelConfig config = bare_checkpoint_config(file, bare);
  try {
    return read_model_tensors(file, config, "");
  } catch (const Error& e) {
    fail(e.what(), " (the model its shapes give: ", shape_summary(config), ")");
  }
}

int64_t metadata_integer(const SafetensorsReader& file, const std::string& key) { return parse_integer(file, key); }

}  // namespace enhanced
