// What a device is to the engine: which one a run uses, and the CUDA backend's options with
// their names (all defined in src/core/device.cpp). The apps resolve --device into a Device once
// (apps/app.h); whether this build and machine can use CUDA is engine.h's cuda_unavailable_reason.
#pragma once

#include <filesystem>
#include <string>

#include "enhanced/enum_names.h"

namespace enhanced {

enum class Device { cpu, cuda };

// Their names (enhanced/enum_names.h): "cpu", "cuda". --device also takes "auto" (apps/app.h).
const EnumNames<Device>& devices();
const char* to_string(Device device);

// cuDNN's LSTM algorithm: `automatic` times every one cuDNN accepts for the model's shape (and
// whose results agree with `standard`) and keeps the fastest.
enum class RnnAlgorithm { automatic, standard, persistent, persistent_small_h };

// Their names: "auto", "standard", "persistent", "persistent-small-h".
const EnumNames<RnnAlgorithm>& rnn_algorithms();
// RnnAlgorithm from its name (Error "--rnn-algorithm must be ..." otherwise).
RnnAlgorithm parse_rnn_algorithm(const std::string& name);
const char* to_string(RnnAlgorithm algorithm);

// Whether the machine has an NVIDIA device at all, judged from files under `root` without asking
// the CUDA runtime: a /dev/nvidia* node, /proc/driver/nvidia, or WSL2's /dev/dxg (CUDA there has
// no /dev/nvidia*). Without any, the runtime's own reason ("driver version is insufficient")
// would mislead.
bool nvidia_device_present(const std::filesystem::path& root = "/");

// cuda_unavailable_reason() on a machine without an NVIDIA device (nvidia_device_present).
inline constexpr const char* kNoNvidiaGpu = "no NVIDIA GPU";

// Why the GPU is not used, as the apps' lines say it ("device: cpu (...)", "--device cuda: ..."):
// "no NVIDIA GPU" for a machine without one, else "no usable GPU: <reason>".
std::string no_gpu_text(const std::string& reason);

// How the CUDA backend runs a model (ignored on the CPU).
struct CudaOptions {
  bool tf32 = false;    // allow TF32 tensor-core math in cuDNN and cuBLAS (looser than FP32)
  bool graphs = true;   // replay each training step shape from a captured CUDA graph
  RnnAlgorithm rnn_algorithm = RnnAlgorithm::automatic;
};

}  // namespace enhanced
