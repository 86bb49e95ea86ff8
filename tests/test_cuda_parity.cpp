// CUDA backend against the CPU engine: every kernel twin against its CPU layer, the whole
// step's loss and gradients against model_forward / model_backward, 50 training steps with SGD
// and with Adam against the CPU trainer loop, and run-to-run determinism.
//
// Written once, compiled where the CUDA backend is (tests/CMakeLists.txt lists these names in a
// build without it, each SKIPPED with the reason); without a usable GPU each test is SKIPPED with
// the reason, never a vacuous pass.
//
// Tolerances, from float32 arithmetic (unit roundoff u = 2^-24 ~ 6e-8):
// - Embedding blend forward and backward, max-pool, optimizer arithmetic: the device code does
//   the CPU's operations in the CPU's order without FMA contraction, so these are compared bit
//   for bit (the backward also against the double layer, as below).
// - A sum of n float terms reordered differs from the exact sum by at most ~n*u*sum|terms|. The
//   references are the CPU layers in DOUBLE, and "mag" is the same layer run on absolute values
//   (= sum|terms| per output), so |gpu - ref| <= n*u*mag with n the number of terms, doubled
//   for slack (expect_sum_close).
// - The BiLSTM (cuDNN, FMA math) compounds per-step errors through T steps and transcendental
//   functions (a few ulp each): outputs are O(1) (|h| < 1), so 1e-5 absolute per step of T is
//   used; gradients 1e-4 relative to the tensor's largest magnitude.
// - Training: trajectories drift apart by rounding; after 50 steps parameters agree to 1e-3
//   absolute (SGD lr 0.05, Adam lr 1e-3: each step moves a weight by at most ~lr), and every
//   step's loss to 1e-4 relative. Each training test also checks that the weights moved far more
//   than the tolerance, so agreement is not vacuous.
#include <gtest/gtest.h>

#include <span>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "enhanced/device.h"
#include "engine/cpu_model.h"
#include "layers/optimizer.h"
#include "cuda_test_util.h"
#include "embedding_reference.h"
#include "gradcheck.h"
#include "layers/dense.h"
#include "layers/embedding_blend.h"
#include "layers/lstm.h"
#include "layers/maxpool.h"
#include "layers/softmax_xent.h"

#include "steps/embedding_blend_steps.h"
#include "kernels/layers.h"

