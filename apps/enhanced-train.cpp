// enhanced-train: trains the model on a .ebin dataset (see README "Training").
#include "enhanced/app.h"
#include "enhanced/trainer.h"

int main(int argc, char** argv) {
  using namespace enhanced;
  CLI::App app{"Train the ragged-blend BiLSTM classifier on a .ebin dataset"};
  TrainOptions o;
  std::string optimizer = "adam";
  app.add_option("--data", o.data_path, "Training set (.ebin, from enhanced-data convert)");
  app.add_option("--valid", o.valid_path, "Validation set (.ebin); best.safetensors tracks its loss");
  app.add_option("--pretrained", o.pretrained_path, "Embedding table: raw float32, .npy or word2vec binary");
  app.add_option("--init-from", o.init_from, "Start from this checkpoint (its model must match the data)");
  app.add_option("--out", o.out_dir, "Output directory for checkpoints and metrics")->required();
  app.add_flag("--resume", o.resume, "Continue the run saved in --out (same result as an uninterrupted run)");
  app.add_option("--epochs", o.epochs, "Epochs to train (default 1)")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "Steps to train in all (overrides --epochs)")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", o.batch_size, "Samples per batch")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--hidden", o.hidden, "LSTM units per direction")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--embedding-dim", o.embedding_dim, "Embedding dim D (default: from --pretrained, else 32)")
      ->check(CLI::PositiveNumber);
  app.add_option("--vocab-size", o.vocab_size, "V (default: from --pretrained, else the data's largest id + 1)")
      ->check(CLI::PositiveNumber);
  app.add_option("--num-labels", o.num_labels, "L (default: from the data)")->check(CLI::PositiveNumber);
  app.add_option("--blend", o.blend, "Identifier blend: mean or scalar-mean (the original map_fn code)")
      ->capture_default_str()->check(CLI::IsMember({"mean", "scalar-mean"}));
  app.add_option("--pool", o.pool, "Max-pool over: feature (default) or time")
      ->capture_default_str()->check(CLI::IsMember({"feature", "time"}));
  app.add_option("--optimizer", optimizer, "sgd or adam")->capture_default_str()->check(CLI::IsMember({"sgd", "adam"}));
  app.add_option("--lr", o.optimizer.learning_rate, "Learning rate")->capture_default_str();
  app.add_option("--momentum", o.optimizer.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--beta1", o.optimizer.beta1, "Adam beta1")->capture_default_str();
  app.add_option("--beta2", o.optimizer.beta2, "Adam beta2")->capture_default_str();
  app.add_option("--epsilon", o.optimizer.epsilon, "Adam epsilon")->capture_default_str();
  app.add_flag("--lazy-embedding-updates", o.optimizer.lazy_embedding,
               "Update only the embedding rows in the batch (cost independent of V)");
  app.add_option("--clip-norm", o.optimizer.clip_norm, "Clip the global gradient norm to this (0: off)")
      ->capture_default_str();
  app.add_option("--weight-decay", o.optimizer.weight_decay,
                 "Weight decay: Adam decoupled (AdamW), SGD L2 (torch SGD weight_decay); 0: off")
      ->capture_default_str();
  app.add_flag("--weight-decay-embedding", o.optimizer.weight_decay_embedding,
               "Decay the embedding table too (with --lazy-embedding-updates: only the batch's rows)");
  app.add_option("--class-weights", o.class_weights,
                 "Weigh the training loss by class: 'balanced' (n / (L * count) over --data) or a file of L numbers");
  app.add_option("--seed", o.seed, "Seed for initialisation and shuffling")->capture_default_str();
  bool no_shuffle = false;
  app.add_flag("--no-shuffle", no_shuffle, "Visit samples in file order");
  app.add_flag("--drop-last", o.drop_last, "Drop the last partial batch of each epoch");
  app.add_option("--threads", o.threads, "CPU threads (default: every core)");
  app.add_option("--device", o.device, "auto, cpu or cuda")->capture_default_str();
  CudaFlags cuda_flags;
  add_cuda_options(app, o.cuda, cuda_flags);
  app.add_option("--log-every", o.log_every, "Steps between metrics lines")->capture_default_str();
  app.add_option("--checkpoint-every", o.checkpoint_every, "Steps between checkpoints (0: each epoch)")
      ->capture_default_str();
  bool quiet = false;
  app.add_flag("--quiet", quiet, "No progress line");
  return run_app(app, argc, argv, [&] {
    o.shuffle = !no_shuffle;
    finish_cuda_options(o.cuda, cuda_flags);
    o.progress = !quiet;
    o.optimizer.kind = parse_optimizer_kind(optimizer);
    if (!o.resume && o.data_path.empty()) fail("--data is required (unless --resume)");
    return run_training(o);
  });
}
