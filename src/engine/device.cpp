// The choice of a device for --device auto|cpu|cuda.
#include "enhanced/device.h"

#include <cstdio>

#include "enhanced/common.h"

namespace enhanced {

Device resolve_device(const std::string& flag, bool verbose) {
  if (flag != "auto" && flag != "cpu" && flag != "cuda") fail("--device must be auto, cpu or cuda, got '", flag, "'");
  if (flag == "cpu") {
    if (verbose) std::fprintf(stderr, "device: cpu\n");
    return Device::cpu;
  }
  const std::string reason = cuda_unavailable_reason();
  if (reason.empty()) {
    if (verbose) std::fprintf(stderr, "device: cuda\n");
    return Device::cuda;
  }
  if (flag == "cuda") fail("--device cuda: no usable GPU: ", reason);
  if (verbose) std::fprintf(stderr, "device: cpu (no usable GPU: %s)\n", reason.c_str());
  return Device::cpu;
}

}  // namespace enhanced
