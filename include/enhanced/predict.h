// enhanced-predict's work: the model's top-k labels for every sample of a set (labeled or not),
// optionally the full logits and probabilities as .npy, through run_inference (the forward pass
// enhanced-eval scores). Formats in docs/cli.md "enhanced-predict".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enhanced/atomic_file.h"
#include "enhanced/dataset.h"

namespace enhanced {

class Engine;

enum class PredictionFormat { csv, json_lines };

// By the --out extension: .csv (and no --out: stdout) CSV, .jsonl / .json JSON Lines; any other
// is an error naming the file.
PredictionFormat prediction_format(const std::string& out_path);

struct PredictOutputs {
  std::string top_k;          // CSV or JSON Lines; "" writes CSV to stdout
  std::string logits;         // .npy (N, L) float32, "" for none
  std::string probabilities;  // .npy (N, L) float32, "" for none
};

// Refuses, before any work, outputs that cannot be written as asked: an .npy output without the
// .npy extension, two outputs naming one file, an output over one of `inputs` (--data,
// --checkpoint: any path to the same file), or one in a missing folder.
void check_predict_outputs(const PredictOutputs& outputs, const std::vector<NamedFile>& inputs);

struct PredictStats {
  int64_t samples = 0;
  double seconds = 0;  // the forward passes and the writing, not the set-up
};

// Every sample's `top_k` labels (most probable first; equal probabilities: the lower label
// first) into the outputs. Files are written to temporaries and renamed into place once all are
// complete: a failure leaves none. `progress`: a line on stderr with rate and ETA. `label_names`
// (one a label, or none): the top-k files name the labels too (docs/cli.md); the .npy files
// are the same either way.
PredictStats predict(Engine& engine, const Dataset& dataset, int batch_size, int top_k, const PredictOutputs& outputs,
                     bool progress, const std::vector<std::string>& label_names = {});

}  // namespace enhanced
