// What a device is to the engine: which one a run uses, and the CUDA backend's options with
// their names (all defined in src/core/device.cpp). The apps resolve --device into a Device once
// (apps/app.h); whether this build and machine can use CUDA is engine.h's cuda_unavailable_reason.
#pragma once

#include <string>

namespace enhanced {

enum class Device { cpu, cuda };

const char* to_string(Device device);  // "cpu" or "cuda"

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

}  // namespace enhanced
