// The memory estimate mirrors the CPU engine's allocations (cpu_model.cpp, cpu_engine.cpp), so it lives beside
// them: the activations and the layers' workspaces are the layout the engine carves.
#include "enhanced/memory.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/cpu_model.h"
#include "enhanced/common.h"

namespace enhanced {
namespace {

constexpr uint64_t kFloat = sizeof(float);

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// memory.stat's "file" (page cache) of a cgroup directory; 0 when unreadable.
uint64_t cgroup_file_bytes(const std::filesystem::path& dir) {
  const std::string stat = read_text(dir / "memory.stat");
  const size_t at = stat.rfind("file ", 0) == 0 ? 0 : stat.find("\nfile ");
  if (at == std::string::npos) return 0;
  unsigned long long bytes = 0;
  return std::sscanf(stat.c_str() + at, " file %llu", &bytes) == 1 ? bytes : 0;
}

}  // namespace

AvailableMemory cgroup_available(const std::string& self_cgroup, const std::string& root) {
  AvailableMemory best;
  const size_t line = self_cgroup.rfind("0::", 0) == 0 ? 0 : self_cgroup.find("\n0::");  // v2: "0::/path"
  if (line == std::string::npos) return best;
  const size_t at = line == 0 ? 0 : line + 1;
  std::filesystem::path group = self_cgroup.substr(at + 3, self_cgroup.find('\n', at) - at - 3);
  for (;; group = group.parent_path()) {
    const std::filesystem::path dir = std::filesystem::path(root) / group.relative_path();
    const std::string max = read_text(dir / "memory.max"), current = read_text(dir / "memory.current");
    if (!max.empty() && max.rfind("max", 0) != 0 && !current.empty()) {
      // The group's page cache counts in memory.current but is given back under pressure.
      const uint64_t limit = std::strtoull(max.c_str(), nullptr, 10), charged = std::strtoull(current.c_str(), nullptr, 10);
      const uint64_t used = charged - std::min<uint64_t>(charged, cgroup_file_bytes(dir));
      const uint64_t left = limit > used ? limit - used : 1;
      if (best.bytes == 0 || left < best.bytes) best = {left, (dir / "memory.max").string()};
    }
    if (group == group.parent_path() || group.empty()) break;
  }
  return best;
}

MemoryEstimate estimate_memory(const ModelConfig& c, const OptimizerConfig* optimizer, int batch, Device device) {
  MemoryEstimate m;
  const uint64_t weights = parameter_count(c) * kFloat;
  m.parameters = weights;
  if (optimizer) m.optimizer = moment_names(*optimizer).size() * weights;
  if (device == Device::cuda) return m;
  if (optimizer) m.gradients = weights;
  std::vector<ActivationSlot> layout = cpu_activation_layout<float>(c, batch);
  const uint64_t everything = activation_count(layout);
  for (ActivationSlot& slot : layout)
    if (slot.field != ActivationField::lstm_workspace && slot.field != ActivationField::dense_workspace) slot.numel = 0;
  m.workspace = activation_count(layout) * kFloat;
  m.activations = (everything - activation_count(layout) + static_cast<uint64_t>(batch) * c.pooled_features()) *
                  kFloat;  // + the int32 argmax
  return m;
}

uint64_t parse_meminfo_available(const std::string& meminfo) {
  const size_t at = meminfo.find("MemAvailable:");
  if (at == std::string::npos) return 0;
  unsigned long long kib = 0;
  if (std::sscanf(meminfo.c_str() + at, "MemAvailable: %llu kB", &kib) != 1) return 0;
  return kib * 1024;
}

AvailableMemory available_memory() {
  AvailableMemory best{parse_meminfo_available(read_text("/proc/meminfo")), "MemAvailable"};
  const AvailableMemory group = cgroup_available(read_text("/proc/self/cgroup"), "/sys/fs/cgroup");
  if (group.bytes && (best.bytes == 0 || group.bytes < best.bytes)) best = group;
  return best;
}

std::string memory_text(uint64_t bytes) {
  const double gib = static_cast<double>(bytes) / (1ull << 30);
  char text[48];
  if (gib >= 1) std::snprintf(text, sizeof text, "%.1f GiB", gib);
  else std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1ull << 20));
  return text;
}

void check_fits_memory(const MemoryEstimate& need, const std::string& what, const AvailableMemory& available,
                       uint64_t resident) {
  const uint64_t total = need.total();
  if (available.bytes == 0 || total - std::min(resident, total) <= available.bytes) return;
  // The parts in the total's unit, so that they read as its breakdown.
  const double unit = total >= (1ull << 30) ? static_cast<double>(1ull << 30) : static_cast<double>(1ull << 20);
  std::string parts;
  const std::pair<const char*, uint64_t> named[] = {{"parameters", need.parameters}, {"gradients", need.gradients},
                                                     {"optimizer", need.optimizer}, {"activations", need.activations},
                                                     {"workspace", need.workspace}, {"other", need.other}};
  for (const auto& [name, bytes] : named) {
    if (bytes == 0) continue;
    char part[64];
    std::snprintf(part, sizeof part, "%s%s %.1f", parts.empty() ? "" : ", ", name, static_cast<double>(bytes) / unit);
    parts += part;
  }
  fail(what, " needs about ", memory_text(total), " (", parts, "); this machine has ", memory_text(available.bytes),
       " available (", available.source, ")");
}

std::string model_run_text(const ModelConfig& c, const OptimizerConfig* optimizer, int batch, Device device) {
  return cat("the model (V=", c.vocab_size, ", D=", c.embedding_dim, ", H=", c.hidden, ", T=", c.seq_len, ", L=",
             c.num_labels, ")", optimizer ? " with " : "", optimizer ? to_string(optimizer->kind) : "",
             " at --batch-size ", batch, device == Device::cuda ? " (host side)" : "");
}

void check_model_fits_memory(const ModelConfig& c, const OptimizerConfig* optimizer, int batch, Device device,
                             uint64_t resident) {
  check_fits_memory(estimate_memory(c, optimizer, batch, device), model_run_text(c, optimizer, batch, device),
                    available_memory(), resident);
}

}  // namespace enhanced
