#include "train/run_options.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "enhanced/common.h"

namespace enhanced {
namespace {

using nlohmann::json;

// One recorded option: its key, how it is written and how it is read back. `optional`: runs
// recorded before the field existed lack it, and the caller's value stands.
struct OptionField {
  const char* key;
  std::function<json(const TrainOptions&)> save;
  std::function<void(TrainOptions&, const json&)> load;
  bool optional = false;
};

template <class Value>
using Ref = Value& (*)(TrainOptions&);

template <class Value>
OptionField plain(const char* key, Ref<Value> ref, bool optional = false) {
  return {key, [ref](const TrainOptions& o) { return json(ref(const_cast<TrainOptions&>(o))); },
          [ref](TrainOptions& o, const json& j) { ref(o) = j.get<Value>(); }, optional};
}

OptionField exact(const char* key, Ref<float> ref, bool optional = false) {
  return {key, [ref](const TrainOptions& o) { return json(exact_text(ref(const_cast<TrainOptions&>(o)))); },
          [ref](TrainOptions& o, const json& j) {
            ref(o) = static_cast<float>(std::strtod(j.get<std::string>().c_str(), nullptr));
          },
          optional};
}

const std::vector<OptionField>& option_fields() {
  static const std::vector<OptionField> fields = {
      plain<std::string>("data", [](TrainOptions& o) -> std::string& { return o.data_path; }),
      plain<std::string>("valid", [](TrainOptions& o) -> std::string& { return o.valid_path; }),
      // Recorded only: a resumed model comes from the state file.
      plain<std::string>("pretrained", [](TrainOptions& o) -> std::string& { return o.pretrained_path; }),
      plain<std::string>("init_from", [](TrainOptions& o) -> std::string& { return o.init_from; }),
      plain<int64_t>("epochs", [](TrainOptions& o) -> int64_t& { return o.epochs; }),
      plain<int64_t>("steps", [](TrainOptions& o) -> int64_t& { return o.steps; }),
      plain<int>("batch_size", [](TrainOptions& o) -> int& { return o.batch_size; }),
      plain<int>("hidden", [](TrainOptions& o) -> int& { return o.hidden; }),
      plain<int>("embedding_dim", [](TrainOptions& o) -> int& { return o.embedding_dim; }),
      plain<int64_t>("vocab_size", [](TrainOptions& o) -> int64_t& { return o.vocab_size; }),
      plain<int>("num_labels", [](TrainOptions& o) -> int& { return o.num_labels; }),
      plain<std::string>("blend", [](TrainOptions& o) -> std::string& { return o.blend; }),
      plain<std::string>("pool", [](TrainOptions& o) -> std::string& { return o.pool; }),
      {"optimizer", [](const TrainOptions& o) { return json(to_string(o.optimizer.kind)); },
       [](TrainOptions& o, const json& j) { o.optimizer.kind = parse_optimizer_kind(j.get<std::string>()); }},
      exact("lr", [](TrainOptions& o) -> float& { return o.optimizer.learning_rate; }),
      exact("momentum", [](TrainOptions& o) -> float& { return o.optimizer.momentum; }),
      exact("beta1", [](TrainOptions& o) -> float& { return o.optimizer.beta1; }),
      exact("beta2", [](TrainOptions& o) -> float& { return o.optimizer.beta2; }),
      exact("epsilon", [](TrainOptions& o) -> float& { return o.optimizer.epsilon; }),
      plain<bool>("lazy_embedding", [](TrainOptions& o) -> bool& { return o.optimizer.lazy_embedding; }),
      exact("clip_norm", [](TrainOptions& o) -> float& { return o.optimizer.clip_norm; }),
      // Added with issue 11: runs recorded before it have no weight decay (the default stands).
      exact("weight_decay", [](TrainOptions& o) -> float& { return o.optimizer.weight_decay; }, true),
      plain<bool>("weight_decay_embedding", [](TrainOptions& o) -> bool& { return o.optimizer.weight_decay_embedding; },
                  true),
      plain<std::string>("class_weights", [](TrainOptions& o) -> std::string& { return o.class_weights; }, true),
      plain<uint64_t>("seed", [](TrainOptions& o) -> uint64_t& { return o.seed; }),
      plain<bool>("shuffle", [](TrainOptions& o) -> bool& { return o.shuffle; }),
      plain<bool>("drop_last", [](TrainOptions& o) -> bool& { return o.drop_last; }),
      plain<int>("threads", [](TrainOptions& o) -> int& { return o.threads; }),
      plain<int64_t>("log_every", [](TrainOptions& o) -> int64_t& { return o.log_every; }),
      plain<int64_t>("checkpoint_every", [](TrainOptions& o) -> int64_t& { return o.checkpoint_every; }),
      // A GPU run continues with the arithmetic it started with.
      plain<bool>("tf32", [](TrainOptions& o) -> bool& { return o.cuda.tf32; }, true),
      {"rnn_algorithm", [](const TrainOptions& o) { return json(to_string(o.cuda.rnn_algorithm)); },
       [](TrainOptions& o, const json& j) { o.cuda.rnn_algorithm = parse_rnn_algorithm(j.get<std::string>()); }, true},
  };
  return fields;
}

}  // namespace

std::string exact_text(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%a", value);
  return text;
}

std::string run_options_text(const TrainOptions& options) {
  json out = json::object();
  for (const OptionField& field : option_fields()) out[field.key] = field.save(options);
  return out.dump();
}

TrainOptions resumed_options(const TrainOptions& caller, const std::string& recorded, const std::string& source) {
  TrainOptions o = caller;
  try {
    const json j = json::parse(recorded);
    for (const OptionField& field : option_fields())
      if (!field.optional || j.contains(field.key)) field.load(o, j.at(field.key));
  } catch (const nlohmann::json::exception& e) {
    fail(source, ": run_options metadata is malformed (", e.what(), ")");
  }
  if (caller.epochs != 0 || caller.steps != 0) {  // the caller sets a new length
    o.epochs = caller.epochs;
    o.steps = caller.steps;
  }
  if (caller.threads) o.threads = caller.threads;
  o.cuda.tf32 = caller.cuda.tf32 || o.cuda.tf32;
  if (caller.cuda.rnn_algorithm != RnnAlgorithm::automatic) o.cuda.rnn_algorithm = caller.cuda.rnn_algorithm;
  return o;
}

}  // namespace enhanced
