// The cuDNN LSTM algorithm for full batches (lstm.cuh's CudnnBiLstm): each candidate run once
// at max_batch on synthetic inputs and weights, checked against the standard algorithm, and
// (automatic: standard and persistent-small-h) timed, the fastest that agrees kept; a named one
// checked and kept, or refused.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/lstm_impl.cuh"

namespace enhanced::cuda {

using namespace lstm_parts;

namespace {

// Deterministic pseudo-random values in [-scale, scale] for the timing runs.
__global__ void fill_kernel(float* __restrict__ out, int64_t count, uint32_t seed, float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    out[i] = scale * (static_cast<float>(h & 0xffffff) / 8388608.0f - 1.0f);
  }
}

void fill(float* out, size_t count, uint32_t seed, float scale, cudaStream_t stream) {
  fill_kernel<<<256, kThreads, 0, stream>>>(out, static_cast<int64_t>(count), seed, scale);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

// Largest |a - b| relative to the largest |b|; infinite when either holds a NaN or an infinity.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 1e-12, worst = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return HUGE_VAL;
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
    worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return worst / scale;
}

}  // namespace

// Synthetic inputs and weights at max_batch for trying an algorithm: one training step (pack,
// forward, both backwards) and its outputs y, dx and the weight gradient in the checkpoint's
// layout (so that the weight spaces' layouts may differ between algorithms).
struct CudnnBiLstm::Impl::Probe {
  size_t x_count, y_count, weight_count;
  DeviceBuffer<float> x, dx, y, dy, weights, dweights;

  explicit Probe(const Impl& lstm)
      : x_count(static_cast<size_t>(lstm.max_batch) * lstm.seq_len * lstm.input),
        y_count(static_cast<size_t>(lstm.max_batch) * lstm.seq_len * 2 * lstm.hidden),
        weight_count(2 * (4 * static_cast<size_t>(lstm.hidden) * lstm.input +
                          4 * static_cast<size_t>(lstm.hidden) * lstm.hidden + 8 * static_cast<size_t>(lstm.hidden))),
        x(x_count), dx(x_count), y(y_count), dy(y_count), weights(weight_count), dweights(weight_count) {}

  void fill_inputs(int hidden, cudaStream_t stream) {
    fill(x.data(), x_count, 1, 1.0f, stream);
    fill(dy.data(), y_count, 2, 1e-2f, stream);
    fill(weights.data(), weight_count, 3, 1.0f / std::sqrt(static_cast<float>(hidden)), stream);
  }

  static TensorPointers carve(float* base, size_t H, size_t D) {
    return TensorPointers{{base, base + 2 * 4 * H * D, base + 2 * 4 * H * (D + H), base + 2 * 4 * H * (D + H) + 8 * H}};
  }
};

void CudnnBiLstm::Impl::probe_step(Probe& probe, cudaStream_t stream) {
  pack(Probe::carve(probe.weights.data(), hidden, input), stream);
  run_forward(probe.x.data(), probe.y.data());
  run_backward(probe.dx.data(), probe.y.data(), probe.dy.data(), probe.x.data());
}

// One step with the configured algorithm: y, dx and the weight gradient on the host. The outputs
// are NaN first, so that what an algorithm failed to write cannot pass for the reference's.
std::array<std::vector<float>, 3> CudnnBiLstm::Impl::probe_outputs(Probe& probe, cudaStream_t stream) {
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(probe.y.data(), 0xff, probe.y.bytes(), stream));
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(probe.dx.data(), 0xff, probe.dx.bytes(), stream));
  probe_step(probe, stream);
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(probe.dweights.data(), 0, probe.dweights.bytes(), stream));
  unpack_add(Probe::carve(probe.dweights.data(), hidden, input), stream);
  std::array<std::vector<float>, 3> got = {std::vector<float>(probe.y_count), std::vector<float>(probe.x_count),
                                           std::vector<float>(probe.weight_count)};
  copy_to_host(got[0].data(), probe.y.data(), probe.y_count, stream);
  copy_to_host(got[1].data(), probe.dx.data(), probe.x_count, stream);
  copy_to_host(got[2].data(), probe.dweights.data(), probe.weight_count, stream);
  return got;
}