namespace enhanced {
namespace {

using testing::small_config;
using testing::standard_lstm_options;
using testing::EngineRun;
using testing::gpu_options;
using testing::training_batches;

using testing::absolute;
using testing::expect_relative;
using testing::expect_sum_close;
using testing::Gpu;
using testing::kFp32Parity;
using testing::kUnit;
using testing::random_floats;
using testing::relative_gap;
using testing::rounded;
using testing::to_device;
using testing::to_double;
using testing::to_float;
using testing::to_host;
using cuda::DeviceBuffer;

// ---- kernels ----------------------------------------------------------------------------------

void check_embedding(int B, int T, int D, BlendMode mode, uint64_t seed, int V = 19) {
  Gpu gpu;
  Random random(seed);
  const Batch batch = testing::random_batch(B, T, V, 2, random);
  const int P = B * T;
  const std::vector<double> table = random_floats(static_cast<size_t>(V) * D, random);
  // Forward: bit for bit against the float CPU layer.
  std::vector<float> cpu_x(static_cast<size_t>(P) * D);
  const std::vector<float> table_f = to_float(table);
  embedding_blend_forward(cpu_x.data(), batch.identifier_offsets.data(), batch.identifier_ids.data(),
                          batch.cur_word_ids.data(), table_f.data(), P, D, mode);
  auto offsets = to_device(batch.identifier_offsets, gpu.stream);
  auto ids = to_device(batch.identifier_ids, gpu.stream);
  auto cur = to_device(batch.cur_word_ids, gpu.stream);
  auto d_table = to_device(table_f, gpu.stream);
  DeviceBuffer<float> x(cpu_x.size());
  cuda::embedding_blend_forward(x.data(), offsets.data(), ids.data(), cur.data(), d_table.data(), P, D, mode,
                                gpu.stream);
  EXPECT_EQ(to_host(x, cpu_x.size(), gpu.stream), cpu_x) << "embedding forward differs from the CPU bits";

  // Backward: against the double CPU layer; run twice for determinism.
  const std::vector<double> dx = random_floats(static_cast<size_t>(P) * D, random);
  std::vector<double> ref(table.size(), 0.0), mag(table.size(), 0.0);
  embedding_blend_backward(ref.data(), dx.data(), batch.identifier_offsets.data(), batch.identifier_ids.data(),
                           batch.cur_word_ids.data(), P, D, mode);
  const std::vector<double> dx_abs = absolute(dx);
  embedding_blend_backward(mag.data(), dx_abs.data(), batch.identifier_offsets.data(), batch.identifier_ids.data(),
                           batch.cur_word_ids.data(), P, D, mode);
  auto d_dx = to_device(to_float(dx), gpu.stream);
  // Runs 0 and 1: the exact entry count; run 2: padded to the workspace's room, as a captured
  // CUDA graph sorts (the id count is then read on the device).
  std::vector<float> runs[3];
  cuda::EmbeddingGradWorkspace workspace;
  const int64_t n = static_cast<int64_t>(batch.identifier_ids.size());
  workspace.reserve(P, n + 17, V, D, gpu.stream);
  for (int run = 0; run < 3; ++run) {
    DeviceBuffer<float> grad(table.size());
    ENHANCED_CUDA_CHECK(cudaMemsetAsync(grad.data(), 0, grad.bytes(), gpu.stream));
    const int64_t max_ids = run < 2 ? n : workspace.entry_capacity() - P;
    cuda::embedding_blend_backward(grad.data(), workspace, d_dx.data(), offsets.data(), ids.data(), cur.data(), P,
                                   max_ids, D, mode, gpu.stream);
    runs[run] = to_host(grad, table.size(), gpu.stream);
  }
  // Terms per element: every occurrence of the row (scalar-mean: times D inside each share).
  expect_sum_close(runs[0], ref, mag, static_cast<double>(n + P) * D, "embedding backward");
  EXPECT_EQ(runs[0], runs[1]) << "embedding backward is not deterministic";
  EXPECT_EQ(runs[2], runs[0]) << "padding the sort changed the embedding gradient";
  // The entries are summed in the CPU layer's order, a frequent row in fixed chunks: the bits of
  // that rule (embedding_reference.h), which for a row with at most kChunkEntries terms are the
  // float CPU layer's.
  EXPECT_EQ(runs[0], testing::chunked_embedding_gradient(batch, to_float(dx), V, D, mode,
                                                         steps::kChunkEntries))
      << "embedding backward differs from the CPU layer's order of summation";
  // The touched rows the optimizer will visit.
  std::vector<int32_t> rows;
  embedding_touched_rows(rows, batch.identifier_ids.data(), n, batch.cur_word_ids.data(), P);
  int32_t count = 0;
  cuda::copy_to_host(&count, workspace.touched_count(), 1, gpu.stream);
  ASSERT_EQ(static_cast<size_t>(count), rows.size());
  std::vector<int32_t> device_rows(rows.size());
  cuda::copy_to_host(device_rows.data(), workspace.touched_rows(), rows.size(), gpu.stream);
  EXPECT_EQ(device_rows, rows);
}

void check_maxpool(int B, int T, int C, PoolMode mode, uint64_t seed) {
  Gpu gpu;
  Random random(seed);
  // Values from a 5-point grid: plenty of ties, which must go to the first maximum.
  std::vector<float> y(static_cast<size_t>(B) * T * C);
  for (float& v : y) v = static_cast<float>(static_cast<int>(random.below(5)) - 2) * 0.5f;
  const int F = mode == PoolMode::feature ? T : C;
  std::vector<float> pooled(static_cast<size_t>(B) * F), dy(y.size());
  std::vector<int32_t> argmax(pooled.size());
  maxpool_forward(pooled.data(), argmax.data(), y.data(), B, T, C, mode);
  std::vector<float> dpooled(pooled.size());
  for (float& v : dpooled) v = static_cast<float>(random.uniform(-1, 1));
  maxpool_backward(dy.data(), argmax.data(), dpooled.data(), B, T, C, mode);
  auto d_y = to_device(y, gpu.stream);
  auto d_dpooled = to_device(dpooled, gpu.stream);
  DeviceBuffer<float> d_pooled(pooled.size()), d_dy(dy.size());
  DeviceBuffer<int32_t> d_argmax(argmax.size());
  cuda::maxpool_forward(d_pooled.data(), d_argmax.data(), d_y.data(), B, T, C, mode, gpu.stream);
  cuda::maxpool_backward(d_dy.data(), d_argmax.data(), d_dpooled.data(), B, T, C, mode, gpu.stream);
  EXPECT_EQ(to_host(d_pooled, pooled.size(), gpu.stream), pooled);
  EXPECT_EQ(to_host(d_argmax, argmax.size(), gpu.stream), argmax);
  EXPECT_EQ(to_host(d_dy, dy.size(), gpu.stream), dy);
}

// The dense kernels against the double layer. bf16: cuBLAS's bfloat16 GEMMs against the double
// layer on the operands rounded to bfloat16 (their products are exact in FP32, so the FP32
// summation bound holds unchanged); the bias gradient is a sum of the FP32 dout, never rounded.
void check_dense(int B, int F, int L, uint64_t seed, Precision precision = Precision::fp32) {
  Gpu gpu;
  Random random(seed);
  const bool bf16 = precision == Precision::bf16;
  const std::string what = bf16 ? "bf16 dense " : "dense ";
  const std::vector<double> in = random_floats(static_cast<size_t>(B) * F, random);
  const std::vector<double> w = random_floats(static_cast<size_t>(L) * F, random);
  const std::vector<double> bias = random_floats(L, random);
  const std::vector<double> dout = random_floats(static_cast<size_t>(B) * L, random);
  const std::vector<double> in_r = bf16 ? rounded(in) : in, w_r = bf16 ? rounded(w) : w;
  const std::vector<double> dout_r = bf16 ? rounded(dout) : dout;
  std::vector<double> out(static_cast<size_t>(B) * L), out_mag(out.size());
  dense_forward(out.data(), in_r.data(), w_r.data(), bias.data(), B, F, L);
  dense_forward(out_mag.data(), absolute(in_r).data(), absolute(w_r).data(), absolute(bias).data(), B, F, L);
  // dW and db start from a random value to check "+=".
  const std::vector<double> dw0 = random_floats(w.size(), random), db0 = random_floats(L, random);
  std::vector<double> din(in.size()), dw = dw0, db = db0;
  dense_backward(din.data(), dw.data(), db.data(), dout_r.data(), in_r.data(), w_r.data(), B, F, L);
  std::vector<double> db_exact = db0;  // in the batch order of the layer's own sum
  for (int b = 0; b < B; ++b)
    for (int l = 0; l < L; ++l) db_exact[l] += dout[static_cast<size_t>(b) * L + l];
  std::vector<double> din_mag(in.size()), dw_mag = absolute(dw0), db_mag = absolute(db0);
  dense_backward(din_mag.data(), dw_mag.data(), db_mag.data(), absolute(dout).data(), absolute(in_r).data(),
                 absolute(w_r).data(), B, F, L);
  auto d_in = to_device(to_float(in), gpu.stream);
  auto d_w = to_device(to_float(w), gpu.stream);
  auto d_b = to_device(to_float(bias), gpu.stream);
  auto d_dout = to_device(to_float(dout), gpu.stream);
  auto d_dw = to_device(to_float(dw0), gpu.stream);
  auto d_db = to_device(to_float(db0), gpu.stream);
  DeviceBuffer<float> d_out(out.size()), d_din(din.size());
  DeviceBuffer<uint16_t> scratch(bf16 ? cuda::dense_bf16_scratch_size(B, F, L) : 1);
  uint16_t* bf16_scratch = bf16 ? scratch.data() : nullptr;
  cuda::dense_forward(d_out.data(), d_in.data(), d_w.data(), d_b.data(), B, F, L, bf16_scratch, gpu.cublas, gpu.stream);
  cuda::dense_backward(d_din.data(), d_dw.data(), d_db.data(), d_dout.data(), d_in.data(), d_w.data(), B, F, L,
                       bf16_scratch, gpu.cublas, gpu.stream);
  const std::vector<float> got_out = to_host(d_out, out.size(), gpu.stream);
  expect_sum_close(got_out, out, out_mag, F + 1, what + "out");
  expect_sum_close(to_host(d_din, din.size(), gpu.stream), din, din_mag, L, what + "din");
  expect_sum_close(to_host(d_dw, dw.size(), gpu.stream), dw, dw_mag, B + 1, what + "dweight");
  expect_sum_close(to_host(d_db, db.size(), gpu.stream), db_exact, db_mag, B + 1, what + "dbias");
  if (!bf16) return;
  std::vector<double> out_fp32(out.size());
  dense_forward(out_fp32.data(), in.data(), w.data(), bias.data(), B, F, L);
  EXPECT_GT(relative_gap(got_out, out_fp32), kFp32Parity) << "the dense output is FP32's: bf16 GEMMs did not run";
}

TEST(CudaParity, EmbeddingBlendMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (BlendMode mode : {BlendMode::mean, BlendMode::scalar_mean}) {
    check_embedding(3, 5, 7, mode, 1);   // odd D, ~30% empty identifier lists
    check_embedding(1, 1, 4, mode, 2);   // B = 1, T = 1
    check_embedding(4, 9, 32, mode, 3);  // the seed's D
    check_embedding(4, 40, 8, mode, 4, 3);  // V = 3: rows with hundreds of terms, several chunks each
  }
}

TEST(CudaParity, EmbeddingBlendAllIdentifiersEmpty) {
  SKIP_WITHOUT_GPU();
  Gpu gpu;
  const int P = 4, D = 3, V = 5;
  Batch batch;
  batch.size = 1;
  batch.seq_len = P;
  batch.identifier_offsets.assign(P + 1, 0);
  batch.cur_word_ids = {3, 1, 3, 0};
  std::vector<float> table(static_cast<size_t>(V) * D);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i) * 0.25f;
  std::vector<float> dx(static_cast<size_t>(P) * D);
  for (size_t i = 0; i < dx.size(); ++i) dx[i] = static_cast<float>(i) - 3.5f;
  std::vector<float> cpu_x(dx.size()), cpu_grad(table.size(), 0.0f);
  embedding_blend_forward(cpu_x.data(), batch.identifier_offsets.data(), nullptr, batch.cur_word_ids.data(),
                          table.data(), P, D, BlendMode::mean);
  embedding_blend_backward(cpu_grad.data(), dx.data(), batch.identifier_offsets.data(), nullptr,
                           batch.cur_word_ids.data(), P, D, BlendMode::mean);
  auto offsets = to_device(batch.identifier_offsets, gpu.stream);
  auto cur = to_device(batch.cur_word_ids, gpu.stream);
  auto d_table = to_device(table, gpu.stream);
  auto d_dx = to_device(dx, gpu.stream);
  DeviceBuffer<float> x(dx.size()), grad(table.size());
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(grad.data(), 0, grad.bytes(), gpu.stream));
  DeviceBuffer<int32_t> no_ids(1);
  cuda::embedding_blend_forward(x.data(), offsets.data(), no_ids.data(), cur.data(), d_table.data(), P, D,
                                BlendMode::mean, gpu.stream);
  cuda::EmbeddingGradWorkspace workspace;
  workspace.reserve(P, 0, V, D, gpu.stream);
  cuda::embedding_blend_backward(grad.data(), workspace, d_dx.data(), offsets.data(), no_ids.data(), cur.data(), P, 0,
                                 D, BlendMode::mean, gpu.stream);
  EXPECT_EQ(to_host(x, dx.size(), gpu.stream), cpu_x);
  // Each row's terms are exact small multiples of 0.5: exact in any order.
  EXPECT_EQ(to_host(grad, table.size(), gpu.stream), cpu_grad);
}

