// What the CUDA test files share: the skip with the reason where no GPU can be used, and the
// small model and batch streams they train on.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "enhanced/batch.h"
#include "enhanced/communicator.h"
#include "enhanced/device.h"
#include "enhanced/engine.h"
#include "enhanced/model.h"
#include "enhanced/optimizer_config.h"
#include "enhanced/precision.h"
#include "enhanced/random.h"
#include "gradcheck.h"

#ifdef ENHANCED_HAVE_CUDA
#include <cstdlib>

#include "kernels/cuda_check.h"
#endif

namespace enhanced::testing {

#ifdef ENHANCED_HAVE_CUDA
// Before any cuBLAS handle exists: cuBLAS's deterministic workspace setting, which PyTorch
// documents as required for deterministic RNNs on recent CUDA. Several GPU tests compare runs
// bit for bit; the engine also gives cuBLAS an explicit workspace (cuda_engine.cu). A value the
// caller set is kept.
inline const bool cublas_workspace_configured = [] {
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0);
  return true;
}();
#endif

inline std::string gpu_unavailable() {
#ifdef ENHANCED_HAVE_CUDA
  return cuda_unavailable_reason();
#else
  return "this build has no CUDA backend (configured with ENHANCED_CUDA=OFF or no toolkit)";
#endif
}

// Every GPU test starts with this: SKIPPED with the reason, never a vacuous pass.
#define SKIP_WITHOUT_GPU()                                                 \
  do {                                                                     \
    const std::string skip_reason_ = ::enhanced::testing::gpu_unavailable(); \
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;               \
  } while (0)

// CudaOptions with cuDNN's standard LSTM algorithm instead of timing them: two models that each
// time the algorithms may keep different ones (the persistent variants are within noise at test
// shapes), and timing the persistent kernels under compute-sanitizer can take a step's whole limit.
inline CudaOptions standard_lstm_options() {
  CudaOptions options;
  options.rnn_algorithm = RnnAlgorithm::standard;
  return options;
}

inline ModelConfig small_config(BlendMode blend, PoolMode pool, int hidden = 5) {
  ModelConfig c;
  c.vocab_size = 23;
  c.embedding_dim = 7;
  c.hidden = hidden;
  c.seq_len = 6;
  c.num_labels = 4;
  c.blend = blend;
  c.pool = pool;
  return c;
}

// `count` batches of 4 samples over ids < vocab; every fifth has 2 samples, as an epoch's last.
inline std::vector<Batch> training_batches(const ModelConfig& config, int count, uint64_t seed,
                                           int64_t vocab = 0) {
  Random random(seed);
  const int ids = static_cast<int>(vocab > 0 ? vocab : config.vocab_size);
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i)
    batches.push_back(random_batch(i % 5 == 4 ? 2 : 4, config.seq_len, ids, config.num_labels, random));
  return batches;
}

// A model trained through Engine alone, as the trainer drives it: the host's parameters and
// optimizer state, which the engine updates (sync() refreshes them from a device).
struct EngineRun {
  ParameterBuffer<float> params;
  OptimizerState state;
  std::unique_ptr<Engine> engine;

  EngineRun(Device device, const ParameterBuffer<float>& initial, const OptimizerConfig& optimizer,
            const EngineOptions& options)
      : params(initial), state(optimizer, initial.config), engine(make_engine(device, params, &state, options)) {}
  EngineRun(const EngineRun&) = delete;
  EngineRun& operator=(const EngineRun&) = delete;

  // One training step, waited for: its totals (its mean loss is loss_sum / samples).
  TrainTotals step(const Batch& batch, float learning_rate) {
    engine->enqueue_train_step(batch, learning_rate);
    return engine->collect();
  }
  void sync() { engine->sync_to_host(); }
};

