// The CUDA engine under --precision bf16 (enhanced/precision.h, docs/cuda-backend.md "bfloat16"): cuBLAS's
// bfloat16 dense GEMMs, cuDNN's bfloat16 BiLSTM, and the whole step's loss and gradients against
// the CPU engine's reference path (Precision::bf16_emulated: operands rounded to bfloat16, FP32
// products and sums), captured graphs, and the refusal of bf16-emulated on CUDA.
//
// Written once, compiled where the CUDA backend is (tests/CMakeLists.txt lists these names in a
// build without it, each SKIPPED with the reason); without a usable GPU each test is SKIPPED
// with the reason.
//
// Tolerances. bfloat16 keeps 8 significant bits: unit roundoff ub = 2^-8 (a value's rounding
// error is at most ub times it). A product of two bfloat16 numbers is exact in FP32, so where
// both sides round the same operands and only the FP32 order of summation differs, the FP32 bound
// of test_cuda_parity.cpp (n * 2^-24 * sum|terms|) applies unchanged: the dense GEMMs.
// Elsewhere the device keeps more in bfloat16 than the reference: cuDNN's y, dx and weight
// gradient are stored in bfloat16 (each <= ub relative), and an FP32-level difference can flip one
// operand's rounding (1 ulp = 2 ub). Through the T = 6 recurrent steps these compound at most
// about linearly, so:
// - loss: 2 ub * max(1, loss) (logits see the same rounded pooled values and weights on both
//   sides; what differs is FP32 order and the odd rounding flip)
// - gradients, relative to each tensor's largest magnitude: 8 ub (>= T ub, plus a stored rounding)
// - the BiLSTM alone against the double CPU layer on the same rounded x and weights, which does
//   not round h, dy or the gate gradients inside: y within 2 ub * T (|y| < 1), gradients 4 ub * T
//   relative to the largest magnitude
// (The dense GEMMs are checked by check_dense in test_cuda_parity.cpp, with Precision::bf16.)
// Each comparison also checks that bf16 is really on: the results differ from FP32 by more than
// the FP32 parity tolerance, so agreement with the rounded reference is not vacuous.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "engine/cpu_model.h"
#include "enhanced/engine.h"
#include "enhanced/precision.h"
#include "gradcheck.h"
#include "layers/embedding_blend.h"
#include "layers/lstm.h"

#include "kernels/layers.h"