TEST(CudaParity, MaxPoolMatchesCpuWithTies) {
  SKIP_WITHOUT_GPU();
  for (PoolMode mode : {PoolMode::feature, PoolMode::time}) {
    check_maxpool(3, 7, 10, mode, 4);
    check_maxpool(1, 1, 2, mode, 5);
    check_maxpool(2, 5, 1, mode, 6);
  }
}

TEST(CudaParity, DenseMatchesCpu) {
  SKIP_WITHOUT_GPU();
  check_dense(3, 7, 4, 7);
  check_dense(1, 400, 5, 8);
  check_dense(5, 1, 1, 9);
}

TEST(CudaBf16, DenseGemmsRoundOperandsAndAccumulateInFp32) {
  SKIP_WITHOUT_GPU();
  check_dense(5, 37, 4, 71, Precision::bf16);  // odd sizes: no tile happens to fit
}

TEST(CudaParity, SoftmaxCrossEntropyMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Gpu gpu;
  Random random(10);
  // Unweighted, and with class weights (class 0 weighs 0), divided by their sum (torch
  // CrossEntropyLoss(weight=)) or by B (Keras' class_weight).
  const ClassWeightMean torch = ClassWeightMean::weights, keras = ClassWeightMean::batch;
  for (const auto& [B, L, weighted, mean] :
       {std::tuple{4, 5, false, torch}, std::tuple{1, 1, false, torch}, std::tuple{3, 2, false, torch},
        std::tuple{4, 5, true, torch}, std::tuple{9, 3, true, torch}, std::tuple{4, 5, true, keras},
        std::tuple{9, 3, true, keras}}) {
    const std::vector<double> logits = random_floats(static_cast<size_t>(B) * L, random, 8.0);
    std::vector<int32_t> labels(B);
    for (int32_t& l : labels) l = static_cast<int32_t>(random.below(L));
    std::vector<float> weights(L);
    for (int l = 0; l < L; ++l) weights[l] = l == 0 ? 0.0f : static_cast<float>(random.uniform(0.25, 2));
    const float* host_weights = weighted ? weights.data() : nullptr;
    std::vector<double> dlogits(logits.size()), losses(B);
    double loss = 0;
    softmax_cross_entropy(dlogits.data(), losses.data(), &loss, logits.data(), labels.data(), host_weights, B, L,
                          nullptr, mean);
    auto d_logits = to_device(to_float(logits), gpu.stream);
    auto d_labels = to_device(labels, gpu.stream);
    auto d_weights = to_device(weights, gpu.stream);
    DeviceBuffer<float> d_dlogits(dlogits.size()), d_losses(B);
    DeviceBuffer<double> d_loss(1);
    cuda::softmax_cross_entropy(d_dlogits.data(), d_losses.data(), d_loss.data(), d_logits.data(), d_labels.data(),
                                weighted ? d_weights.data() : nullptr, B, L, nullptr, mean, gpu.stream);
    // exp/log in float: a few ulp each, over L terms: 1e-5 relative is ample.
    EXPECT_NEAR(to_host(d_loss, 1, gpu.stream)[0], loss, 1e-5 * std::max(1.0, loss));
    expect_relative(to_host(d_losses, B, gpu.stream), losses, 1e-5, "sample losses");
    expect_relative(to_host(d_dlogits, dlogits.size(), gpu.stream), dlogits, 1e-5, "dlogits");
  }
}