// Milliseconds a step takes with the configured algorithm, the mean of 5.
double CudnnBiLstm::Impl::probe_milliseconds(Probe& probe, cudaStream_t stream) {
  constexpr int kRuns = 5;
  const UniqueEvent start = make_event(true), stop = make_event(true);
  ENHANCED_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int run = 0; run < kRuns; ++run) probe_step(probe, stream);
  ENHANCED_CUDA_CHECK(cudaEventRecord(stop, stream));
  ENHANCED_CUDA_CHECK(cudaEventSynchronize(stop));
  float total_ms = 0;
  ENHANCED_CUDA_CHECK(cudaEventElapsedTime(&total_ms, start, stop));
  return total_ms / kRuns;
}

// Runs forward + both backwards at max_batch with each candidate algorithm on the same synthetic
// inputs and weights, and checks its y, dx and weight gradient against the standard
// algorithm's. automatic: standard and persistent-small-h, where cuDNN accepts it, are timed and
// the fastest that agrees is kept. A named one is checked the same way (not timed) and kept, or refused with the reason.
// The model's own weights are packed in at each forward later.
void CudnnBiLstm::Impl::select(RnnAlgorithm asked, cudaStream_t stream) {
  if (bf16 && asked != RnnAlgorithm::automatic && asked != RnnAlgorithm::standard)
    fail("--precision bf16 runs cuDNN's standard LSTM algorithm only (cuDNN 9's persistent RNN kernels are FP16 "
         "and FP32); --rnn-algorithm ", to_string(asked), " cannot be used with it");
  // bf16 has one algorithm, so automatic is standard there: never a candidate of its own, whose
  // name would be recorded as the run's choice.
  const RnnAlgorithm wanted = bf16 && asked == RnnAlgorithm::automatic ? RnnAlgorithm::standard : asked;
  const bool automatic = wanted == RnnAlgorithm::automatic;
  std::vector<RnnAlgorithm> candidates{RnnAlgorithm::standard};
  // Not PERSIST_STATIC: PyTorch never runs it on a bidirectional FP32 LSTM, and a sticky fault
  // in a trial would end every default run with the context; it stays --rnn-algorithm persistent.
  if (automatic) candidates.push_back(RnnAlgorithm::persistent_small_h);
  else if (wanted != RnnAlgorithm::standard) candidates.push_back(wanted);
  Probe probe(*this);
  probe.fill_inputs(hidden, stream);
  // FMA math: the algorithms differ by rounding only; TF32 rounds inputs to 10 bits.
  const double tolerance = tf32 ? 2e-2 : 1e-4;
  std::array<std::vector<float>, 3> reference;
  RnnAlgorithm best = RnnAlgorithm::standard;
  double best_ms = 0;
  selection.clear();
  for (RnnAlgorithm candidate : candidates) {
    std::string outcome;
    try {
      configure(chosen, candidate);
      describe(max_batch, stream);
      std::array<std::vector<float>, 3> got = probe_outputs(probe, stream);
      double worst = 0;
      if (candidate == RnnAlgorithm::standard) {
        for (const std::vector<float>& values : got)
          if (relative_difference(values, values) != 0) fail("cuDNN's standard LSTM gave non-finite values");
        reference = std::move(got);
      } else {
        for (int k = 0; k < 3; ++k) worst = std::max(worst, relative_difference(got[k], reference[k]));
      }
      if (!(worst <= tolerance)) {
        outcome = cat("differs from standard by ", worst, " (relative)");
        if (!automatic) fail("cuDNN's ", to_string(candidate), " LSTM ", outcome);
        outcome += ": not used";
      } else if (!automatic) {
        best = candidate;
        outcome = candidate == RnnAlgorithm::standard ? "as asked" : "as asked, agrees with standard";
      } else {
        const double ms = probe_milliseconds(probe, stream);
        outcome = cat(ms, " ms");
        // Another algorithm must win by 10%: a choice that flips with timing noise would change
        // the bits of otherwise identical runs.
        if (candidate == RnnAlgorithm::standard || ms < 0.9 * best_ms) {
          best = candidate;
          best_ms = ms;
        }
      }
    } catch (const Error& e) {
      static_cast<void>(cudaGetLastError());
      if (candidate == RnnAlgorithm::standard || !automatic) throw;
      outcome = "unavailable (" + std::string(e.what()) + ")";
    }
    selection += cat(selection.empty() ? "" : "; ", to_string(candidate), " ", outcome);
  }
  selection += cat(" -> ", to_string(best), bf16 ? " (bf16: standard only)" : "");
  configure(chosen, best);
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace enhanced::cuda
