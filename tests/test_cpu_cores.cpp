// `--threads 0`: one thread per physical core this process may run on (src/engine/cpu_cores.h).
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/cpu_cores.h"
#include "enhanced/cpu.h"

namespace enhanced {
namespace {

TEST(CpuCores, TheHostsCoresAreSharedAmongItsRanksWithinEachRanksAffinity) {
  EXPECT_EQ(default_threads({16, 16}, 1), 16);
  EXPECT_EQ(default_threads({16, 16}, 4), 4);    // unbound ranks share the host
  EXPECT_EQ(default_threads({1, 16}, 4), 1);     // a rank bound to one core
  EXPECT_EQ(default_threads({8, 16}, 4), 4);     // ranks bound to a package each, two a package
  EXPECT_EQ(default_threads({2, 64}, 1), 2);     // a container's cpuset of 2 on a host of 64
  EXPECT_EQ(default_threads({16, 16}, 32), 1);   // more ranks than cores: one thread each
  EXPECT_EQ(default_threads({16, 16}, 0), 16);   // no rank count: this process alone
}

TEST(CpuCores, HardwareThreadsOfOneCoreCountOnce) {
  if (!cpu_cores_from_topology()) GTEST_SKIP() << "this build has no hwloc: each CPU counts as a core";
  // One package of 4 cores of 2 hardware threads each: units 2c and 2c+1 are core c's.
  const char* smt = "pack:1 core:4 pu:2";
  const CpuCores all = count_cpu_cores(smt, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(all.host, 4);
  EXPECT_EQ(all.allowed, 4);
  EXPECT_EQ(count_cpu_cores(smt, {0, 1}).allowed, 1);  // both threads of core 0
  EXPECT_EQ(count_cpu_cores(smt, {0, 2}).allowed, 2);  // one thread of cores 0 and 1
  EXPECT_EQ(count_cpu_cores(smt, {7}).allowed, 1);
  EXPECT_EQ(count_cpu_cores(smt, {7}).host, 4);
  const CpuCores no_smt = count_cpu_cores("pack:2 core:3 pu:1", {0, 1, 2, 3, 4, 5});
  EXPECT_EQ(no_smt.host, 6);
  EXPECT_EQ(no_smt.allowed, 6);
  EXPECT_EQ(default_threads(count_cpu_cores(smt, {0, 1, 2, 3, 4, 5, 6, 7}), 1), 4);
}

TEST(CpuCores, ThisProcessCountsWithinItsAffinity) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  const CpuCores cores = count_cpu_cores();
  EXPECT_GE(cores.allowed, 1);
  EXPECT_LE(cores.allowed, cores.host);
  EXPECT_LE(cores.allowed, CPU_COUNT(&mask));
  EXPECT_EQ(default_cpu_threads(1), cores.allowed);
}

// A child pinned to one CPU (as `taskset -c N` would) counts one core, however many the host
// has; its exit status carries the threads.
TEST(CpuCores, AProcessPinnedToOneCpuGetsOneThread) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  int last_cpu = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask)) last_cpu = cpu;
  ASSERT_GE(last_cpu, 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(last_cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) _exit(100);
    _exit(std::min(default_threads(count_cpu_cores(), 1), 99));  // the parent may have counted once already
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << "threads for a process pinned to CPU " << last_cpu
                                    << " (100: the pinning failed)";
}

}  // namespace
}  // namespace enhanced