void check_bilstm(int B, int T, int D, int H, uint64_t seed) {
  Gpu gpu;
  Random random(seed);
  const std::vector<double> x = random_floats(static_cast<size_t>(B) * T * D, random);
  const std::vector<double> w_ih = random_floats(static_cast<size_t>(8) * H * D, random, 0.5);
  const std::vector<double> w_hh = random_floats(static_cast<size_t>(8) * H * H, random, 0.5);
  const std::vector<double> b_ih = random_floats(static_cast<size_t>(8) * H, random, 0.5);
  const std::vector<double> b_hh = random_floats(static_cast<size_t>(8) * H, random, 0.5);
  const std::vector<double> dy = random_floats(static_cast<size_t>(B) * T * 2 * H, random);
  std::vector<double> y(dy.size()), gates(static_cast<size_t>(B) * T * 8 * H), cell(dy.size());
  std::vector<double> workspace(bilstm_workspace_size<double>(B, T, D, H));
  BiLstmState<double> saved{gates.data(), cell.data(), workspace.data()};
  bilstm_forward(y.data(), saved, x.data(), w_ih.data(), w_hh.data(), b_ih.data(), b_hh.data(), B, T, D, H, 1);
  std::vector<double> dx(x.size()), dw_ih(w_ih.size()), dw_hh(w_hh.size()), db_ih(b_ih.size()), db_hh(b_hh.size());
  bilstm_backward(dx.data(), dw_ih.data(), dw_hh.data(), db_ih.data(), db_hh.data(), saved, y.data(), dy.data(),
                  x.data(), w_ih.data(), w_hh.data(), B, T, D, H, 1);

  cuda::CudnnBiLstm lstm(B, T, D, H, false, RnnAlgorithm::standard, false, gpu.cudnn);
  auto d_x = to_device(to_float(x), gpu.stream);
  auto d_w_ih = to_device(to_float(w_ih), gpu.stream);
  auto d_w_hh = to_device(to_float(w_hh), gpu.stream);
  auto d_b_ih = to_device(to_float(b_ih), gpu.stream);
  auto d_b_hh = to_device(to_float(b_hh), gpu.stream);
  auto d_dy = to_device(to_float(dy), gpu.stream);
  DeviceBuffer<float> d_y(y.size()), d_dx(dx.size());
  // Gradients accumulate (+=) into a non-zero start, as on the CPU.
  std::vector<float> start(w_ih.size(), 0.25f);
  auto d_dw_ih = to_device(start, gpu.stream);
  auto d_dw_hh = to_device(std::vector<float>(w_hh.size(), 0.0f), gpu.stream);
  auto d_db_ih = to_device(std::vector<float>(b_ih.size(), 0.0f), gpu.stream);
  auto d_db_hh = to_device(std::vector<float>(b_hh.size(), 0.0f), gpu.stream);
  for (double& v : dw_ih) v += 0.25;
  for (int repeat = 0; repeat < 2; ++repeat) {  // the second round checks dW is re-zeroed inside
    cuda::bilstm_forward(d_y.data(), lstm, d_x.data(), d_w_ih.data(), d_w_hh.data(), d_b_ih.data(), d_b_hh.data(), B,
                         T, D, H, gpu.stream);
    if (repeat == 1) {
      for (auto* grad : {&d_dw_ih, &d_dw_hh, &d_db_ih, &d_db_hh})
        ENHANCED_CUDA_CHECK(cudaMemsetAsync(grad->data(), 0, grad->bytes(), gpu.stream));
      cuda::copy_to_device(d_dw_ih.data(), start.data(), start.size(), gpu.stream);
    }
    cuda::bilstm_backward(d_dx.data(), d_dw_ih.data(), d_dw_hh.data(), d_db_ih.data(), d_db_hh.data(), lstm,
                          d_y.data(), d_dy.data(), d_x.data(), B, T, D, H, gpu.stream);
  }
  const std::vector<float> got_y = to_host(d_y, y.size(), gpu.stream);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(got_y[i], y[i], 1e-5 * T) << "y [" << i << "]";
  expect_relative(to_host(d_dx, dx.size(), gpu.stream), dx, 1e-4, "lstm dx");
  expect_relative(to_host(d_dw_ih, dw_ih.size(), gpu.stream), dw_ih, 1e-4, "lstm dweight_ih");
  expect_relative(to_host(d_dw_hh, dw_hh.size(), gpu.stream), dw_hh, 1e-4, "lstm dweight_hh");
  expect_relative(to_host(d_db_ih, db_ih.size(), gpu.stream), db_ih, 1e-4, "lstm dbias_ih");
  expect_relative(to_host(d_db_hh, db_hh.size(), gpu.stream), db_hh, 1e-4, "lstm dbias_hh");
}

