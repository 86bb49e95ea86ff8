// What the CPU engine offers outside an engine (defined in src/engine/cpu.cpp): its
// threads, its BLAS and the BLAS's yardstick for the bench, and the loss layer's softmax on the host.
#pragma once

#include <string>

namespace enhanced {

// Sets the engine's CPU threads: `requested`, or every core when 0; returns the count. BLAS is
// kept single-threaded, since the layers split their work over these threads themselves.
int configure_cpu_threads(int requested);

// probabilities (B, L) = softmax(logits (B, L)), on the host, as the loss layer computes it.
void softmax_probabilities(float* probabilities, const float* logits, int batch, int num_labels);

// The bench's yardstick for the CPU engine: the CPU BLAS's build configuration, and its best
// sgemm rate (GFLOP/s, the fastest of `runs` after `warmup`) on a GEMM the size of the step's
// big ones with `threads` BLAS threads. Leaves BLAS those threads: configure_cpu_threads after.
std::string cpu_blas_name();
double cpu_gemm_gflops(int threads, int warmup, int runs);

}  // namespace enhanced
