// Probes for a usable CUDA device without failing: the answer feeds --device auto|cuda.
#include <cuda_runtime.h>

#include <string>

namespace enhanced {

std::string cuda_probe() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    const std::string reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky error so later probes start clean
    return reason;
  }
  if (count == 0) return "no CUDA device found";
  return "";
}

}  // namespace enhanced