TEST(CudaParity, BiLstmMatchesCpu) {
  SKIP_WITHOUT_GPU();
  check_bilstm(3, 5, 4, 3, 11);   // odd H
  check_bilstm(1, 1, 2, 1, 12);   // B = 1, T = 1, H = 1
  check_bilstm(2, 9, 32, 16, 13);
}

// ---- the whole model ---------------------------------------------------------------------------

TEST(CudaParity, ModelLossAndEveryGradientMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (BlendMode blend : {BlendMode::mean, BlendMode::scalar_mean}) {
    for (PoolMode pool : {PoolMode::feature, PoolMode::time}) {
      const ModelConfig config = small_config(blend, pool);
      Random random(21);
      const Batch batch = testing::random_batch(3, config.seq_len, static_cast<int>(config.vocab_size),
                                                config.num_labels, random);
      ParameterBuffer<float> params(config);
      initialize_parameters(params, 5);
      ParameterBuffer<double> params_d(config), grads_d(config);
      std::copy(params.data.begin(), params.data.end(), params_d.data.begin());
      Activations<double> activations;
      activations.reserve(config, 3);
      const double loss = model_forward(activations, params_d, batch, 1, true);
      model_backward(grads_d, activations, params_d, batch, 1);

      EngineRun run(Device::cuda, params, OptimizerConfig{}, gpu_options(standard_lstm_options()));
      Engine& model = *run.engine;  // compute-sanitizer runs it
      std::vector<float> logits(static_cast<size_t>(3) * config.num_labels);
      const double gpu_loss = model.compute_gradients(batch, logits.data());
      EXPECT_NEAR(gpu_loss, loss, 1e-4 * std::max(1.0, loss)) << to_string(blend) << "/" << to_string(pool);
      expect_relative(logits, std::span<const double>(activations.logits, logits.size()), 1e-4, "logits");
      ParameterBuffer<float> grads(config);
      model.download_gradients(grads);
      for (const TensorSlot& slot : parameter_layout(config)) {
        const std::vector<float> got(grads.data.begin() + slot.offset, grads.data.begin() + slot.offset + slot.numel);
        const std::vector<double> want(grads_d.data.begin() + slot.offset,
                                       grads_d.data.begin() + slot.offset + slot.numel);
        expect_relative(got, want, 2e-4, slot.name + " (" + to_string(blend) + "/" + to_string(pool) + ")");
      }
      // A second batch: the gradients must be of that batch alone (zeroed in between).
      const Batch other = testing::random_batch(2, config.seq_len, static_cast<int>(config.vocab_size),
                                                config.num_labels, random);
      std::fill(grads_d.data.begin(), grads_d.data.end(), 0.0);
      model_forward(activations, params_d, other, 1, true);
      model_backward(grads_d, activations, params_d, other, 1);
      model.compute_gradients(other, nullptr);
      model.download_gradients(grads);
      expect_relative(grads.data, grads_d.data, 2e-4, "second batch gradients");
    }
  }
}

