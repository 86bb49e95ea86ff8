// What the CPU engine offers outside an engine (enhanced/cpu.h): its threads, its BLAS and the
// BLAS's yardstick for the bench, and the loss layer's softmax on the host.
#include "enhanced/cpu.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "engine/cpu_cores.h"
#include "layers/cpu/blas.h"
#include "layers/softmax_xent.h"

namespace enhanced {

// Counted once, at the first call: before OpenMP's first parallel region, which may pin this
// thread (OMP_PROC_BIND), and without loading hwloc's topology again for every predict.
int default_cpu_threads(int ranks_on_host) {
  static const CpuCores cores = count_cpu_cores();
  return default_threads(cores, ranks_on_host);
}

int configure_cpu_threads(int requested) {
  const int threads = requested > 0 ? requested : default_cpu_threads(1);
  openblas_set_num_threads(1);
  omp_set_num_threads(threads);
  return threads;
}

void softmax_probabilities(float* probabilities, const float* logits, int batch, int num_labels) {
  softmax_forward(probabilities, logits, batch, num_labels);
}

std::string cpu_blas_name() { return openblas_get_config(); }

double cpu_gemm_gflops(int threads, int warmup, int runs) {
  const int m = 4096, n = 1024, k = 160;
  std::vector<float> a(static_cast<size_t>(m) * k, 0.5f), b(static_cast<size_t>(k) * n, 0.25f), c(static_cast<size_t>(m) * n);
  openblas_set_num_threads(threads);
  double best = std::numeric_limits<double>::infinity();
  for (int run = 0; run < warmup + runs; ++run) {
    const auto start = std::chrono::steady_clock::now();
    gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (run >= warmup) best = std::min(best, seconds);
  }
  return 2.0 * m * n * k / best / 1e9;  // the best run: what the machine can do, not what it did under load
}

}  // namespace enhanced