// Both engines check a batch once, the same way (check_batch): too big, an id >= V, a label >= L,
// offsets that run backwards are each an Error, from a training step and from forward, and the
// engine trains on after them, having taken no step.
inline void expect_bad_batches_refused(Device device, EngineOptions options) {
  const ModelConfig config = small_config(BlendMode::mean, PoolMode::feature);
  ParameterBuffer<float> initial(config);
  initialize_parameters(initial, 6);
  options.max_batch = 2;
  EngineRun model(device, initial, OptimizerConfig{}, options);
  const float lr = OptimizerConfig{}.learning_rate;
  Random random(61);
  std::vector<Batch> bad(4, random_batch(1, config.seq_len, 5, config.num_labels, random));
  bad[0] = random_batch(3, config.seq_len, 5, config.num_labels, random);
  bad[1].cur_word_ids[0] = static_cast<int32_t>(config.vocab_size);
  bad[2].labels[0] = config.num_labels;
  bad[3].identifier_offsets.assign(bad[3].identifier_offsets.size(), 2);  // the first list ends before it starts
  bad[3].identifier_offsets[0] = 0;
  bad[3].identifier_offsets[1] = 3;
  bad[3].identifier_ids.assign(2, 1);
  for (size_t i = 0; i < bad.size(); ++i) {
    EXPECT_THROW(model.engine->enqueue_train_step(bad[i], lr), Error) << "bad batch " << i;
    EXPECT_THROW(model.engine->forward(bad[i], nullptr), Error) << "bad batch " << i;
  }
  Batch good = random_batch(2, config.seq_len, 5, config.num_labels, random);
  const TrainTotals step = model.step(good, lr);
  EXPECT_EQ(step.steps, 1);
  EXPECT_TRUE(std::isfinite(step.loss_sum));
  model.sync();
  EXPECT_EQ(model.state.steps, 1);
}

// Bit-equality of two buffers, naming the first difference.
inline void expect_same_bits(const ParameterBuffer<float>& got, const ParameterBuffer<float>& want,
                             const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got.data[i] == want.data[i]) && differ++ == 0) first = i;
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " values differ, the first at " << first << ": "
                        << got.data[first] << " against " << want.data[first];
}

// compute_gradients between training steps on a lone data-parallel engine (exchange_alone), whose
// backward writes rows the exchange never saw: its gradients, and the weights and moments after
// more steps, must equal a plain engine's bit for bit on `device`. The gradient batches use ids
// the training batches never do, so a row left behind is added into every later dense update.
inline void expect_gradients_between_data_parallel_steps_leave_no_rows(Device device, const EngineOptions& base) {
  const ModelConfig config = small_config(BlendMode::mean, PoolMode::feature, 6);
  const int training_ids = 12;  // training uses ids [0, 12); compute_gradients ids [12, 23)
  const std::vector<Batch> batches = training_batches(config, 12, 57, training_ids);
  Random random(8);
  std::vector<Batch> probes;
  for (int i = 0; i < 2; ++i) {
    Batch b = random_batch(4, config.seq_len, static_cast<int>(config.vocab_size) - training_ids, config.num_labels,
                           random);
    for (int32_t& id : b.identifier_ids) id += training_ids;
    for (int32_t& id : b.cur_word_ids) id += training_ids;
    probes.push_back(std::move(b));
  }
  ParameterBuffer<float> initial(config);
  initialize_parameters(initial, 21);
  OptimizerConfig adam;  // dense: every row of the table is updated from its gradient every step
  adam.learning_rate = 0.02f;
  Communicator alone;
  EngineOptions ranked_options = base;
  ranked_options.communicator = &alone;
  ranked_options.exchange_alone = true;
  EngineRun plain(device, initial, adam, base), ranked(device, initial, adam, ranked_options);
  ParameterBuffer<float> plain_grads(config), ranked_grads(config);
  for (size_t step = 0; step < batches.size(); ++step) {
    if (step == 0 || step == 5) {  // before any exchange, and between exchanged steps
      const Batch& probe = probes[step == 0 ? 0 : 1];
      EXPECT_EQ(ranked.engine->compute_gradients(probe, nullptr), plain.engine->compute_gradients(probe, nullptr));
      plain.engine->download_gradients(plain_grads);
      ranked.engine->download_gradients(ranked_grads);
      expect_same_bits(ranked_grads, plain_grads, "compute_gradients before step " + std::to_string(step));
    }
    const TrainTotals want = plain.step(batches[step], adam.learning_rate);
    const TrainTotals got = ranked.step(batches[step], adam.learning_rate);
    ASSERT_EQ(got.halted, Halt::none);
    EXPECT_EQ(got.loss_sum, want.loss_sum) << "step " << step;
  }
  plain.sync();
  ranked.sync();
  expect_same_bits(ranked.params, plain.params, "parameters");
  for (size_t m = 0; m < plain.state.moments.size(); ++m)
    expect_same_bits(ranked.state.moments[m], plain.state.moments[m], "moment " + std::to_string(m));
}

