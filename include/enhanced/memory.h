// The host memory a configuration needs, estimated before anything is allocated, and what the
// machine has: an app refuses a run that cannot fit with one line naming both, instead of being
// killed part-way through zero-filling its buffers (which touches every page).
#pragma once

#include <cstdint>
#include <string>

#include "enhanced/device.h"
#include "enhanced/model.h"
#include "enhanced/optimizer_config.h"

namespace enhanced {

// Bytes, by what they hold.
struct MemoryEstimate {
  uint64_t parameters = 0;   // the weights, float32
  uint64_t gradients = 0;    // one float per weight, the embedding's full (V, D) included (training)
  uint64_t optimizer = 0;    // the moments: SGD momentum one per weight, Adam two
  uint64_t activations = 0;  // what a step keeps at the batch size (activation_layout), the argmax
  uint64_t workspace = 0;    // the layers' workspaces (bilstm_workspace_size, dense_workspace_size), carved from the activations' allocation
  uint64_t other = 0;        // what the caller adds (the bench: its synthetic batch, its Zipf table)
  uint64_t total() const { return parameters + gradients + optimizer + activations + workspace + other; }
};

// The host allocations of an engine for `config` holding batches of up to `batch`. optimizer ==
// nullptr: inference (no gradients, no moments). On the CUDA device the host keeps only the
// parameters and the moments (the rest lives on the GPU, which is not checked here).
MemoryEstimate estimate_memory(const ModelConfig& config, const OptimizerConfig* optimizer, int batch, Device device);

// What this process may still allocate: MemAvailable from /proc/meminfo, or a cgroup v2 limit
// (memory.max - memory.current of the process's cgroup or an ancestor) where lower. bytes == 0:
// unknown (nothing is refused then).
struct AvailableMemory {
  uint64_t bytes = 0;
  std::string source;  // "MemAvailable" or the memory.max file
};
AvailableMemory available_memory();
uint64_t parse_meminfo_available(const std::string& meminfo);  // bytes; 0 when the line is missing
// The cgroup v2 part: the lowest memory.max - (memory.current - memory.stat's page cache) from
// the group named by /proc/self/cgroup's "0::/path" line up to `root` (/sys/fs/cgroup).
AvailableMemory cgroup_available(const std::string& self_cgroup, const std::string& root);

// "312.4 GiB" or "48.0 MiB".
std::string memory_text(uint64_t bytes);

// Throws Error "<what> needs about X (parameters a, gradients b, ...); this machine has Y
// available (source)" when the estimate exceeds what is available. resident: bytes of the
// estimate allocated already (a loaded checkpoint's weights), not counted against it again.
void check_fits_memory(const MemoryEstimate& need, const std::string& what, const AvailableMemory& available,
                       uint64_t resident = 0);

// "the model (V=.., D=.., H=.., T=.., L=..) with adam at --batch-size B": what a refusal names.
std::string model_run_text(const ModelConfig& config, const OptimizerConfig* optimizer, int batch, Device device);

// The apps' one call: estimate_memory, available_memory and check_fits_memory, named by
// model_run_text.
void check_model_fits_memory(const ModelConfig& config, const OptimizerConfig* optimizer, int batch, Device device,
                             uint64_t resident = 0);

}  // namespace enhanced
