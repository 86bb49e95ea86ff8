// The cores behind `--threads 0` (default_cpu_threads in enhanced/cpu.h): the physical cores
// this process may run on, not every logical CPU of the host. A process pinned to a few CPUs
// (taskset, a container's or a batch job's cpuset) would otherwise time-share them among as many
// threads as the host has CPUs. A core's second hardware thread (SMT) shares its FMA units, which
// bound the LSTM's FP32 work, while more row slices cost work of their own; so, as PyTorch's
// default, hardware threads are not counted (their gain is not measured here: no SMT machine yet).
#pragma once

#include <vector>

namespace enhanced {

struct CpuCores {
  int allowed = 1;  // physical cores this process may run on (its CPU affinity)
  int host = 1;     // physical cores of the host (with hwloc: of its cgroup's cpuset, if narrowed)
};

// This process's counts: from hwloc's view of the machine where the build has hwloc (cores), else
// from the affinity mask and the online CPUs, each CPU counted as a core.
CpuCores count_cpu_cores();

// Whether count_cpu_cores() tells physical cores from their hardware threads (the build has hwloc).
bool cpu_cores_from_topology();

// For the tests, with hwloc only: the same count over hwloc's synthetic topology `description`
// (say "pack:2 core:4 pu:2") for a process allowed on the processing units `allowed_pus` (their
// indexes, in the description's order).
CpuCores count_cpu_cores(const char* description, const std::vector<unsigned>& allowed_pus);

// The threads of one of `ranks_on_host` ranks when none are asked for: the host's cores shared
// among its ranks, at most the cores this rank may run on, at least one.
int default_threads(CpuCores cores, int ranks_on_host);

}  // namespace enhanced
