#include "enhanced/device.h"

#include <cstdio>

#include "enhanced/common.h"

namespace enhanced {

#ifdef ENHANCED_HAVE_CUDA
std::string cuda_probe();  // src/kernels/device.cu
std::string cuda_unavailable_reason() { return cuda_probe(); }
#else
std::string cuda_unavailable_reason() { return "this build has no CUDA backend (configured with ENHANCED_CUDA=OFF or no toolkit)"; }
#endif

// The CUDA training step arrives with the CUDA backend issue; until then a usable GPU is reported
// but training stays on the CPU.
static const char* kCudaTrainingMissing = "the CUDA training path is not implemented in this version";

Device resolve_device(const std::string& flag, bool verbose) {
  if (flag == "cpu") {
    if (verbose) std::fprintf(stderr, "device: cpu\n");
    return Device::cpu;
  }
  if (flag != "auto" && flag != "cuda") fail("--device must be auto, cpu or cuda, got '", flag, "'");
  const std::string reason = cuda_unavailable_reason();
  if (flag == "cuda") {
    if (!reason.empty()) fail("--device cuda: no usable GPU: ", reason);
    fail("--device cuda: ", kCudaTrainingMissing, "; use --device cpu");
  }
  if (verbose)
    std::fprintf(stderr, "device: cpu (auto: %s)\n", reason.empty() ? kCudaTrainingMissing : reason.c_str());
  return Device::cpu;
}

}  // namespace enhanced
