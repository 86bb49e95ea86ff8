#include "enhanced/train_fields.h"

#include <cmath>
#include <type_traits>
#include <utility>

#include "enhanced/common.h"
#include "enhanced/enum_names.h"
#include "enhanced/model.h"

namespace enhanced {
namespace {

// The numeric rules, by their flags' words.
NumberRule at_least(double low) { return NumberRule{low}; }
NumberRule greater_than(double low) { return NumberRule{low, HUGE_VAL, true}; }
NumberRule in_range(double low, double high) { return NumberRule{low, high}; }
NumberRule in_range_below(double low, double high) { return NumberRule{low, high, false, true}; }  // [low, high)
NumberRule strictly_between(double low, double high) { return NumberRule{low, high, true, true}; }

// A member of TrainOptions as a row's value, typed by the member.
template <class Get>
FieldValue member(Get get) {
  using Value = std::remove_reference_t<std::invoke_result_t<Get, TrainOptions&>>;
  return FieldRef<Value>(get);
}
#define ENHANCED_MEMBER(name) member([](TrainOptions& o) -> auto& { return o.name; })

TrainField row(std::string flag, const char* key, std::string help, FieldValue value,
               OnResume on_resume = OnResume::fixed) {
  TrainField field{std::move(flag), key, std::move(help), std::move(value)};
  field.on_resume = on_resume;
  return field;
}

// A file's path: recorded canonical, no default to show.
TrainField path(std::string flag, const char* key, std::string help, FieldValue value, OnResume on_resume) {
  TrainField field = row(std::move(flag), key, std::move(help), std::move(value), on_resume);
  field.path = true;
  field.show_default = false;
  return field;
}

// A switch that sets its bool false where given.
TrainField inverted(std::string flag, const char* key, std::string help, FieldValue value) {
  TrainField field = row(std::move(flag), key, std::move(help), std::move(value));
  field.inverted = true;
  return field;
}

std::vector<TrainField> data_and_model_fields() {
  const auto blend_names = [] { return names_of(blend_modes()); };
  const auto pool_names = [] { return names_of(pool_modes()); };
  TrainField label_names_path = row("--label-names", nullptr, "Names of the labels: a UTF-8 text file, one name a "
                                    "line, a line for each label (in checkpoints)", ENHANCED_MEMBER(label_names_path));
  // The names are recorded, not the file: a run without them keeps the state file's bytes of
  // before they existed, and a resume cannot add them.
  TrainField label_names = row("--label-names", "label_names", "", ENHANCED_MEMBER(label_names));
  label_names.not_a_flag().older_runs_lack_it().absent_when_empty = true;
  TrainField out = row("--out", nullptr, "Output directory for checkpoints and metrics", ENHANCED_MEMBER(out_dir));
  out.no_default_shown().required = true;
  return {
      path("--data", "data", "Training set (.ebin, from enhanced-data convert)", ENHANCED_MEMBER(data_path),
           OnResume::changeable),
      path("--valid", "valid", "Validation set (.ebin); best.safetensors tracks its loss", ENHANCED_MEMBER(valid_path),
           OnResume::changeable),
      // Recorded only: a resumed model comes from the state file.
      path("--pretrained", "pretrained", "Embedding table: raw float32, .npy or word2vec binary",
           ENHANCED_MEMBER(pretrained_path), OnResume::fixed),
      path("--init-from", "init_from", "Start from this checkpoint (its model must match the data)",
           ENHANCED_MEMBER(init_from), OnResume::fixed),
      label_names_path.no_default_shown(),
      label_names,
      out,
      row("--resume", nullptr, "Continue the run saved in --out (same result as an uninterrupted run)",
          ENHANCED_MEMBER(resume)),
      row("--epochs", "epochs", "Epochs to train (default 1)", ENHANCED_MEMBER(epochs), OnResume::length)
          .range(at_least(1)).no_default_shown(),
      row("--steps", "steps", "Steps to train in all (overrides --epochs)", ENHANCED_MEMBER(steps), OnResume::length)
          .range(at_least(1)).no_default_shown(),
      row("--batch-size", "batch_size", "Samples per batch", ENHANCED_MEMBER(batch_size)).range(at_least(1)),
      row("--hidden", "hidden", "LSTM units per direction", ENHANCED_MEMBER(hidden), OnResume::model)
          .range(in_range(1, kMaxModelWidth)),
      row("--embedding-dim", "embedding_dim", "Embedding dim D (default: from --pretrained, else 32)",
          ENHANCED_MEMBER(embedding_dim), OnResume::model).range(in_range(1, kMaxModelWidth)).no_default_shown(),
      row("--vocab-size", "vocab_size", "V (default: from --pretrained, else the data's largest id + 1)",
          ENHANCED_MEMBER(vocab_size), OnResume::model).range(at_least(1)).no_default_shown(),
      row("--num-labels", "num_labels", "L (default: from the data)", ENHANCED_MEMBER(num_labels), OnResume::model)
          .range(in_range(1, kMaxModelWidth)).no_default_shown(),
      row("--blend", "blend", "Identifier blend: " + names_text(blend_modes()) + " (scalar-mean: the original map_fn code)",
          ENHANCED_MEMBER(blend), OnResume::model).choices(blend_names),
      row("--pool", "pool", "Max-pool over: " + names_text(pool_modes()), ENHANCED_MEMBER(pool), OnResume::model)
          .choices(pool_names),
  };
}

// The optimizer: its name, rate and scalars (each a row of optimizers()), and the update's options.
std::vector<TrainField> optimizer_fields() {
  NamedField kind{[](const TrainOptions& o) { return std::string(to_string(o.optimizer.kind)); },
                  [](TrainOptions& o, const std::string& name) { o.optimizer.kind = parse_optimizer_kind(name); }};
  TrainField rate = row("--lr", "lr", "Learning rate", ENHANCED_MEMBER(optimizer.learning_rate), OnResume::changeable)
                        .range(greater_than(0));
  // A fit callback may set the rate to 0, as Keras allows, and the run records it.
  rate.checked_after_merge = false;
  std::vector<TrainField> out = {row("--optimizer", "optimizer", optimizer_names_text(), kind).choices(optimizer_names),
                                 rate};
  // Every row's scalars of optimizers(), in its order, recorded whichever optimizer runs.
  for (const OptimizerInfo& info : optimizers())
    for (const OptimizerScalar& scalar : info.scalars) {
      const OptimizerField field = scalar.field;
      TrainField value = row(scalar.flag, scalar.key, scalar.help,
                             FieldRef<float>([field](TrainOptions& o) -> float& { return o.optimizer.*field; }));
      value.range(scalar.rule == OptimizerScalar::Rule::unit_interval ? in_range_below(0, 1) : greater_than(0));
      value.optional = scalar.optional;
      out.push_back(std::move(value));
    }
  out.insert(out.end(), {
      row("--lazy-embedding-updates", "lazy_embedding", "Update only the embedding rows in the batch (cost "
          "independent of V)", ENHANCED_MEMBER(optimizer.lazy_embedding)),
      row("--clip-norm", "clip_norm", "Clip the global gradient norm to this (0: off)",
          ENHANCED_MEMBER(optimizer.clip_norm)).range(at_least(0)),
      // Added with the training controls: runs recorded before them have no weight decay and no
      // class weights.
      row("--weight-decay", "weight_decay", "Weight decay: Adam decoupled (AdamW), SGD L2 (torch SGD "
          "weight_decay); 0: off", ENHANCED_MEMBER(optimizer.weight_decay)).range(at_least(0)).older_runs_lack_it(),
      row("--weight-decay-embedding", "weight_decay_embedding", "Decay the embedding table too (with "
          "--lazy-embedding-updates: only the batch's rows)", ENHANCED_MEMBER(optimizer.weight_decay_embedding))
          .older_runs_lack_it(),
  });
  return out;
}

// The class weights, the data order, the engine as recorded, the run's intervals.
std::vector<TrainField> run_fields() {
  const auto weight_mean_names = [] { return names_of(class_weight_means()); };
  NamedField rnn_algorithm{
      [](const TrainOptions& o) { return std::string(to_string(o.engine.cuda.rnn_algorithm)); },
      [](TrainOptions& o, const std::string& name) { o.engine.cuda.rnn_algorithm = parse_rnn_algorithm(name); }};
  NamedField weight_mean{
      [](const TrainOptions& o) { return std::string(to_string(o.class_weight_mean)); },
      [](TrainOptions& o, const std::string& name) { o.class_weight_mean = parse_class_weight_mean(name); }};
  NamedField precision{[](const TrainOptions& o) { return std::string(to_string(o.engine.precision)); },
                       [](TrainOptions& o, const std::string& name) { o.engine.precision = parse_precision(name); }};
  return {
      row("--class-weights", "class_weights", "Weigh the training loss by class: 'balanced' (n / (L * count) over "
          "--data) or a file of L numbers", ENHANCED_MEMBER(class_weights)).no_default_shown().older_runs_lack_it(),
      row("", "class_weight_values", "", ENHANCED_MEMBER(class_weight_values)).not_a_flag().older_runs_lack_it(),
      // Added with Model.fit's Keras class_weight: runs recorded before it divide by the weights.
      row("--class-weight-mean", "class_weight_mean", "The weighted loss divides by: 'weights' (the batch's total "
          "class weight, torch's) or 'batch' (its sample count, Keras')", weight_mean)
          .choices(weight_mean_names).older_runs_lack_it(),
      row("--seed", "seed", "Seed for initialisation and shuffling", ENHANCED_MEMBER(seed)),
      inverted("--no-shuffle", "shuffle", "Visit samples in file order", ENHANCED_MEMBER(shuffle)),
      row("--drop-last", "drop_last", "Drop the last partial batch of each epoch", ENHANCED_MEMBER(drop_last)),
      // The engine's flags (add_engine_flags): a resume may change them; a GPU run continues with
      // the arithmetic it started with unless told otherwise.
      row("--threads", "threads", "", ENHANCED_MEMBER(engine.threads), OnResume::changeable).engine_flag(),
      row("--tf32", "tf32", "", ENHANCED_MEMBER(engine.cuda.tf32), OnResume::changeable).engine_flag()
          .older_runs_lack_it(),
      row("--rnn-algorithm", "rnn_algorithm", "", rnn_algorithm, OnResume::changeable).engine_flag()
          .older_runs_lack_it(),
      // Added with --precision: runs recorded before it are FP32.
      row("--precision", "precision", "", precision, OnResume::changeable).engine_flag().older_runs_lack_it(),
      row("--log-every", "log_every", "Steps between metrics lines", ENHANCED_MEMBER(log_every), OnResume::changeable)
          .range(at_least(1)),
      row("--checkpoint-every", "checkpoint_every", "Steps between checkpoints (0: each epoch)",
          ENHANCED_MEMBER(checkpoint_every), OnResume::changeable).range(at_least(0)),
      row("--valid-every", "valid_every", "Also validate every N steps (0: at epoch ends only)",
          ENHANCED_MEMBER(valid_every), OnResume::changeable).range(at_least(0)).older_runs_lack_it(),
      row("--check-every", nullptr, "Data-parallel runs: steps between the ranks' comparisons of their weights (and at "
          "each checkpoint)", ENHANCED_MEMBER(check_every)).range(at_least(1)),
      row("--overwrite", nullptr, "Replace the run already in --out (its checkpoints and metrics are removed)",
          ENHANCED_MEMBER(overwrite)),
  };
}

// The learning-rate schedule and what the validations decide (docs/cli.md "Training controls"):
// added after runs were first recorded, so a run without a key keeps the caller's value.
std::vector<TrainField> control_fields() {
  const auto changeable = OnResume::changeable;
  return {
      row("--lr-schedule", "lr_schedule", "", ENHANCED_MEMBER(lr_schedule), changeable).choices(lr_schedule_names),
      row("--warmup-steps", "warmup_steps", "Linear warm-up to --lr over the first N steps",
          ENHANCED_MEMBER(warmup_steps), changeable).range(at_least(0)),
      row("--min-lr", "min_lr", "Floor (step, plateau) or end point (cosine, linear) of the rate",
          ENHANCED_MEMBER(min_lr), changeable).range(at_least(0)),
      row("--lr-step-size", "lr_step_size", "step: multiply the rate by --lr-factor every N steps",
          ENHANCED_MEMBER(lr_step_size), changeable).range(at_least(1)).no_default_shown(),
      // A factor that lowers the rate: 1 would never reduce it, above 1 would raise it.
      row("--lr-factor", "lr_factor", "step and plateau: the factor of each reduction (0 < factor < 1)",
          ENHANCED_MEMBER(lr_factor), changeable).range(strictly_between(0, 1)),
      row("--lr-patience", "lr_patience", "plateau: validations without improvement before a reduction",
          ENHANCED_MEMBER(lr_patience), changeable).range(at_least(0)),
      row("--monitor", "monitor", "What best.safetensors, plateau and early stopping watch", ENHANCED_MEMBER(monitor),
          changeable).choices(monitor_names),
      row("--min-delta", "min_delta", "An improvement must beat the best by more than this", ENHANCED_MEMBER(min_delta),
          changeable).range(at_least(0)),
      row("--early-stopping", "early_stopping", "Stop after N validations without improvement (0: off)",
          ENHANCED_MEMBER(early_stopping), changeable).range(at_least(0)),
  };
}

// A row's number as a double, for its rule; false for a value no NumberRule holds (a seed: its
// own rule, every 64-bit number).
template <class Value>
bool number_of(const FieldRef<Value>& ref, const TrainOptions& o, double& out) {
  if constexpr (std::is_arithmetic_v<Value> && !std::is_same_v<Value, bool> && !std::is_same_v<Value, uint64_t>) {
    out = static_cast<double>(ref(const_cast<TrainOptions&>(o)));
    return true;
  }
  return false;
}

}  // namespace

// A new flag adds its TrainOptions field (its initialiser the default) and a row here; its
// flag, record key, resume rule and range check follow. The code that uses it and any rule
// between flags (check_training_controls) are its own.
const std::vector<TrainField>& train_fields() {
  static const std::vector<TrainField> rows = [] {
    std::vector<TrainField> out;
    for (auto part : {data_and_model_fields, optimizer_fields, run_fields, control_fields})
      for (TrainField& field : part()) out.push_back(std::move(field));
    out.push_back(inverted("--quiet", nullptr, "No progress line", ENHANCED_MEMBER(progress)));
    return out;
  }();
  return rows;
}

#undef ENHANCED_MEMBER

void check_field_values(const TrainOptions& o) {
  static const TrainOptions defaults;
  for (const TrainField& field : train_fields()) {
    if (!field.checked_after_merge) continue;
    double value = 0, fallback = 0;
    const bool number = std::visit(
        [&](const auto& ref) {
          if constexpr (std::is_same_v<std::decay_t<decltype(ref)>, NamedField>) return false;
          else return number_of(ref, o, value) && number_of(ref, defaults, fallback);
        },
        field.value);
    if (!number || value == fallback) continue;
    NumberRule rule = field.rule;
    rule.integer = std::holds_alternative<FieldRef<int>>(field.value) ||
                   std::holds_alternative<FieldRef<int64_t>>(field.value);
    if (const std::string problem = rule.check_value(value); !problem.empty()) fail(field.flag, " ", problem);
  }
}

}  // namespace enhanced
