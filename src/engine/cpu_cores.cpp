// The cores behind `--threads 0` (cpu_cores.h): hwloc's topology where the build has it, the
// affinity mask otherwise.
#include "engine/cpu_cores.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#ifdef ENHANCED_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace enhanced {
namespace {

// Each CPU counted as a core: the CPUs of this process's affinity mask, and the host's online CPUs.
CpuCores count_logical_cpus() {
  CpuCores cores;
  cores.host = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t mask;
  CPU_ZERO(&mask);
  cores.allowed = sched_getaffinity(0, sizeof mask, &mask) == 0 ? std::max(1, CPU_COUNT(&mask)) : cores.host;
  return cores;
}

#ifdef ENHANCED_HAVE_HWLOC
// A loaded topology and a bitmap, released whatever happens.
struct Topology {
  hwloc_topology_t topology = nullptr;
  hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
  bool loaded = false;
  explicit Topology(const char* synthetic_description) {
    if (hwloc_topology_init(&topology) != 0) {
      topology = nullptr;
      return;
    }
    if (synthetic_description && hwloc_topology_set_synthetic(topology, synthetic_description) != 0) return;
    loaded = allowed && hwloc_topology_load(topology) == 0;
  }
  ~Topology() {
    if (allowed) hwloc_bitmap_free(allowed);
    if (topology) hwloc_topology_destroy(topology);
  }
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;
};

// The cores (or, where hwloc found none, the processing units) of the topology, and those that
// share a processing unit with `allowed`: a core counts when any of its hardware threads is allowed.
CpuCores count_in(const Topology& topology) {
  hwloc_obj_type_t type = HWLOC_OBJ_CORE;
  if (hwloc_get_nbobjs_by_type(topology.topology, type) <= 0) type = HWLOC_OBJ_PU;
  CpuCores cores{0, 0};
  for (hwloc_obj_t core = hwloc_get_next_obj_by_type(topology.topology, type, nullptr); core != nullptr;
       core = hwloc_get_next_obj_by_type(topology.topology, type, core)) {
    ++cores.host;
    if (hwloc_bitmap_intersects(core->cpuset, topology.allowed)) ++cores.allowed;
  }
  cores.host = std::max(1, cores.host);
  cores.allowed = std::max(1, cores.allowed);
  return cores;
}
#endif

}  // namespace

bool cpu_cores_from_topology() {
#ifdef ENHANCED_HAVE_HWLOC
  return true;
#else
  return false;
#endif
}

CpuCores count_cpu_cores() {
#ifdef ENHANCED_HAVE_HWLOC
  Topology topology(nullptr);
  if (topology.loaded && hwloc_get_cpubind(topology.topology, topology.allowed, HWLOC_CPUBIND_PROCESS) == 0)
    return count_in(topology);
#endif
  return count_logical_cpus();
}

CpuCores count_cpu_cores([[maybe_unused]] const char* description,
                         [[maybe_unused]] const std::vector<unsigned>& allowed_pus) {
#ifdef ENHANCED_HAVE_HWLOC
  Topology topology(description);
  if (topology.loaded) {
    for (unsigned pu : allowed_pus) {
      const hwloc_obj_t unit = hwloc_get_obj_by_type(topology.topology, HWLOC_OBJ_PU, pu);
      if (unit) hwloc_bitmap_or(topology.allowed, topology.allowed, unit->cpuset);
    }
    return count_in(topology);
  }
#endif
  return CpuCores{0, 0};  // no hwloc, or a description hwloc rejects: no count (the tests check)
}

int default_threads(CpuCores cores, int ranks_on_host) {
  const int shared = cores.host / std::max(1, ranks_on_host);
  return std::max(1, std::min(cores.allowed, shared));
}

}  // namespace enhanced