struct TrainCase {
  OptimizerConfig optimizer;
  const char* name;
};

// The CPU engine and the CUDA engine, both through Engine: each batch's loss and gradient (whose
// norm the clipped cases scale by), then a training step on each.
void check_training(const TrainCase& c, BlendMode blend, PoolMode pool) {
  const ModelConfig config = small_config(blend, pool, 6);
  const std::vector<Batch> batches = training_batches(config, 50, 31);
  ParameterBuffer<float> initial(config);
  initialize_parameters(initial, 9);
  EngineRun cpu(Device::cpu, initial, c.optimizer, EngineOptions{4, 1, {}});
  EngineRun gpu(Device::cuda, initial, c.optimizer, gpu_options({}));
  ParameterBuffer<float> cpu_grads(config), gpu_grads(config);
  const auto norm_of = [](const ParameterBuffer<float>& grads) {
    double sum_squares = 0;
    for (const float g : grads.data) sum_squares += static_cast<double>(g) * g;
    return std::sqrt(sum_squares);
  };
  for (size_t step = 0; step < batches.size(); ++step) {
    const Batch& batch = batches[step];
    const double loss = cpu.engine->compute_gradients(batch, nullptr);
    const double gpu_loss = gpu.engine->compute_gradients(batch, nullptr);
    ASSERT_NEAR(gpu_loss, loss, 1e-4 * std::max(1.0, loss)) << c.name << " step " << step + 1;
    cpu.engine->download_gradients(cpu_grads);
    gpu.engine->download_gradients(gpu_grads);
    const double norm = norm_of(cpu_grads);
    ASSERT_NEAR(norm_of(gpu_grads), norm, 1e-3 * std::max(1.0, norm)) << c.name << " step " << step + 1;
    const TrainTotals want = cpu.step(batch, c.optimizer.learning_rate);
    const TrainTotals got = gpu.step(batch, c.optimizer.learning_rate);
    ASSERT_EQ(want.steps, 1) << c.name << " step " << step + 1;
    ASSERT_EQ(got.steps, 1) << c.name << " step " << step + 1;
    ASSERT_NEAR(got.loss_sum, want.loss_sum, 1e-4 * std::max(1.0, want.loss_sum)) << c.name << " step " << step + 1;
  }
  gpu.sync();
  EXPECT_EQ(gpu.state.steps, cpu.state.steps);
  double moved = 0;
  for (size_t i = 0; i < cpu.params.size(); ++i) {
    ASSERT_NEAR(gpu.params.data[i], cpu.params.data[i], 1e-3) << c.name << " parameter " << i;
    moved = std::max(moved, static_cast<double>(std::fabs(cpu.params.data[i] - initial.data[i])));
  }
  EXPECT_GT(moved, 1e-2) << c.name << ": training barely moved the weights, the comparison would be vacuous";
}

