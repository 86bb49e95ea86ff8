// The training loop behind enhanced-train: model set-up from data, pretrained table or
// checkpoint; batches from the loader; forward, backward, optimizer; metrics, progress,
// validation, atomic checkpoints and exact resumption.
#pragma once

#include <cstdint>
#include <string>

#include "enhanced/device.h"
#include "enhanced/optimizer_config.h"

namespace enhanced {

struct TrainOptions {
  std::string data_path;
  std::string valid_path;       // optional
  std::string pretrained_path;  // optional
  std::string init_from;        // optional checkpoint
  std::string out_dir;
  bool resume = false;          // continue the run saved in out_dir
  int64_t epochs = 0;           // 0: not given (1 for a new run, the saved value when resuming)
  int64_t steps = 0;            // > 0: stop after this many steps in all (overrides epochs)
  int batch_size = 64;
  int hidden = 128;
  int embedding_dim = 0;        // 0: from --pretrained, else 32
  int64_t vocab_size = 0;       // 0: from the embedding file, else the data's largest id + 1
  int num_labels = 0;           // 0: from the data
  std::string blend = "mean";
  std::string pool = "feature";
  OptimizerConfig optimizer;
  // --class-weights: "" (unweighted), "balanced" (from the training labels) or a file of L
  // numbers (src/train/class_weights.h). Weighs the training loss only; validation is unweighted.
  std::string class_weights;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
  int threads = 0;              // 0: every core
  std::string device = "auto";
  CudaOptions cuda;             // CUDA: TF32, graphs, LSTM algorithm
  int64_t log_every = 20;       // steps between metrics lines
  int64_t checkpoint_every = 0; // steps between last.safetensors writes (0: each epoch only)
  bool progress = true;
};

// Runs the whole training; throws Error on bad input. Returns the process exit code.
int run_training(TrainOptions options);

}  // namespace enhanced