// EngineOptions for batches of up to 4 on the GPU.
inline EngineOptions gpu_options(const CudaOptions& cuda, std::vector<float> class_weights = {},
                                 Precision precision = Precision::fp32) {
  EngineOptions options(4, 1, cuda, std::move(class_weights));
  options.precision = precision;
  return options;
}

// The steps a CUDA engine replayed from graphs, as its closing note says ("cuda: N steps replayed
// from CUDA graphs"); -1 when the note says graphs are off (the note is then in `why`).
inline int64_t graph_replays(const Engine& engine, std::string* why = nullptr) {
  const std::string note = engine.closing_note();
  if (why) *why = note;
  const std::string prefix = "cuda: ", suffix = " steps replayed from CUDA graphs";
  if (note.rfind(prefix, 0) != 0 || note.size() <= prefix.size() + suffix.size() ||
      note.compare(note.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  return std::stoll(note.substr(prefix.size(), note.size() - prefix.size() - suffix.size()));
}

#ifdef ENHANCED_HAVE_CUDA

// ---- what the GPU parity tests share (test_cuda_parity.cpp, test_cuda_bf16.cpp) ----------------

constexpr double kUnit = 0x1.0p-24;

struct Gpu {
  cuda::UniqueStream stream = cuda::make_stream();
  cuda::UniqueCublas cublas = cuda::make_cublas(stream, false);
  cuda::UniqueCudnn cudnn = cuda::make_cudnn(stream);
};

template <class T>
cuda::DeviceBuffer<T> to_device(const std::vector<T>& host, cudaStream_t stream) {
  cuda::DeviceBuffer<T> buffer(std::max<size_t>(host.size(), 1));
  cuda::copy_to_device(buffer.data(), host.data(), host.size(), stream);
  return buffer;
}

template <class T>
std::vector<T> to_host(const cuda::DeviceBuffer<T>& buffer, size_t count, cudaStream_t stream) {
  std::vector<T> host(count);
  cuda::copy_to_host(host.data(), buffer.data(), count, stream);
  return host;
}

inline std::vector<float> to_float(std::span<const double> v) { return std::vector<float>(v.begin(), v.end()); }
inline std::vector<double> to_double(std::span<const float> v) { return std::vector<double>(v.begin(), v.end()); }
inline std::vector<double> absolute(std::vector<double> v) {
  for (double& x : v) x = std::fabs(x);
  return v;
}

// A random vector already rounded to float, so the double reference sees the same inputs.
inline std::vector<double> random_floats(size_t count, Random& random, double scale = 1.0) {
  std::vector<double> v = random_vector(count, random, scale);
  for (double& x : v) x = static_cast<float>(x);
  return v;
}

inline void expect_sum_close(std::span<const float> gpu, std::span<const double> ref, const std::vector<double>& mag,
                      double terms, const std::string& what) {
  ASSERT_EQ(gpu.size(), ref.size()) << what;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double tolerance = 2 * (terms + 2) * kUnit * mag[i] + 1e-30;
    ASSERT_NEAR(gpu[i], ref[i], tolerance) << what << " [" << i << "]";
  }
}

// v with each element rounded to the nearest bfloat16 (the operands --precision bf16 multiplies).
inline std::vector<double> rounded(std::vector<double> v) {
  for (double& x : v) x = round_to_bf16(x);
  return v;
}

// Largest |a - b| relative to the largest |b|.
inline double relative_gap(std::span<const float> a, std::span<const double> b) {
  double scale = 1e-30, worst = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    scale = std::max(scale, std::fabs(b[i]));
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return worst / scale;
}

// The FP32 parity tests' relative tolerance (test_cuda_parity.cpp): a bf16 result must differ
// from FP32's by more, or bf16 did not run.
constexpr double kFp32Parity = 1e-4;

inline void expect_relative(std::span<const float> gpu, std::span<const double> ref, double relative,
                     const std::string& what) {
  ASSERT_EQ(gpu.size(), ref.size()) << what;
  double scale = 1e-6;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  for (size_t i = 0; i < gpu.size(); ++i) ASSERT_NEAR(gpu[i], ref[i], relative * scale) << what << " [" << i << "]";
}

#endif  // ENHANCED_HAVE_CUDA

}  // namespace enhanced::testing