TEST(CudaParity, FiftyTrainingStepsMatchCpuTrainer) {
  SKIP_WITHOUT_GPU();
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.learning_rate = 0.05f;
  OptimizerConfig momentum = sgd;
  momentum.momentum = 0.9f;
  momentum.learning_rate = 0.02f;
  OptimizerConfig adam;  // Keras defaults, lr 1e-3
  adam.learning_rate = 3e-3f;
  OptimizerConfig lazy = adam;
  lazy.lazy_embedding = true;
  OptimizerConfig clipped = adam;
  clipped.clip_norm = 0.05f;
  // SGD's step is proportional to the clip factor, so a wrong gradient norm on the GPU moves the
  // weights by a different amount (Adam's step barely depends on the gradient's scale).
  OptimizerConfig sgd_clipped = sgd;
  sgd_clipped.learning_rate = 0.5f;
  sgd_clipped.clip_norm = 0.05f;
  for (const TrainCase& c : {TrainCase{sgd, "sgd"}, TrainCase{momentum, "sgd+momentum"}, TrainCase{adam, "adam"},
                             TrainCase{lazy, "lazy adam"}, TrainCase{clipped, "adam clip"},
                             TrainCase{sgd_clipped, "sgd clip"}})
    check_training(c, BlendMode::mean, PoolMode::feature);
  check_training(TrainCase{adam, "adam scalar-mean/time"}, BlendMode::scalar_mean, PoolMode::time);
}

