#include "train/run_options.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <nlohmann/json.hpp>
#include <vector>

#include "enhanced/common.h"
#include "enhanced/train_controls.h"

namespace enhanced {
namespace {

using nlohmann::json;

// What a flag given with --resume does to a recorded option: `fixed` ones describe the data
// order or the optimizer, and a different value is an error; `model` ones are checked against the
// saved model itself (the recorded option may be 0, "from the data"), by check_model_flags;
// `changeable` ones (the learning rate and its schedule, early stopping, intervals, threads, the
// files' paths) take the new value, which is printed and recorded, so a later resume is still
// exact; `length` (--epochs, --steps) is one choice: either flag replaces both.
enum class OnResume { fixed, model, changeable, length };

// One recorded option: its key, its command-line flag, how it is written and read back.
// `optional`: runs recorded before the field existed lack it, and the caller's value stands.
struct OptionField {
  const char* key;
  const char* flag;
  OnResume on_resume;
  std::function<json(const TrainOptions&)> save;
  std::function<void(TrainOptions&, const json&)> load;
  bool optional = false;
  bool is_float = false;  // stored as exact_text
  // Written only when not empty, and empty when absent (label names: a run without them keeps
  // the state file's bytes of before they existed, and a resume cannot add them).
  bool absent_when_empty = false;
};

template <class Value>
using Ref = Value& (*)(TrainOptions&);

template <class Value>
OptionField plain(const char* key, const char* flag, OnResume on_resume, Ref<Value> ref, bool optional = false) {
  return {key, flag, on_resume, [ref](const TrainOptions& o) { return json(ref(const_cast<TrainOptions&>(o))); },
          [ref](TrainOptions& o, const json& j) { ref(o) = j.get<Value>(); }, optional};
}

template <class Real>
OptionField exact(const char* key, const char* flag, OnResume on_resume, Ref<Real> ref, bool optional = false) {
  return {key, flag, on_resume,
          [ref](const TrainOptions& o) { return json(exact_text(ref(const_cast<TrainOptions&>(o)))); },
          [ref](TrainOptions& o, const json& j) {
            ref(o) = static_cast<Real>(std::strtod(j.get<std::string>().c_str(), nullptr));
          },
          optional, true};
}

// A file's path as recorded: absolute and canonical (symbolic links, "." and ".." resolved), so a
// resume from any directory finds the file, and two spellings of one file compare equal. A run
// recorded before paths were canonical holds them as given: saved again (or compared) from its
// own directory, they resolve as they did. "" (no file) stays "".
std::string recorded_path(const std::string& path) {
  if (path.empty()) return path;
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(path, error);
  if (error) return path;
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(absolute, error);
  return (error ? absolute : canonical).string();
}

OptionField path_field(const char* key, const char* flag, OnResume on_resume, Ref<std::string> ref) {
  return {key, flag, on_resume, [ref](const TrainOptions& o) { return json(recorded_path(ref(const_cast<TrainOptions&>(o)))); },
          [ref](TrainOptions& o, const json& j) { ref(o) = j.get<std::string>(); }};
}

constexpr OnResume fixed = OnResume::fixed;
constexpr OnResume model = OnResume::model;
constexpr OnResume changeable = OnResume::changeable;
constexpr OnResume length = OnResume::length;

#define ENHANCED_FIELD(type, member) [](TrainOptions& o) -> type& { return o.member; }

// An optimizer's scalar (optimizers()): fixed on resume, its text exact.
OptionField optimizer_scalar(const OptimizerScalar& scalar) {
  const auto field = scalar.field;
  return {scalar.key, scalar.flag, fixed,
          [field](const TrainOptions& o) { return json(exact_text(o.optimizer.*field)); },
          [field](TrainOptions& o, const json& j) {
            o.optimizer.*field = static_cast<float>(std::strtod(j.get<std::string>().c_str(), nullptr));
          },
          scalar.optional, true};
}

// A training control (train_controls()): changeable, and absent from runs recorded before them.
OptionField control_field(const TrainControl& row) {
  if (const auto real = row.real)
    return {row.key, row.flag, changeable, [real](const TrainOptions& o) { return json(exact_text(o.*real)); },
            [real](TrainOptions& o, const json& j) { o.*real = std::strtod(j.get<std::string>().c_str(), nullptr); },
            true, true};
  if (const auto whole = row.whole)
    return {row.key, row.flag, changeable, [whole](const TrainOptions& o) { return json(o.*whole); },
            [whole](TrainOptions& o, const json& j) { o.*whole = j.get<int64_t>(); }, true};
  const auto choice = row.choice;
  return {row.key, row.flag, changeable, [choice](const TrainOptions& o) { return json(o.*choice); },
          [choice](TrainOptions& o, const json& j) { o.*choice = j.get<std::string>(); }, true};
}

// The labels' names (--label-names reads them from a file; the names are recorded, not the path).
OptionField label_names_field() {
  OptionField field = plain<std::vector<std::string>>("label_names", "--label-names", fixed,
                                                      ENHANCED_FIELD(std::vector<std::string>, label_names), true);
  field.absent_when_empty = true;
  return field;
}

const std::vector<OptionField>& option_fields() {
  static const std::vector<OptionField> fields = [] {
    std::vector<OptionField> out = {
      path_field("data", "--data", changeable, ENHANCED_FIELD(std::string, data_path)),
      path_field("valid", "--valid", changeable, ENHANCED_FIELD(std::string, valid_path)),
      // Recorded only: a resumed model comes from the state file.
      path_field("pretrained", "--pretrained", fixed, ENHANCED_FIELD(std::string, pretrained_path)),
      path_field("init_from", "--init-from", fixed, ENHANCED_FIELD(std::string, init_from)),
      label_names_field(),
      plain<int64_t>("epochs", "--epochs", length, ENHANCED_FIELD(int64_t, epochs)),
      plain<int64_t>("steps", "--steps", length, ENHANCED_FIELD(int64_t, steps)),
      plain<int>("batch_size", "--batch-size", fixed, ENHANCED_FIELD(int, batch_size)),
      plain<int>("hidden", "--hidden", model, ENHANCED_FIELD(int, hidden)),
      plain<int>("embedding_dim", "--embedding-dim", model, ENHANCED_FIELD(int, embedding_dim)),
      plain<int64_t>("vocab_size", "--vocab-size", model, ENHANCED_FIELD(int64_t, vocab_size)),
      plain<int>("num_labels", "--num-labels", model, ENHANCED_FIELD(int, num_labels)),
      plain<std::string>("blend", "--blend", model, ENHANCED_FIELD(std::string, blend)),
      plain<std::string>("pool", "--pool", model, ENHANCED_FIELD(std::string, pool)),
      {"optimizer", "--optimizer", fixed, [](const TrainOptions& o) { return json(to_string(o.optimizer.kind)); },
       [](TrainOptions& o, const json& j) { o.optimizer.kind = parse_optimizer_kind(j.get<std::string>()); }},
      exact<float>("lr", "--lr", changeable, ENHANCED_FIELD(float, optimizer.learning_rate)),
    };
    // Every row's scalars of optimizers(), in its order, recorded whichever optimizer runs.
    for (const OptimizerInfo& row : optimizers())
      for (const OptimizerScalar& scalar : row.scalars) out.push_back(optimizer_scalar(scalar));
    out.insert(out.end(), {
      plain<bool>("lazy_embedding", "--lazy-embedding-updates", fixed, ENHANCED_FIELD(bool, optimizer.lazy_embedding)),
      exact<float>("clip_norm", "--clip-norm", fixed, ENHANCED_FIELD(float, optimizer.clip_norm)),
      // Added with the training controls: runs recorded before them have no weight decay and no
      // class weights.
      exact<float>("weight_decay", "--weight-decay", fixed, ENHANCED_FIELD(float, optimizer.weight_decay), true),
      plain<bool>("weight_decay_embedding", "--weight-decay-embedding", fixed,
                  ENHANCED_FIELD(bool, optimizer.weight_decay_embedding), true),
      plain<std::string>("class_weights", "--class-weights", fixed, ENHANCED_FIELD(std::string, class_weights), true),
      {"class_weight_values", "", fixed,
       [](const TrainOptions& o) {
         json values = json::array();
         for (const float w : o.class_weight_values) values.push_back(exact_text(w));
         return values;
       },
       [](TrainOptions& o, const json& j) {
         o.class_weight_values.clear();
         for (const json& w : j) o.class_weight_values.push_back(static_cast<float>(std::strtod(w.get<std::string>().c_str(), nullptr)));
       },
       true},
      plain<uint64_t>("seed", "--seed", fixed, ENHANCED_FIELD(uint64_t, seed)),
      plain<bool>("shuffle", "--no-shuffle", fixed, ENHANCED_FIELD(bool, shuffle)),
      plain<bool>("drop_last", "--drop-last", fixed, ENHANCED_FIELD(bool, drop_last)),
      plain<int>("threads", "--threads", changeable, ENHANCED_FIELD(int, engine.threads)),
      plain<int64_t>("log_every", "--log-every", changeable, ENHANCED_FIELD(int64_t, log_every)),
      plain<int64_t>("checkpoint_every", "--checkpoint-every", changeable, ENHANCED_FIELD(int64_t, checkpoint_every)),
      // A GPU run continues with the arithmetic it started with, unless told otherwise.
      plain<bool>("tf32", "--tf32", changeable, ENHANCED_FIELD(bool, engine.cuda.tf32), true),
      {"rnn_algorithm", "--rnn-algorithm", changeable,
       [](const TrainOptions& o) { return json(to_string(o.engine.cuda.rnn_algorithm)); },
       [](TrainOptions& o, const json& j) { o.engine.cuda.rnn_algorithm = parse_rnn_algorithm(j.get<std::string>()); },
       true},
      // Added with --precision: runs recorded before it are FP32.
      {"precision", "--precision", changeable, [](const TrainOptions& o) { return json(to_string(o.engine.precision)); },
       [](TrainOptions& o, const json& j) { o.engine.precision = parse_precision(j.get<std::string>()); }, true},
      plain<int64_t>("valid_every", "--valid-every", changeable, ENHANCED_FIELD(int64_t, valid_every), true),
    });
    for (const TrainControl& row : train_controls()) out.push_back(control_field(row));
    return out;
  }();
  return fields;
}

#undef ENHANCED_FIELD

// A recorded value as a person reads it: floats to 9 digits (enough to tell any two floats
// apart), an empty path as "(none)".
std::string readable(const OptionField& field, const json& value) {
  if (field.is_float) {
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
  for (const OptionField& field : option_fields()) {
    json value = field.save(options);
    if (!field.absent_when_empty || !value.empty()) out[field.key] = std::move(value);
  }
  return out.dump();
}

std::vector<std::pair<std::string, std::string>> shared_options(const TrainOptions& options) {
  static const std::set<std::string> per_rank = {"data", "valid", "threads"};
  static const TrainOptions defaults;
  const auto on_off = [](bool given) { return std::string(given ? "on" : "off"); };
  std::vector<std::pair<std::string, std::string>> out;
  for (const OptionField& field : option_fields()) {
    if (per_rank.count(field.key)) continue;
    const json value = field.save(options);
    // --no-shuffle is given when shuffle is false: a flag is "on" when it moves its default.
    out.emplace_back(*field.flag ? field.flag : field.key,
                     value.is_boolean() ? on_off(value != field.save(defaults)) : readable(field, value));
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
    for (const OptionField& field : option_fields())
      if (!field.optional || j.contains(field.key)) field.load(o, j.at(field.key));
      else if (field.absent_when_empty) field.load(o, json::array());
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
  for (const OptionField& field : option_fields()) {
    if (field.on_resume == OnResume::length || field.on_resume == OnResume::model) continue;
    if (!caller.given_flags.count(field.flag)) continue;
    const json given = field.save(caller), saved = field.save(o);
    if (given == saved) continue;
    if (field.on_resume == OnResume::fixed)
      fail(field.flag, given.is_boolean() ? "" : " " + readable(field, given), " conflicts with the run being resumed, "
           "which has ", field.key, " = ", readable(field, saved), " (", source,
           "); a resumed run keeps its model, data order and optimizer");
    field.load(o, given);
    if (caller.narrate)
      std::fprintf(stderr, "resume: %s changed from %s to %s\n", field.key, readable(field, saved).c_str(),
                 readable(field, given).c_str());
  }
  o.given_flags = caller.given_flags;
  o.resume = true;
  o.overwrite = caller.overwrite;
  return o;
}

}  // namespace enhanced