namespace enhanced {
namespace {

using cuda::DeviceBuffer;
using testing::absolute;
using testing::expect_relative;
using testing::Gpu;
using testing::random_floats;
using testing::small_config;
using testing::to_device;
using testing::to_float;
using testing::to_host;

constexpr double kBf16Unit = 0x1.0p-8;  // bfloat16's unit roundoff: 8 significant bits
using testing::kFp32Parity;
using testing::relative_gap;
using testing::rounded;

// The dense layer's bf16 GEMMs: CudaBf16.DenseGemmsRoundOperandsAndAccumulateInFp32, with its FP32
// twin in test_cuda_parity.cpp (check_dense).

// ---- the BiLSTM (cuDNN bfloat16 data, FP32 math) ---------------------------------------------

void check_bf16_bilstm(int B, int T, int D, int H, uint64_t seed) {
  Gpu gpu;
  Random random(seed);
  const std::vector<double> x = random_floats(static_cast<size_t>(B) * T * D, random);
  const std::vector<double> w_ih = random_floats(static_cast<size_t>(8) * H * D, random, 0.5);
  const std::vector<double> w_hh = random_floats(static_cast<size_t>(8) * H * H, random, 0.5);
  const std::vector<double> b_ih = random_floats(static_cast<size_t>(8) * H, random, 0.5);
  const std::vector<double> b_hh = random_floats(static_cast<size_t>(8) * H, random, 0.5);
  const std::vector<double> dy = random_floats(static_cast<size_t>(B) * T * 2 * H, random);
  // The double layer on the GEMM inputs cuDNN sees rounded: x and the weights.
  const std::vector<double> x_r = rounded(x), w_ih_r = rounded(w_ih), w_hh_r = rounded(w_hh);
  std::vector<double> y(dy.size()), gates(static_cast<size_t>(B) * T * 8 * H), cell(dy.size());
  std::vector<double> workspace(bilstm_workspace_size<double>(B, T, D, H));
  BiLstmState<double> saved{gates.data(), cell.data(), workspace.data()};
  bilstm_forward(y.data(), saved, x_r.data(), w_ih_r.data(), w_hh_r.data(), b_ih.data(), b_hh.data(), B, T, D, H, 1);
  std::vector<double> dx(x.size()), dw_ih(w_ih.size()), dw_hh(w_hh.size()), db_ih(b_ih.size()), db_hh(b_hh.size());
  bilstm_backward(dx.data(), dw_ih.data(), dw_hh.data(), db_ih.data(), db_hh.data(), saved, y.data(), dy.data(),
                  x_r.data(), w_ih_r.data(), w_hh_r.data(), B, T, D, H, 1);

  cuda::CudnnBiLstm lstm(B, T, D, H, false, RnnAlgorithm::automatic, true, gpu.cudnn);
  ASSERT_TRUE(lstm.bf16());
  EXPECT_EQ(lstm.algorithm(), RnnAlgorithm::standard) << lstm.selection();
  EXPECT_EQ(lstm.weight_space_bytes(), (w_ih.size() + w_hh.size() + b_ih.size() + b_hh.size()) * sizeof(uint16_t));
  auto d_x = to_device(to_float(x), gpu.stream);
  auto d_w_ih = to_device(to_float(w_ih), gpu.stream);
  auto d_w_hh = to_device(to_float(w_hh), gpu.stream);
  auto d_b_ih = to_device(to_float(b_ih), gpu.stream);
  auto d_b_hh = to_device(to_float(b_hh), gpu.stream);
  auto d_dy = to_device(to_float(dy), gpu.stream);
  DeviceBuffer<float> d_y(y.size()), d_dx(dx.size());
  auto zeros = [&](size_t n) { return to_device(std::vector<float>(n, 0.0f), gpu.stream); };
  auto d_dw_ih = zeros(w_ih.size()), d_dw_hh = zeros(w_hh.size()), d_db_ih = zeros(b_ih.size()),
       d_db_hh = zeros(b_hh.size());
  cuda::bilstm_forward(d_y.data(), lstm, d_x.data(), d_w_ih.data(), d_w_hh.data(), d_b_ih.data(), d_b_hh.data(), B, T,
                       D, H, gpu.stream);
  cuda::bilstm_backward(d_dx.data(), d_dw_ih.data(), d_dw_hh.data(), d_db_ih.data(), d_db_hh.data(), lstm, d_y.data(),
                        d_dy.data(), d_x.data(), B, T, D, H, gpu.stream);
  const std::vector<float> got_y = to_host(d_y, y.size(), gpu.stream);
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_NEAR(got_y[i], y[i], 2 * kBf16Unit * T) << "bf16 y [" << i << "]";
    // y comes back from cuDNN's bfloat16 output: widening it is exact, so it is a bfloat16 value.
    ASSERT_EQ(got_y[i], round_to_bf16(got_y[i])) << "bf16 y [" << i << "] is not a bfloat16 value";
  }
  const double gradient = 4 * kBf16Unit * T;
  expect_relative(to_host(d_dx, dx.size(), gpu.stream), dx, gradient, "bf16 lstm dx");
  expect_relative(to_host(d_dw_ih, dw_ih.size(), gpu.stream), dw_ih, gradient, "bf16 lstm dweight_ih");
  expect_relative(to_host(d_dw_hh, dw_hh.size(), gpu.stream), dw_hh, gradient, "bf16 lstm dweight_hh");
  expect_relative(to_host(d_db_ih, db_ih.size(), gpu.stream), db_ih, gradient, "bf16 lstm dbias_ih");
  expect_relative(to_host(d_db_hh, db_hh.size(), gpu.stream), db_hh, gradient, "bf16 lstm dbias_hh");
}

TEST(CudaBf16, BiLstmMatchesCpuOnRoundedOperands) {
  SKIP_WITHOUT_GPU();
  check_bf16_bilstm(3, 5, 4, 3, 81);   // odd H
  check_bf16_bilstm(2, 6, 32, 16, 82);
}

// ---- the whole step against the CPU engine's bf16 reference --------------------------------

// Whether every pooled maximum of the batch is unambiguous at bfloat16 resolution: its runner-up
// is more than 8 ub of it below, in y computed in double from the parameters rounded to bfloat16
// (close to what both bf16 paths compute; 8 ub also covers where they differ from it). The
// device compares bfloat16 y (ties go to the first), the CPU FP32 y; a near-tie may route a
// gradient to a different position, an O(1) difference that no rounding bound covers, so the
// comparison is made on batches without one.
bool pooled_maxima_unambiguous(const ModelConfig& config, const ParameterBuffer<float>& params, const Batch& batch) {
  ParameterBuffer<double> params_d(config);
  std::transform(params.data.begin(), params.data.end(), params_d.data.begin(),
                 [](float p) { return static_cast<double>(round_to_bf16(p)); });
  // y itself, which the CPU engine's forward never writes (its LSTM pools each h as it goes): the
  // blend, then the plain BiLSTM.
  Activations<double> activations;
  activations.reserve(config, batch.size);
  embedding_blend_forward(activations.x, batch.identifier_offsets.data(), batch.identifier_ids.data(),
                          batch.cur_word_ids.data(), params_d.embedding, batch.positions(), config.embedding_dim,
                          config.blend);
  const int T = config.seq_len, C = 2 * config.hidden;
  std::vector<double> y(static_cast<size_t>(batch.size) * T * C);
  BiLstmState<double> nothing_kept{nullptr, nullptr, activations.lstm_workspace};
  bilstm_forward(y.data(), nothing_kept, activations.x, params_d.weight_ih, params_d.weight_hh, params_d.bias_ih,
                 params_d.bias_hh, batch.size, T, config.embedding_dim, config.hidden, 1);
  const bool over_features = config.pool == PoolMode::feature;
  const int windows = over_features ? T : C, window = over_features ? C : T;
  for (int b = 0; b < batch.size; ++b) {
    for (int f = 0; f < windows; ++f) {
      double first = -HUGE_VAL, second = -HUGE_VAL;
      for (int k = 0; k < window; ++k) {
        const int t = over_features ? f : k, c = over_features ? k : f;
        const double v = y[(static_cast<size_t>(b) * T + t) * C + c];
        if (v > first) {
          second = first;
          first = v;
        } else if (v > second) {
          second = v;
        }
      }
      if (first - second <= 8 * kBf16Unit * std::max(std::fabs(first), 0x1.0p-4)) return false;
    }
  }
  return true;
}

struct StepResult {
  double loss = 0;
  std::vector<float> logits;
  ParameterBuffer<float> grads;
};

StepResult gradients_on(Device device, Precision precision, const ParameterBuffer<float>& initial, const Batch& batch) {
  ParameterBuffer<float> params = initial;
  OptimizerState optimizer(OptimizerConfig{}, params.config);
  EngineOptions options{4, 1, {}};
  options.precision = precision;
  const std::unique_ptr<Engine> engine = make_engine(device, params, &optimizer, options);
  StepResult result{0, std::vector<float>(static_cast<size_t>(batch.size) * params.config.num_labels),
                    ParameterBuffer<float>(params.config)};
  result.loss = engine->compute_gradients(batch, result.logits.data());
  engine->download_gradients(result.grads);
  return result;
}

double largest_gap(const StepResult& a, const StepResult& b) {
  const std::vector<double> reference(b.grads.data.begin(), b.grads.data.end());
  return std::max(relative_gap(a.grads.data, reference), std::fabs(a.loss - b.loss) / std::max(1.0, b.loss));
}

TEST(CudaBf16, LossAndEveryGradientMatchCpuBf16Reference) {
  SKIP_WITHOUT_GPU();
  for (BlendMode blend : {BlendMode::mean, BlendMode::scalar_mean}) {
    for (PoolMode pool : {PoolMode::feature, PoolMode::time}) {
      const std::string what = cat(to_string(blend), "/", to_string(pool));
      const ModelConfig config = small_config(blend, pool);
      ParameterBuffer<float> params(config);
      initialize_parameters(params, 7);
      // Embeddings of a pretrained table's scale (the initial +-0.05 times 20): with the initial
      // ones, h barely moves from one position to the next, and a time window's maxima are
      // near-ties in nearly every batch (none of 256 had none).
      for (size_t i = 0; i < params.embedding_size(); ++i) params.data[i] *= 20.0f;
      Random random(91);
      Batch batch;
      bool found = false;
      for (int attempt = 0; attempt < 64 && !found; ++attempt) {
        batch = testing::random_batch(2, config.seq_len, static_cast<int>(config.vocab_size), config.num_labels,
                                      random);
        found = pooled_maxima_unambiguous(config, params, batch);
      }
      ASSERT_TRUE(found) << what << ": no batch of 64 without a near-tie in the max-pool";

      const StepResult cpu = gradients_on(Device::cpu, Precision::bf16_emulated, params, batch);
      const StepResult cpu_fp32 = gradients_on(Device::cpu, Precision::fp32, params, batch);
      const StepResult gpu = gradients_on(Device::cuda, Precision::bf16, params, batch);
      // Neither side may be FP32 in disguise.
      ASSERT_GT(largest_gap(cpu, cpu_fp32), kFp32Parity)
          << what << ": the CPU engine's bf16-emulated step equals its FP32 one (is the CPU bf16 reference in?)";
      EXPECT_GT(largest_gap(gpu, cpu_fp32), kFp32Parity) << what << ": the CUDA bf16 step equals FP32's";

      EXPECT_NEAR(gpu.loss, cpu.loss, 2 * kBf16Unit * std::max(1.0, cpu.loss)) << what;
      const std::vector<double> cpu_logits(cpu.logits.begin(), cpu.logits.end());
      expect_relative(gpu.logits, cpu_logits, 2 * kBf16Unit, "bf16 logits " + what);
      for (const TensorSlot& slot : parameter_layout(config)) {
        const auto begin = static_cast<std::ptrdiff_t>(slot.offset), end = begin + static_cast<std::ptrdiff_t>(slot.numel);
        const std::vector<float> got(gpu.grads.data.begin() + begin, gpu.grads.data.begin() + end);
        const std::vector<double> want(cpu.grads.data.begin() + begin, cpu.grads.data.begin() + end);
        expect_relative(got, want, 8 * kBf16Unit, "bf16 " + slot.name + " (" + what + ")");
      }
    }
  }
}

// ---- training: graphs, summary, refusal --------------------------------------------------------

// bf16 training steps replayed from captured graphs give the eager steps' bits, and the master
// weights move in FP32 (most are not bfloat16 values after training).
TEST(CudaBf16, CapturedGraphsGiveTheEagerBits) {
  SKIP_WITHOUT_GPU();
  const ModelConfig config = small_config(BlendMode::mean, PoolMode::feature, 6);
  const std::vector<Batch> batches = testing::training_batches(config, 12, 101);
  ParameterBuffer<float> initial(config);
  initialize_parameters(initial, 4);
  OptimizerConfig adam;
  adam.learning_rate = 3e-3f;
  std::vector<float> weights[2];
  std::vector<double> losses[2];
  for (int run = 0; run < 2; ++run) {
    CudaOptions options;
    options.graphs = run == 0;
    testing::EngineRun model(Device::cuda, initial, adam, testing::gpu_options(options, {}, Precision::bf16));
    EXPECT_NE(model.engine->summary().find("precision bf16"), std::string::npos) << model.engine->summary();
    for (const Batch& batch : batches) losses[run].push_back(model.step(batch, adam.learning_rate).loss_sum);
    if (run == 0) {
      std::string note;
      EXPECT_GT(testing::graph_replays(*model.engine, &note), 0) << note;
    }
    model.sync();
    weights[run].assign(model.params.data.begin(), model.params.data.end());
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_TRUE(weights[0] == weights[1]) << "graph replay changed the bf16 step's arithmetic";
  const auto not_bf16 = std::count_if(weights[0].begin(), weights[0].end(), [](float w) { return w != round_to_bf16(w); });
  EXPECT_GT(not_bf16, static_cast<std::ptrdiff_t>(weights[0].size() / 2)) << "the master weights look bfloat16";
}

TEST(CudaBf16, EmulatedPrecisionIsRefusedOnCuda) {
  SKIP_WITHOUT_GPU();
  const ModelConfig config = small_config(BlendMode::mean, PoolMode::feature);
  ParameterBuffer<float> params(config);
  EngineOptions options{2, 1, {}};
  options.precision = Precision::bf16_emulated;
  try {
    make_engine(Device::cuda, params, nullptr, options);
    FAIL() << "make_engine(cuda, bf16-emulated) did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16-emulated"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace enhanced