TEST(CudaParity, SameRunTwiceGivesIdenticalBits) {
  SKIP_WITHOUT_GPU();
  const ModelConfig config = small_config(BlendMode::mean, PoolMode::feature, 6);
  const std::vector<Batch> batches = training_batches(config, 20, 41);
  ParameterBuffer<float> initial(config);
  initialize_parameters(initial, 3);
  std::vector<float> results[2];
  std::vector<double> losses[2];
  // The second run uses the LSTM algorithm the first one's automatic choice settled on (as a
  // resumed run does): determinism is promised for the same arithmetic.
  CudaOptions options;
  for (int run = 0; run < 2; ++run) {
    EngineRun model(Device::cuda, initial, OptimizerConfig{}, gpu_options(options));
    options.rnn_algorithm = model.engine->rnn_algorithm();
    for (const Batch& batch : batches) {
      const TrainTotals step = model.step(batch, OptimizerConfig{}.learning_rate);
      losses[run].push_back(step.loss_sum);
    }
    model.sync();
    results[run].assign(model.params.data.begin(), model.params.data.end());
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_TRUE(results[0] == results[1]) << "two identical runs gave different weights";
}

TEST(CudaParity, EvaluationForwardMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const ModelConfig config = small_config(BlendMode::mean, PoolMode::feature);
  Random random(51);
  const Batch batch = testing::random_batch(4, config.seq_len, static_cast<int>(config.vocab_size),
                                            config.num_labels, random);
  ParameterBuffer<float> params(config);
  initialize_parameters(params, 2);
  Activations<float> activations;
  activations.reserve(config, 4);
  const double loss = model_forward(activations, params, batch, 1, false);
  ParameterBuffer<float> gpu_params = params;
  const std::unique_ptr<Engine> model = make_engine(Device::cuda, gpu_params, nullptr, gpu_options({}));
  std::vector<float> logits(static_cast<size_t>(4) * config.num_labels);
  EXPECT_NEAR(model->forward(batch, logits.data()), loss, 1e-4 * std::max(1.0, loss));
  expect_relative(logits, to_double(std::span<const float>(activations.logits, logits.size())), 1e-4, "evaluation logits");
}

TEST(CudaParity, BadBatchesAreErrors) {
  SKIP_WITHOUT_GPU();
  testing::expect_bad_batches_refused(Device::cuda, gpu_options({}));  // its CPU twin: CpuEngine.BadBatchesAreErrors
}

}  // namespace
}  // namespace enhanced
