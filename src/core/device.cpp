// The devices' and the CUDA options' names (--device, --rnn-algorithm), shared by the apps, the
// run state and the kernels.
#include "enhanced/device.h"

#include <system_error>

#include "enhanced/common.h"

namespace enhanced {

const EnumNames<Device>& devices() {
  static const EnumNames<Device> table{{Device::cpu, "cpu"}, {Device::cuda, "cuda"}};
  return table;
}

const char* to_string(Device device) { return name_of(devices(), device); }

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

const EnumNames<RnnAlgorithm>& rnn_algorithms() {
  static const EnumNames<RnnAlgorithm> table{{RnnAlgorithm::automatic, "auto"},
                                             {RnnAlgorithm::standard, "standard"},
                                             {RnnAlgorithm::persistent, "persistent"},
                                             {RnnAlgorithm::persistent_small_h, "persistent-small-h"}};
  return table;
}

RnnAlgorithm parse_rnn_algorithm(const std::string& name) {
  return parse_flag_value(rnn_algorithms(), name, "--rnn-algorithm");
}

const char* to_string(RnnAlgorithm algorithm) { return name_of(rnn_algorithms(), algorithm); }

}  // namespace enhanced
