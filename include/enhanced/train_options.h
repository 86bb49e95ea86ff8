// What enhanced-train was asked for: one run's options, as the command line (or, on --resume,
// the recorded run) gives them; each flag's name, rule and record key are its row of
// train_fields() (enhanced/train_fields.h). In its own header for the trainer's parts (src/train/run_*.h,
// distributed.h), which take the options but not the loop.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "enhanced/engine.h"
#include "enhanced/optimizer_config.h"

namespace enhanced {

struct TrainOptions {
  std::string data_path;
  std::string valid_path;       // optional
  std::string pretrained_path;  // optional
  std::string init_from;        // optional checkpoint
  // --label-names FILE: the labels' names (enhanced/label_names.h), read from the file when the
  // flag is parsed; kept in the checkpoints' metadata and the run state. Empty: no names.
  std::string label_names_path;
  std::vector<std::string> label_names;
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
  // The weights themselves, resolved once when the run starts and recorded in the run state, so
  // that a resume trains with them whatever has become of the file or the data since.
  std::vector<float> class_weight_values;
  // --class-weight-mean: what the weighted loss's sum is divided by (enhanced/class_weight_mean.h):
  // the total weight (torch's, the default) or the batch's size (Keras', Model.fit's class_weight).
  ClassWeightMean class_weight_mean = ClassWeightMean::weights;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
  // The device, CPU threads, CUDA options and arithmetic, resolved once from the engine's flags
  // by the caller (resolve_engine_flags, apps/app.h).
  EngineChoice engine;
  int64_t log_every = 20;       // steps between metrics lines
  int64_t checkpoint_every = 0; // steps between last.safetensors writes (0: each epoch only)
  int64_t valid_every = 0;      // steps between validations, as well as at each epoch end (0: epoch ends only)
  bool progress = true;
  // The run's informational stderr lines (engine:, model:, resuming, resume: ... changed, note:,
  // done:, the stop notes); warnings and errors print whatever it says. false: Model.fit with
  // verbose=0, as Keras prints nothing then. Not recorded in the run state.
  bool narrate = true;
  // Whether the run installs its SIGINT/SIGTERM handlers (run_signals.h). false: the host process
  // owns its signals (the Python extension: Ctrl-C is a KeyboardInterrupt that its observer turns
  // into TrainingDecision::interrupt, training_observer.h). Not recorded in the run state.
  bool handle_signals = true;
  bool overwrite = false;       // replace a run already in out_dir (its files are removed first)
  // Data-parallel runs (docs/distributed.md): steps between the ranks' comparisons of their
  // parameters (also compared at every checkpoint).
  int64_t check_every = 100;

  // Learning-rate schedule (src/train/schedule.h): the rate of every step is a function of the
  // step and, for plateau, of the recorded validations.
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  double min_lr = 0;
  int64_t lr_step_size = 0;     // step schedule
  double lr_factor = 0.1;       // step and plateau schedules
  int64_t lr_patience = 10;     // plateau schedule

  // What the validations decide: best.safetensors, plateau reductions, early stopping.
  std::string monitor = "valid_loss";  // valid_loss | valid_accuracy | valid_f1
  double min_delta = 0;
  int64_t early_stopping = 0;   // patience in validations (0: off)

  // The command-line flags the user gave ("--hidden", ...): on --resume and --init-from, a
  // given flag that contradicts the saved run is an error, not silently overridden.
  std::set<std::string> given_flags;
};

// The names --lr-schedule and --monitor take, from the tables of src/train/schedule.cpp.
std::vector<std::string> lr_schedule_names();
std::vector<std::string> monitor_names();

}  // namespace enhanced
