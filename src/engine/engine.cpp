// make_engine: the one place that picks a device's code, and the one place that knows whether
// this build has the CUDA backend.
#include "enhanced/engine.h"

#include "engine/cpu_model.h"
#include "enhanced/common.h"
#ifdef ENHANCED_HAVE_CUDA
#include "engine/cuda_model.h"
#endif

namespace enhanced {

#ifdef ENHANCED_HAVE_CUDA
std::string cuda_probe();  // kernels/device_probe.cu
std::string cuda_unavailable_reason() { return cuda_probe(); }
const char* version_string() { return "enhanced " ENHANCED_VERSION " (CPU + CUDA backends)"; }
#else
std::string cuda_unavailable_reason() {
  return "this build has no CUDA backend (configured with ENHANCED_CUDA=OFF or no toolkit)";
}
const char* version_string() { return "enhanced " ENHANCED_VERSION " (CPU backend; built without CUDA)"; }
#endif

std::unique_ptr<Engine> make_engine(Device device, ParameterBuffer<float>& params, OptimizerState* optimizer,
                                    const EngineOptions& options) {
  if (device == Device::cpu)
    return allocating(cat("allocating the CPU engine's gradients and activations for batches of up to ", options.max_batch),
                      [&] { return make_cpu_engine(params, optimizer, options); });
#ifdef ENHANCED_HAVE_CUDA
  return make_cuda_engine(params, optimizer, options);
#else
  fail("this build has no CUDA backend");
#endif
}

}  // namespace enhanced
