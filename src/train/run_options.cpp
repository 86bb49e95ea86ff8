#include "train/run_options.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <type_traits>
#include <set>
#include <nlohmann/json.hpp>
#include <vector>

#include "enhanced/common.h"
#include "enhanced/dataset.h"
#include "enhanced/train_fields.h"

namespace enhanced {
namespace {

using nlohmann::json;

// A file's path as recorded: absolute and canonical (symbolic links, "." and ".." resolved), so a
// resume from any directory finds the file, and two spellings of one file compare equal. A run
// recorded before paths were canonical holds them as given: saved again (or compared) from its
// own directory, they resolve as they did. "" (no file) stays "", and so does the name of a set
// held in memory ("<x: 16 samples in memory>", Dataset::from_bytes's): it is no file.
std::string recorded_path(const std::string& path) {
  if (path.empty() || is_memory_name(path)) return path;
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(path, error);
  if (error) return path;
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(absolute, error);
  return (error ? absolute : canonical).string();
}

double exact_value(const json& text) { return std::strtod(text.get<std::string>().c_str(), nullptr); }

// How each kind of value is recorded: reals as exact text (a float's too), a name as text, the
// rest as JSON's own.
template <class Value>
json recorded_value(const Value& value) {
  if constexpr (std::is_floating_point_v<Value>) return exact_text(value);
  else if constexpr (std::is_same_v<Value, std::vector<float>>) {
    json values = json::array();
    for (const float w : value) values.push_back(exact_text(w));
    return values;
  } else return json(value);
}

template <class Value>
Value value_from(const json& j) {
  if constexpr (std::is_floating_point_v<Value>) return static_cast<Value>(exact_value(j));
  else if constexpr (std::is_same_v<Value, std::vector<float>>) {
    Value values;
    for (const json& w : j) values.push_back(static_cast<float>(exact_value(w)));
    return values;
  } else return j.get<Value>();
}

json save(const TrainField& field, const TrainOptions& o) {
  return std::visit(
      [&](const auto& ref) -> json {
        if constexpr (std::is_same_v<std::decay_t<decltype(ref)>, NamedField>) return ref.get(o);
        else {
          const auto& value = ref(const_cast<TrainOptions&>(o));
          if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string>)
            if (field.path) return recorded_path(value);
          return recorded_value(value);
        }
      },
      field.value);
}

void load(const TrainField& field, TrainOptions& o, const json& j) {
  std::visit(
      [&](const auto& ref) {
        if constexpr (std::is_same_v<std::decay_t<decltype(ref)>, NamedField>) ref.set(o, j.get<std::string>());
        else ref(o) = value_from<std::remove_reference_t<decltype(ref(o))>>(j);
      },
      field.value);
}

bool is_real(const TrainField& field) {
  return std::holds_alternative<FieldRef<float>>(field.value) || std::holds_alternative<FieldRef<double>>(field.value);
}

// The recorded rows of train_fields().
const std::vector<const TrainField*>& option_fields() {
  static const std::vector<const TrainField*> fields = [] {
    std::vector<const TrainField*> out;
    for (const TrainField& field : train_fields())
      if (field.key) out.push_back(&field);
    return out;
  }();
  return fields;
}

// A recorded value as a person reads it: floats to 9 digits (enough to tell any two floats
// apart), an empty path as "(none)".
std::string readable(const TrainField& field, const json& value) {
  if (is_real(field)) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", std::strtod(value.get<std::string>().c_str(), nullptr));
    return text;
  }
  if (value.is_string()) return value.get<std::string>().empty() ? "(none)" : value.get<std::string>();
  return value.dump();
}

// The run's length as given or recorded: "3 epochs" or "20 steps".
std::string length_text(const TrainOptions& o) {
  return o.steps > 0 ? cat(o.steps, " steps") : cat(o.epochs, " epochs");
}

}  // namespace

std::string exact_text(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%a", value);
  return text;
}

std::string run_options_text(const TrainOptions& options) {
  json out = json::object();
  for (const TrainField* field : option_fields()) {
    json value = save(*field, options);
    if (!field->absent_when_empty || !value.empty()) out[field->key] = std::move(value);
  }
  return out.dump();
}

std::vector<std::pair<std::string, std::string>> shared_options(const TrainOptions& options) {
  static const std::set<std::string> per_rank = {"data", "valid", "threads"};
  static const TrainOptions defaults;
  const auto on_off = [](bool given) { return std::string(given ? "on" : "off"); };
  std::vector<std::pair<std::string, std::string>> out;
  for (const TrainField* field : option_fields()) {
    if (per_rank.count(field->key)) continue;
    const json value = save(*field, options);
    // --no-shuffle is given when shuffle is false: a flag is "on" when it moves its default.
    out.emplace_back(field->flag.empty() ? field->key : field->flag,
                     value.is_boolean() ? on_off(value != save(*field, defaults)) : readable(*field, value));
  }
  out.emplace_back("--check-every", std::to_string(options.check_every));
  out.emplace_back("--device", to_string(options.engine.device));
  out.emplace_back("--resume", on_off(options.resume));
  return out;
}

TrainOptions resumed_options(const TrainOptions& caller, const std::string& recorded, const std::string& source) {
  TrainOptions o = caller;
  json j;
  try {
    j = json::parse(recorded);
    for (const TrainField* field : option_fields())
      if (!field->optional || j.contains(field->key)) load(*field, o, j.at(field->key));
      else if (field->absent_when_empty) load(*field, o, json::array());
  } catch (const nlohmann::json::exception& e) {
    fail(source, ": run_options metadata is malformed (", e.what(), ")");
  }
  if ((caller.given_flags.count("--epochs") || caller.given_flags.count("--steps")) &&
      (caller.epochs != o.epochs || caller.steps != o.steps)) {
    // --steps sets the length whatever --epochs (recorded as 1 by default) says: said only when it changed.
    if (length_text(o) != length_text(caller) && caller.narrate)
      std::fprintf(stderr, "resume: the run's length changed from %s to %s\n", length_text(o).c_str(),
                   length_text(caller).c_str());
    o.epochs = caller.epochs;
    o.steps = caller.steps;
  }
  for (const TrainField* field : option_fields()) {
    if (field->on_resume == OnResume::length || field->on_resume == OnResume::model) continue;
    if (!caller.given_flags.count(field->flag)) continue;
    const json given = save(*field, caller), saved = save(*field, o);
    if (given == saved) continue;
    if (field->on_resume == OnResume::fixed)
      fail(field->flag, given.is_boolean() ? "" : " " + readable(*field, given), " conflicts with the run being "
           "resumed, which has ", field->key, " = ", readable(*field, saved), " (", source,
           "); a resumed run keeps its model, data order and optimizer");
    load(*field, o, given);
    if (caller.narrate)
      std::fprintf(stderr, "resume: %s changed from %s to %s\n", field->key, readable(*field, saved).c_str(),
                   readable(*field, given).c_str());
  }
  o.given_flags = caller.given_flags;
  o.resume = true;
  o.overwrite = caller.overwrite;
  return o;
}

}  // namespace enhanced
