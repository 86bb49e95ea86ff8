// What the CPU engine offers outside an engine (defined in src/engine/cpu.cpp): its
// threads, its BLAS and the BLAS's yardstick for the bench, the CPU's ceilings for the bench's
// roofline (src/engine/cpu_ceilings.cpp), and the loss layer's softmax on the host.
#pragma once

#include <string>

namespace enhanced {

// Sets the engine's CPU threads: `requested`, or default_cpu_threads(1) when 0; returns the
// count. BLAS is kept single-threaded, since the layers split their work over these threads
// themselves.
int configure_cpu_threads(int requested);

// The CPU threads of `--threads 0` for one of `ranks_on_host` ranks on this host: one per
// physical core, the host's cores shared among its ranks, at most the cores this process may run
// on (its CPU affinity: taskset, a container's or a batch job's cpuset); SMT siblings are not
// counted where the build has hwloc (src/engine/cpu_cores.h). Counted once, at the first call.
int default_cpu_threads(int ranks_on_host);

// probabilities (B, L) = softmax(logits (B, L)), on the host, as the loss layer computes it.
void softmax_probabilities(float* probabilities, const float* logits, int batch, int num_labels);

// The bench's yardstick for the CPU engine: the CPU BLAS's build configuration, and its best
// sgemm rate (GFLOP/s, the fastest of `runs` after `warmup`) on a GEMM the size of the step's
// big ones with `threads` BLAS threads. Leaves BLAS those threads: configure_cpu_threads after.
std::string cpu_blas_name();
double cpu_gemm_gflops(int threads, int warmup, int runs);

// The bench's roofline (src/engine/cpu_ceilings.cpp): this CPU's ceilings on `threads` threads,
// each the best of a few runs of a probe loop that does only that work. GFLOP/s of FP32 FMA
// (AVX-512 where the CPU has it, else AVX2; 0 with neither), of AVX512-BF16 dot products and of
// AMX-BF16 tiles (0 where the CPU, or Linux for AMX, does not run them); and the copy bandwidth
// of a buffer larger than the caches, bytes read plus bytes written per second.
struct CpuCeilings {
  const char* fp32_isa = "none";
  double fp32_gflops = 0;
  double avx512_bf16_gflops = 0;
  double amx_bf16_gflops = 0;
  double copy_gbytes_per_s = 0;
};
CpuCeilings measure_cpu_ceilings(int threads);

}  // namespace enhanced
