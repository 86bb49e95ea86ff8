// The devices' and the CUDA options' names (--device, --rnn-algorithm), shared by the apps, the
// run state and the kernels.
#include "enhanced/device.h"

#include <system_error>

#include "enhanced/common.h"

namespace enhanced {

const char* to_string(Device device) { return device == Device::cuda ? "cuda" : "cpu"; }

bool nvidia_device_present(const std::filesystem::path& root) {
  std::error_code error;
  if (std::filesystem::exists(root / "proc/driver/nvidia", error)) return true;
  for (std::filesystem::directory_iterator entry(root / "dev", error), end; !error && entry != end; entry.increment(error)) {
    const std::string name = entry->path().filename().string();
    if (name.rfind("nvidia", 0) == 0 || name == "dxg") return true;
  }
  return false;
}

std::string no_gpu_text(const std::string& reason) {
  return reason == kNoNvidiaGpu ? reason : "no usable GPU: " + reason;
}

RnnAlgorithm parse_rnn_algorithm(const std::string& name) {
  for (RnnAlgorithm algorithm : {RnnAlgorithm::automatic, RnnAlgorithm::standard, RnnAlgorithm::persistent,
                                 RnnAlgorithm::persistent_small_h})
    if (name == to_string(algorithm)) return algorithm;
  fail("--rnn-algorithm must be auto, standard, persistent or persistent-small-h, got '", name, "'");
}

const char* to_string(RnnAlgorithm algorithm) {
  switch (algorithm) {
    case RnnAlgorithm::automatic: return "auto";
    case RnnAlgorithm::standard: return "standard";
    case RnnAlgorithm::persistent: return "persistent";
    case RnnAlgorithm::persistent_small_h: return "persistent-small-h";
  }
  return "?";
}

}  // namespace enhanced
