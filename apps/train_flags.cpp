// enhanced-train's flags (docs/cli.md "enhanced-train"), defined once for the app and for the
// Python extension's Model.fit (python/src/), which parses the same words.
#include "train_flags.h"

#include <string>
#include <vector>

#include "enhanced/label_names.h"
#include "enhanced/train_controls.h"

namespace enhanced {
namespace {

// The data, the output and the model's shape.
void add_data_and_model_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--data", o.data_path, "Training set (.ebin, from enhanced-data convert)");
  app.add_option("--valid", o.valid_path, "Validation set (.ebin); best.safetensors tracks its loss");
  app.add_option("--pretrained", o.pretrained_path, "Embedding table: raw float32, .npy or word2vec binary");
  app.add_option("--init-from", o.init_from, "Start from this checkpoint (its model must match the data)");
  app.add_option("--label-names", o.label_names_path,
                 "Names of the labels: a UTF-8 text file, one name a line, a line for each label (in checkpoints)");
  app.add_option("--out", o.out_dir, "Output directory for checkpoints and metrics")->required();
  app.add_flag("--resume", o.resume, "Continue the run saved in --out (same result as an uninterrupted run)");
  app.add_option("--epochs", o.epochs, "Epochs to train (default 1)")->check(at_least(int64_t{1}));
  app.add_option("--steps", o.steps, "Steps to train in all (overrides --epochs)")->check(at_least(int64_t{1}));
  app.add_option("--batch-size", o.batch_size, "Samples per batch")->capture_default_str()->check(at_least(1));
  app.add_option("--hidden", o.hidden, "LSTM units per direction")->capture_default_str()
      ->check(in_range(1, kMaxModelWidth));
  app.add_option("--embedding-dim", o.embedding_dim, "Embedding dim D (default: from --pretrained, else 32)")
      ->check(in_range(1, kMaxModelWidth));
  app.add_option("--vocab-size", o.vocab_size, "V (default: from --pretrained, else the data's largest id + 1)")
      ->check(at_least(int64_t{1}));
  app.add_option("--num-labels", o.num_labels, "L (default: from the data)")->check(in_range(1, kMaxModelWidth));
  app.add_option("--blend", o.blend,
                 "Identifier blend: " + names_text(blend_modes()) + " (scalar-mean: the original map_fn code)")
      ->capture_default_str()->check(CLI::IsMember(names_of(blend_modes())));
  app.add_option("--pool", o.pool, "Max-pool over: " + names_text(pool_modes()))
      ->capture_default_str()->check(CLI::IsMember(names_of(pool_modes())));
}

// The optimizer: its name, rate and scalars (each a row of optimizers()), and the update's options.
void add_optimizer_flags(CLI::App& app, TrainFlags& f) {
  TrainOptions& o = f.options;
  app.add_option("--optimizer", f.optimizer, optimizer_names_text())
      ->capture_default_str()->check(CLI::IsMember(optimizer_names()));
  app.add_option("--lr", o.optimizer.learning_rate, "Learning rate")->capture_default_str()->check(greater_than(0.0f));
  for (const OptimizerInfo& row : optimizers())
    for (const OptimizerScalar& scalar : row.scalars)
      app.add_option(scalar.flag, o.optimizer.*scalar.field, scalar.help)->capture_default_str()->check(
          scalar.rule == OptimizerScalar::Rule::unit_interval ? in_range_below(0.0f, 1.0f) : greater_than(0.0f));
  app.add_flag("--lazy-embedding-updates", o.optimizer.lazy_embedding,
               "Update only the embedding rows in the batch (cost independent of V)");
  app.add_option("--clip-norm", o.optimizer.clip_norm, "Clip the global gradient norm to this (0: off)")
      ->capture_default_str()
      ->check(at_least(0.0f));
  app.add_option("--weight-decay", o.optimizer.weight_decay,
                 "Weight decay: Adam decoupled (AdamW), SGD L2 (torch SGD weight_decay); 0: off")
      ->capture_default_str()
      ->check(at_least(0.0f));
  app.add_flag("--weight-decay-embedding", o.optimizer.weight_decay_embedding,
               "Decay the embedding table too (with --lazy-embedding-updates: only the batch's rows)");
}

// The learning-rate schedule and what the validations decide (docs/cli.md "Training controls"),
// each a row of train_controls().
void add_schedule_flags(CLI::App& app, TrainOptions& o) {
  for (const TrainControl& row : train_controls()) {
    const std::string help = row.help ? row.help : names_text(row.names());
    CLI::Option* option = row.whole  ? app.add_option(row.flag, o.*row.whole, help)
                          : row.real ? app.add_option(row.flag, o.*row.real, help)
                                     : app.add_option(row.flag, o.*row.choice, help);
    if (row.show_default) option->capture_default_str();
    option->check(row.whole  ? detail::number_rule<int64_t>(row.rule)
                  : row.real ? detail::number_rule<double>(row.rule)
                             : CLI::Validator(CLI::IsMember(row.names())));
  }
}

}  // namespace

void add_train_flags(CLI::App& app, TrainFlags& f) {
  TrainOptions& o = f.options;
  f.optimizer = to_string(o.optimizer.kind);
  add_data_and_model_flags(app, o);
  add_optimizer_flags(app, f);
  app.add_option("--class-weights", o.class_weights,
                 "Weigh the training loss by class: 'balanced' (n / (L * count) over --data) or a file of L numbers");
  app.add_option("--seed", o.seed, "Seed for initialisation and shuffling")->capture_default_str()->check(seed_rule());
  app.add_flag("--no-shuffle", f.no_shuffle, "Visit samples in file order");
  app.add_flag("--drop-last", o.drop_last, "Drop the last partial batch of each epoch");
  add_engine_flags(app, f.engine);
  app.add_option("--log-every", o.log_every, "Steps between metrics lines")->capture_default_str()->check(at_least(int64_t{1}));
  app.add_option("--checkpoint-every", o.checkpoint_every, "Steps between checkpoints (0: each epoch)")
      ->capture_default_str()
      ->check(at_least(int64_t{0}));
  app.add_option("--valid-every", o.valid_every, "Also validate every N steps (0: at epoch ends only)")
      ->capture_default_str()
      ->check(at_least(int64_t{0}));
  app.add_option("--check-every", o.check_every,
                 "Data-parallel runs: steps between the ranks' comparisons of their weights (and at each checkpoint)")
      ->capture_default_str()
      ->check(at_least(int64_t{1}));
  app.add_flag("--overwrite", o.overwrite, "Replace the run already in --out (its checkpoints and metrics are removed)");
  add_schedule_flags(app, o);
  app.add_flag("--quiet", f.quiet, "No progress line");
}

void finish_train_flags(const CLI::App& app, TrainFlags& f) {
  TrainOptions& o = f.options;
  for (const CLI::Option* option : app.get_options())
    if (option->count() > 0) o.given_flags.insert(option->get_name());
  o.shuffle = !f.no_shuffle;
  o.progress = !f.quiet;
  o.optimizer.kind = parse_optimizer_kind(f.optimizer);
  if (!o.resume && o.data_path.empty()) fail("--data is required (unless --resume)");
  if (!o.label_names_path.empty()) o.label_names = read_label_names(o.label_names_path);
}

}  // namespace enhanced
