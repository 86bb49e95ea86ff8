// Which device a run uses. The CPU always works; CUDA needs a build with the backend and a
// usable GPU, and says plainly why not otherwise.
#pragma once

#include <string>

namespace enhanced {

enum class Device { cpu, cuda };

// cuDNN's LSTM algorithm: `automatic` times every one cuDNN accepts for the model's shape (and
// whose results agree with `standard`) and keeps the fastest.
enum class RnnAlgorithm { automatic, standard, persistent, persistent_small_h };

// RnnAlgorithm from "auto", "standard", "persistent" or "persistent-small-h" (Error otherwise).
RnnAlgorithm parse_rnn_algorithm(const std::string& name);
const char* to_string(RnnAlgorithm algorithm);

// How the CUDA backend runs a model (ignored on the CPU).
struct CudaOptions {
  bool tf32 = false;    // allow TF32 tensor-core math in cuDNN and cuBLAS (looser than FP32)
  bool graphs = true;   // replay each training step shape from a captured CUDA graph
  RnnAlgorithm rnn_algorithm = RnnAlgorithm::automatic;
};

// "" when a CUDA device can be used, else the reason (no backend built, no driver, no device).
std::string cuda_unavailable_reason();

// Resolves --device auto|cpu|cuda. `cuda` without a usable GPU is an Error; `auto` falls back to
// the CPU. Prints one line to stderr saying which device was picked (and why) when verbose.
Device resolve_device(const std::string& flag, bool verbose = true);

}  // namespace enhanced
