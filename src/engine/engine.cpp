// make_engine: the one place that picks a device's code, and the one place that knows whether
// this build has the CUDA backend.
#include "enhanced/engine.h"

#include <cmath>

#include "engine/cpu_engine.h"
#include "enhanced/common.h"
#ifdef ENHANCED_HAVE_CUDA
#include "engine/cuda_engine.h"
#endif

namespace enhanced {

#ifdef ENHANCED_HAVE_CUDA
std::string cuda_probe();  // kernels/device_probe.cu
std::string cuda_unavailable_reason() { return nvidia_device_present() ? cuda_probe() : kNoNvidiaGpu; }
const char* version_string() { return "enhanced " ENHANCED_VERSION " (CPU + CUDA backends)"; }
#else
std::string cuda_unavailable_reason() {
  if (!nvidia_device_present()) return kNoNvidiaGpu;
  return "this build has no CUDA backend (configured with ENHANCED_CUDA=OFF or no toolkit)";
}
const char* version_string() { return "enhanced " ENHANCED_VERSION " (CPU backend; built without CUDA)"; }
#endif

void check_class_weights(const std::vector<float>& weights, int num_labels) {
  if (weights.empty()) return;
  if (weights.size() != static_cast<size_t>(num_labels))
    fail("class weights: ", weights.size(), " numbers for a model of ", num_labels, " labels");
  for (size_t c = 0; c < weights.size(); ++c)
    if (!(weights[c] >= 0) || !std::isfinite(weights[c]))
      fail("class weights: the weight of class ", c, " must be non-negative and finite, got ", weights[c]);
}

Communicator* data_parallel_ranks(const EngineOptions& options) {
  Communicator* ranks = options.communicator;
  return ranks && (ranks->size() > 1 || options.exchange_alone) ? ranks : nullptr;
}

std::unique_ptr<Engine> make_engine(Device device, ParameterBuffer<float>& params, OptimizerState* optimizer,
                                    const EngineOptions& options) {
  check_class_weights(options.class_weights, params.config.num_labels);
  if (device == Device::cpu)
    return allocating(cat("allocating the CPU engine's gradients and activations for batches of up to ", options.max_batch),
                      [&] { return make_cpu_engine(params, optimizer, options); });
#ifdef ENHANCED_HAVE_CUDA
  // Data-parallel: this rank's GPU and the NCCL exchange (a build without NCCL refuses there).
  return make_cuda_engine(params, optimizer, options);
#else
  fail("this build has no CUDA backend");
#endif
}

}  // namespace enhanced
