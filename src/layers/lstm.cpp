#include "layers/lstm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "enhanced/common.h"
#include "enhanced/precision.h"
#include "layers/cpu/bf16_gemm.h"
#include "layers/cpu/carve.h"

#include "layers/cpu/blas.h"
#include "layers/cpu/lstm_bf16.h"
#include "layers/cpu/lstm_pool.h"
#include "layers/cpu/lstm_pointwise.h"
#include "layers/cpu/lstm_steps.h"
#include "layers/cpu/packing_clock.h"
#include "layers/cpu/small_gemm.h"
#include "layers/cpu/stream_store.h"

namespace enhanced {
namespace {

// Runs body(part) for parts 0 and 1 (the two directions, or two halves of a GEMM): on two
// threads when allowed. BLAS runs single-threaded (configure_cpu_threads), so the engine's two
// threads are the only ones competing for the cores.
template <class Body>
void in_two_parts(int threads, Body body) {
  if (threads >= 2) {
#pragma omp parallel for num_threads(2) schedule(static, 1)
    for (int part = 0; part < 2; ++part) body(part);
  } else {
    for (int part = 0; part < 2; ++part) body(part);
  }
}

using lstm_steps::previous_time;
using lstm_steps::step_time;

// How the layer multiplies (enhanced/precision.h): FP32; bfloat16 operands through the FP32
// kernels, rounded as they are packed and gathered (the reference, any CPU); or bfloat16 operands
// through the AMX-BF16 or AVX512-BF16 kernels (layers/cpu/lstm_bf16.h), every product included.
enum class Arithmetic { fp32, bf16_reference, bf16_fast };

template <class Real>
Arithmetic arithmetic_for(Precision precision) {
  if (precision == Precision::fp32) return Arithmetic::fp32;
  if (!std::is_same<Real, float>::value) fail("internal: the double-precision LSTM (the gradient checks) is FP32 only");
  if (precision == Precision::bf16_emulated) return Arithmetic::bf16_reference;
  if (!bf16_gemm::available()) fail("internal: --precision bf16 on a CPU without AVX512-BF16");
  return Arithmetic::bf16_fast;
}

inline bool rounds(Arithmetic arithmetic) { return arithmetic != Arithmetic::fp32; }

// One direction's part of the layer's workspace (bilstm_workspace_size), carved the same way by
// the forward, the backward and the size function. The dx product after the backward's loop
// runs in two halves, each on a direction's packed_other.
template <class Real>
struct DirectionWorkspace {
  float* packed_weights = nullptr;  // [W_ih | W_hh] or W_hh in panels (FP32 and reference paths)
  float* packed_other = nullptr;    // a step's [x_t | h_{t-1}], or W_ih's panels for dx
  Real* bias_sum = nullptr;         // (4H) b_ih + b_hh, added in the forward's pointwise pass
  Real* dh_recurrent = nullptr;     // (B, H)
  Real* dc_carry = nullptr;         // (B, H)
  Real* operand = nullptr;          // (P, D + H) [x_t | h_{t-1}] the forward saves for the backward; the fast path:
                                    // the reverse direction's dx (P, D), then operand_bf16
  uint16_t* operand_bf16 = nullptr;  // the fast path's (P, D + H) [x_t | h_{t-1}] in bfloat16
  Real* product = nullptr;          // (4H, D + H) dW, or in the fast path its transpose (D + H, 4H)
  Real* dbias_sum = nullptr;        // (4H)
  uint16_t* bf16 = nullptr;         // lstm_bf16's buffers (the fast path)
  Real* step_gates = nullptr;       // (B, 4H) one step's gates as the forward computes them
  Real* step_cells = nullptr;       // (2, B, H) and two steps' cells
  Real* pool_row = nullptr;         // (H) the fused max-pool's row: h where y is not written, dL/dh's pooled part
  Real* pool_max = nullptr;         // (B, T) feature mode's maxima of the reverse direction
  int32_t* pool_index = nullptr;    // (B, T) and their channels
  const char** next_lines = nullptr;  // the backward's next step's cache lines (next_step_lines)
};

// Cache lines of the rows the backward's next step reads from memory (next_step_lines), at most.
template <class Real>
size_t next_step_line_count(int batch, int hidden) {
  auto lines = [](size_t bytes) { return bytes / 64 + 2; };  // a row not starting a line spans one more
  return static_cast<size_t>(batch) * (lines(4 * sizeof(Real) * hidden) + lines(sizeof(Real) * hidden));
}

// Elements of Real per direction; with base, also carves direction `direction` of the workspace
// at base. Each part 64-byte aligned; the float and uint16_t parts sized in Real elements.
template <class Real>
size_t carve_direction(DirectionWorkspace<Real>* out, Real* base, int direction, int batch, int seq_len, int input,
                       int hidden) {
  const size_t W = static_cast<size_t>(input) + hidden, G4 = 4 * static_cast<size_t>(hidden);
  const size_t state = static_cast<size_t>(batch) * hidden, positions = static_cast<size_t>(batch) * seq_len;
  auto in_reals = [](size_t count, size_t bytes) { return (count * bytes + sizeof(Real) - 1) / sizeof(Real); };
  const size_t sizes[] = {
      in_reals(std::max(small_gemm::packed_size(static_cast<int>(W), static_cast<int>(G4)),
                        small_gemm::packed_size(static_cast<int>(G4), hidden)), sizeof(float)),
      in_reals(std::max(static_cast<size_t>(batch) * W, small_gemm::packed_size(2 * static_cast<int>(G4), input)),
               sizeof(float)),
      G4, state, state, std::max(positions * W, positions * input + in_reals(positions * W, sizeof(uint16_t)) + 16),
      G4 * W, G4,
      in_reals(lstm_bf16::workspace_size(batch, input, hidden), sizeof(uint16_t)), static_cast<size_t>(batch) * G4,
      2 * state, static_cast<size_t>(hidden), positions, in_reals(positions, sizeof(int32_t)),
      in_reals(next_step_line_count<Real>(batch, hidden), sizeof(const char*))};
  const size_t per_direction = carve_parts(base, sizes, 16);
  if (out == nullptr) return per_direction;
  Real* parts[std::size(sizes)];
  carve_parts(base + direction * per_direction, sizes, 16, &parts);
  if constexpr (std::is_same<Real, float>::value) out->packed_weights = parts[0], out->packed_other = parts[1];
  out->bias_sum = parts[2], out->dh_recurrent = parts[3], out->dc_carry = parts[4], out->operand = parts[5];
  out->operand_bf16 = reinterpret_cast<uint16_t*>(parts[5] + (positions * input + 15) / 16 * 16);
  out->product = parts[6], out->dbias_sum = parts[7], out->bf16 = reinterpret_cast<uint16_t*>(parts[8]);
  out->step_gates = parts[9], out->step_cells = parts[10];
  out->pool_row = parts[11], out->pool_max = parts[12], out->pool_index = reinterpret_cast<int32_t*>(parts[13]);
  out->next_lines = reinterpret_cast<const char**>(parts[14]);
  return per_direction;
}

template <class Real>
DirectionWorkspace<Real> direction_workspace(Real* workspace, int direction, int batch, int seq_len, int input,
                                             int hidden) {
  if (workspace == nullptr) fail("internal: the BiLSTM needs its workspace (bilstm_workspace_size)");
  DirectionWorkspace<Real> out;
  carve_direction(&out, workspace, direction, batch, seq_len, input, hidden);
  return out;
}

// dst[0, n) = source[0, n), rounded to bfloat16 when round.
inline void copy_row(float* dst, const float* source, int n, bool round) {
  if (!round) std::memcpy(dst, source, n * sizeof(float));
  else bf16_gemm::round_floats(dst, source, static_cast<size_t>(n));
}

// The product C (M, N) = A (M, K, row stride lda) B for an operand B packed once (K x N, element
// (k, n) = source[n * stride_n + k * stride_k]), its elements rounded to bfloat16 in the reference
// path. float only: the double path (the gradient checks) calls BLAS.
class PackedOperand {
 public:
  // packed: room for small_gemm::packed_size(K, N) floats.
  PackedOperand(Arithmetic arithmetic, float* packed) : round_(rounds(arithmetic)), packed_(packed) {}
  void pack(const float* source, int k, int n, size_t stride_n, size_t stride_k) {
    resize(k, n);
    pack_rows(0, source, k, stride_n, stride_k);
  }
  void resize(int k, int n) {
    k_ = k;
    n_ = n;
  }
  // Rows [row_offset, row_offset + k) of the resized operand.
  void pack_rows(int row_offset, const float* source, int k, size_t stride_n, size_t stride_k) {
    const packing_clock::Scope packing;
    small_gemm::pack_rows(packed_, k_, row_offset, source, k, n_, stride_n, stride_k, round_);
  }
  // A in FP32, already rounded in the reference path; requests: small_gemm::multiply's.
  void multiply(float* c, int ldc, const float* a, int lda, int m, LineRequests requests = {}) const {
    small_gemm::multiply(c, ldc, a, lda, packed_, m, n_, k_, false, requests);
  }

 private:
  bool round_;
  float* packed_;
  int k_ = 0, n_ = 0;
};

// The backward's per-step dh (B, H) = dgates (B, 4H) W_hh: W_hh packed once per call (element
// (k, n) = W_hh[k][n]); double: BLAS.
template <class Real>
class RecurrentBackward;

template <>
class RecurrentBackward<float> {
 public:
  RecurrentBackward(const DirectionWorkspace<float>& workspace, const float* w_hh, int hidden, Arithmetic arithmetic)
      : hidden_(hidden), w_hh_(arithmetic, workspace.packed_weights) {
    w_hh_.pack(w_hh, 4 * hidden, hidden, 1, static_cast<size_t>(hidden));
  }
  void operator()(float* dh, const float* dgates, int ld_dgates, int batch, LineRequests requests) const {
    w_hh_.multiply(dh, hidden_, dgates, ld_dgates, batch, requests);
  }

 private:
  int hidden_;
  PackedOperand w_hh_;
};

template <>
class RecurrentBackward<double> {
 public:
  RecurrentBackward(const DirectionWorkspace<double>&, const double* w_hh, int hidden, Arithmetic)
      : w_hh_(w_hh), hidden_(hidden) {}
  void operator()(double* dh, const double* dgates, int ld_dgates, int batch, LineRequests) const {
    gemm(false, false, batch, hidden_, 4 * hidden_, 1.0, dgates, ld_dgates, w_hh_, hidden_, 0.0, dh, hidden_);
  }

 private:
  const double* w_hh_;
  int hidden_;
};

// The forward's per-step product gates_t (B, 4H) = [x_t | h_{t-1}] (B, D + H) [W_ih | W_hh]^T: the
// input projection and the recurrent product in one GEMM of K = D + H, into the step's rows of
// gates (the workspace's, in cache for the pointwise pass), so the input projection needs no
// pass of its own over the (B, T, 8H) buffer. The operand's rows are the caller's
// (forward_direction): gather_x copies x_t into them (rounded to bfloat16 in the reference path),
// the step before's pointwise pass writes h_{t-1} (rounded in the reference path too). float:
// [W_ih | W_hh] packed once per call.
template <class Real>
class StepProjection;

template <>
class StepProjection<float> {
 public:
  StepProjection(const DirectionWorkspace<float>& workspace, const float* w_ih, const float* w_hh, int input,
                 int hidden, Arithmetic arithmetic)
      : input_(input), hidden_(hidden), round_(rounds(arithmetic)), packed_(arithmetic, workspace.packed_weights) {
    const int k = input + hidden, n = 4 * hidden;
    packed_.resize(k, n);
    packed_.pack_rows(0, w_ih, input, static_cast<size_t>(input), 1);
    packed_.pack_rows(input, w_hh, hidden, static_cast<size_t>(hidden), 1);
  }
  void gather_x(float* operand, size_t ld_operand, const float* x, size_t ld_x, int batch) const {
    const packing_clock::Scope packing;
    for (int b = 0; b < batch; ++b) copy_row(operand + b * ld_operand, x + b * ld_x, input_, round_);
  }
  void operator()(float* gates, size_t ld_gates, const float* operand, size_t ld_operand, int batch) const {
    packed_.multiply(gates, static_cast<int>(ld_gates), operand, static_cast<int>(ld_operand), batch);
  }

 private:
  int input_, hidden_;
  bool round_;
  PackedOperand packed_;
};

template <>
class StepProjection<double> {
 public:
  StepProjection(const DirectionWorkspace<double>&, const double* w_ih, const double* w_hh, int input, int hidden,
                 Arithmetic)
      : w_ih_(w_ih), w_hh_(w_hh), input_(input), hidden_(hidden) {}
  void gather_x(double* operand, size_t ld_operand, const double* x, size_t ld_x, int batch) const {
    for (int b = 0; b < batch; ++b) std::memcpy(operand + b * ld_operand, x + b * ld_x, input_ * sizeof(double));
  }
  void operator()(double* gates, size_t ld_gates, const double* operand, size_t ld_operand, int batch) const {
    const int ldg = static_cast<int>(ld_gates), lda = static_cast<int>(ld_operand);
    gemm(false, true, batch, 4 * hidden_, input_, 1.0, operand, lda, w_ih_, input_, 0.0, gates, ldg);
    gemm(false, true, batch, 4 * hidden_, hidden_, 1.0, operand + input_, lda, w_hh_, hidden_, 1.0, gates, ldg);
  }

 private:
  const double* w_ih_;
  const double* w_hh_;
  int input_, hidden_;
};

// C (M, N) = A (M, K) B for B (K, N) row-major: dx = dgates W_ih, whose N = D is small.
inline void multiply_plain(float* c, int ldc, const float* a, int lda, const float* b, int m, int n, int k,
                           Arithmetic arithmetic, float* packed_b) {
  PackedOperand packed(arithmetic, packed_b);
  packed.pack(b, k, n, 1, static_cast<size_t>(n));
  packed.multiply(c, ldc, a, lda, m);
}
inline void multiply_plain(double* c, int ldc, const double* a, int lda, const double* b, int m, int n, int k,
                           Arithmetic, float*) {
  gemm(false, false, m, n, k, 1.0, a, lda, b, n, 0.0, c, ldc);
}

}  // namespace

template <class Real>
size_t bilstm_workspace_size(int batch, int seq_len, int input, int hidden) {
  return 2 * carve_direction<Real>(nullptr, nullptr, 0, batch, seq_len, input, hidden);
}

namespace {

// Where a direction's forward puts each row's gates (4H), cell (H) and its step's operand
// [x_t | h_{t-1}] (D + H, of Op: float, double or bfloat16 bits): kept for the backward
// (SavedRows: in saved.gates (B, T, 8H), saved.cell (B, T, 2H) and the workspace's operand
// (B, T, D + H)), or not (StepRows: one step's operand and the last two steps' cells in the
// workspace, for inference, where the (B, T, 8H) buffer would only be traffic). Either way a
// step's gates are computed in the workspace's step rows (B, 4H), and its cells in two step rows
// (this step's and the one before's), which stay in cache from the product to the pointwise
// pass; SavedRows::keep then copies a row's activations and cell where the backward reads them.
// The same arithmetic either way.
template <class Real>
struct StepBuffers {  // the workspace's step rows, the same in both
  Real *step_gates, *step_cells;
  int batch, hidden;
  Real* step_gates_at(int b) const { return step_gates + static_cast<size_t>(b) * 4 * hidden; }
  Real* cell_at(int b, int, int step) const {
    return step_cells + (static_cast<size_t>(step & 1) * batch + b) * hidden;
  }
};

template <class Real, class Op>
struct SavedRows : StepBuffers<Real> {
  Real *gates, *cell;
  Op* operand;
  int direction, seq_len, width;
  // The rows lie T rows apart, each new to the caches: written past them (stream_store.h).
  void keep(int b, int t, int step) const {
    const size_t p = static_cast<size_t>(b) * seq_len + t, H = static_cast<size_t>(this->hidden);
    stream_store::copy(gates + p * 8 * H + direction * 4 * H, this->step_gates_at(b), 4 * H);
    stream_store::copy(cell + p * 2 * H + direction * H, this->cell_at(b, t, step), H);
  }
  void finish() const { stream_store::fence(); }
  Op* operand_at(int t) const { return operand + static_cast<size_t>(t) * width; }  // row (0, t)
  size_t operand_ld() const { return static_cast<size_t>(seq_len) * width; }
};

template <class Real, class Op>
struct StepRows : StepBuffers<Real> {
  Op* operand;
  int width;
  void keep(int, int, int) const {}
  void finish() const {}
  Op* operand_at(int) const { return operand; }
  size_t operand_ld() const { return static_cast<size_t>(width); }
};

// Asks for the cache lines of [p, p + bytes), for writing.
inline void prefetch_lines_for_writing(const void* p, size_t bytes) {
  const char* line = static_cast<const char*>(p);
  for (size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(line + offset, 1);
}

// The forward's pointwise pass of one row, h also written to the next step's operand row (as the
// operand's type, rounded to bfloat16 when round).
template <class Real>
void pointwise_forward(Real* gates, Real* cell, Real* h, Real* h_next, const Real* cell_prev, const Real* bias,
                       int hidden, bool round) {
  lstm_pointwise::forward(gates, cell, h, h_next, cell_prev, bias, hidden, round);
}
inline void pointwise_forward(float* gates, float* cell, float* h, uint16_t* h_next, const float* cell_prev,
                              const float* bias, int hidden, bool) {
  lstm_pointwise::forward(gates, cell, h, h_next, cell_prev, bias, hidden);
}

// One direction's forward: per step, x_t into its operand rows (whose h_{t-1} the step before
// wrote; zero at the first step), its gates = project(operand), then the pointwise pass per row,
// which writes h into the next step's operand rows and out's, whose pool takes it at once;
// bias_sum (4H) = b_ih + b_hh.
template <class Real, class Project, class Rows>
void forward_direction(Project& project, const Rows& rows, const lstm_pool::HOutput<Real>& out, const Real* x,
                       const Real* bias_sum, int direction, int batch, int seq_len, int input, int hidden,
                       bool round) {
  const int H = hidden;
  const size_t ld = rows.operand_ld();
  for (int step = 0; step < seq_len; ++step) {
    const int t = step_time(direction, step, seq_len), t_prev = previous_time(direction, t);
    auto* operand = rows.operand_at(t);
    project.gather_x(operand, ld, x + static_cast<size_t>(t) * input, static_cast<size_t>(seq_len) * input, batch);
    if (step == 0)
      for (int b = 0; b < batch; ++b) std::memset(operand + b * ld + input, 0, H * sizeof(*operand));
    project(rows.step_gates_at(0), 4 * static_cast<size_t>(H), operand, ld, batch);
    auto* next = step + 1 < seq_len ? rows.operand_at(step_time(direction, step + 1, seq_len)) + input : nullptr;
    for (int b = 0; b < batch; ++b) {
      const size_t p = static_cast<size_t>(b) * seq_len + t;
      const Real* c_prev = step > 0 ? rows.cell_at(b, t_prev, step - 1) : nullptr;
      Real* h = out.at(p, direction, H);
      pointwise_forward(rows.step_gates_at(b), rows.cell_at(b, t, step), h, next ? next + b * ld : nullptr, c_prev,
                        bias_sum, H, round);
      rows.keep(b, t, step);
      if (out.pool.max) out.pool.take(b, t, step, h);
      if (step + 2 < seq_len) {  // the lines the next step's pass writes first
        prefetch_lines_for_writing(rows.operand_at(step_time(direction, step + 2, seq_len)) + b * ld + input,
                                   H * sizeof(*operand));
      }
    }
  }
  rows.finish();
}

// forward_direction with the rows the caller asked for (saved.gates null: none kept): the
// operand in saved_operand (B, T, D + H), or one step's in step_operand (B, D + H).
template <class Real, class Op, class Project>
void forward_direction(Project& project, const BiLstmState<Real>& saved, const DirectionWorkspace<Real>& workspace,
                       Op* saved_operand, Op* step_operand, const lstm_pool::HOutput<Real>& out, const Real* x,
                       const Real* bias_sum, int direction, int batch, int seq_len, int input, int hidden,
                       bool round) {
  const int width = input + hidden;
  if (saved.gates == nullptr) {
    const StepRows<Real, Op> rows{{workspace.step_gates, workspace.step_cells, batch, hidden}, step_operand, width};
    forward_direction(project, rows, out, x, bias_sum, direction, batch, seq_len, input, hidden, round);
  } else {
    const SavedRows<Real, Op> rows{
        {workspace.step_gates, workspace.step_cells, batch, hidden}, saved.gates, saved.cell, saved_operand, direction,
        seq_len, width};
    forward_direction(project, rows, out, x, bias_sum, direction, batch, seq_len, input, hidden, round);
  }
}

// Where direction `direction` puts h and its maxima (pooled null: none): feature mode's forward
// direction straight into pooled and argmax, the reverse one into its workspace until
// combine_features.
template <class Real>
lstm_pool::HOutput<Real> h_output(Real* y, Real* pooled, int32_t* argmax, PoolMode mode,
                                  const DirectionWorkspace<Real>& workspace, int direction, int seq_len, int hidden) {
  lstm_pool::DirectionPool<Real> pool{pooled, argmax, mode, direction, seq_len, hidden};
  if (pooled && mode == PoolMode::feature && direction == 1)
    pool.max = workspace.pool_max, pool.index = workspace.pool_index;
  return {y, workspace.pool_row, pool};
}

}  // namespace

template <class Real>
void bilstm_maxpool_forward(Real* pooled, int32_t* argmax, Real* y, BiLstmState<Real>& saved, const Real* x,
                            const Real* weight_ih, const Real* weight_hh, const Real* bias_ih, const Real* bias_hh,
                            int batch, int seq_len, int input, int hidden, PoolMode mode, int threads,
                            Precision precision) {
  const Arithmetic arithmetic = arithmetic_for<Real>(precision);
  const int G4 = 4 * hidden;
  in_two_parts(threads, [&](int direction) {
    const DirectionWorkspace<Real> workspace =
        direction_workspace(saved.workspace, direction, batch, seq_len, input, hidden);
    const lstm_pool::HOutput<Real> out = h_output(y, pooled, argmax, mode, workspace, direction, seq_len, hidden);
    Real* bias_sum = workspace.bias_sum;  // b_ih + b_hh, added in the pointwise pass
    for (int j = 0; j < G4; ++j) bias_sum[j] = bias_ih[direction * G4 + j] + bias_hh[direction * G4 + j];
    const Real* w_ih = weight_ih + static_cast<size_t>(direction) * G4 * input;
    const Real* w_hh = weight_hh + static_cast<size_t>(direction) * G4 * hidden;
    if constexpr (std::is_same<Real, float>::value) {
      if (arithmetic == Arithmetic::bf16_fast) {
        const bf16_gemm::TileSession tiles;  // AMX: the tiles configured once for the 400 steps
        const lstm_bf16::Workspace buffers = lstm_bf16::carve_workspace(workspace.bf16, batch, input, hidden);
        lstm_bf16::StepProjection project(buffers, w_ih, w_hh, input, hidden);
        forward_direction(project, saved, workspace, workspace.operand_bf16, buffers.step_operand, out, x, bias_sum,
                          direction, batch, seq_len, input, hidden, true);
        return;
      }
    }
    StepProjection<Real> project(workspace, w_ih, w_hh, input, hidden, arithmetic);
    Real* step_operand = workspace.operand;  // the double path (the gradient checks) has no packed_other
    if constexpr (std::is_same<Real, float>::value) step_operand = workspace.packed_other;
    forward_direction(project, saved, workspace, workspace.operand, step_operand, out, x, bias_sum, direction,
                      batch, seq_len, input, hidden, rounds(arithmetic));
  });
  if (pooled && mode == PoolMode::feature) {
    const DirectionWorkspace<Real> reverse = direction_workspace(saved.workspace, 1, batch, seq_len, input, hidden);
    lstm_pool::combine_features(pooled, argmax, reverse.pool_max, reverse.pool_index,
                                static_cast<size_t>(batch) * seq_len, hidden);
  }
}

template <class Real>
void bilstm_forward(Real* y, BiLstmState<Real>& saved, const Real* x, const Real* weight_ih, const Real* weight_hh,
                    const Real* bias_ih, const Real* bias_hh, int batch, int seq_len, int input, int hidden,
                    int threads, Precision precision) {
  bilstm_maxpool_forward(static_cast<Real*>(nullptr), nullptr, y, saved, x, weight_ih, weight_hh, bias_ih, bias_hh,
                         batch, seq_len, input, hidden, PoolMode::feature, threads, precision);
}

namespace {

// dW_ih (4H, D) and dW_hh (4H, H) += the halves of the product of dgates^T and [x | h_{t-1}]:
// product (4H, D + H), or its transpose (D + H, 4H) when transposed.
template <class Real>
void add_product(Real* dw_ih, Real* dw_hh, const Real* product, bool transposed, int input, int hidden) {
  const int G4 = 4 * hidden, W = input + hidden;
  auto at = [&](int j, int w) {
    return transposed ? product[static_cast<size_t>(w) * G4 + j] : product[static_cast<size_t>(j) * W + w];
  };
  for (int j = 0; j < G4; ++j) {
    for (int d = 0; d < input; ++d) dw_ih[static_cast<size_t>(j) * input + d] += at(j, d);
    for (int k = 0; k < hidden; ++k) dw_hh[static_cast<size_t>(j) * hidden + k] += at(j, input + k);
  }
}

// Appends the cache lines of [p, p + bytes) to lines, up to room_end; returns their end.
inline const char** add_lines(const char** lines, const char* const* room_end, const void* p, size_t bytes) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(p), end = start + bytes;
  for (uintptr_t line = start & ~uintptr_t{63}; line < end && lines != room_end; line += 64)
    *lines++ = reinterpret_cast<const char*>(line);
  return lines;
}

// The cache lines that the backward's step `step` - 1 reads from memory, into lines (room for
// next_step_line_count); their count. Per row b: its gates, and the cell before its c_prev (its
// own cell is this step's c_prev, in cache by then). The forward wrote these rows long before,
// past the caches; they lie T rows apart, 64 streams that no hardware prefetcher follows, and
// each row read when its step came waited on memory. This step's product asks for them while it
// computes (line_requests.h).
template <class Real>
int next_step_lines(const char** lines, const Real* gates, const Real* cell, int direction, int step, int batch,
                    int seq_len, int hidden) {
  if (step < 1) return 0;
  const size_t H = hidden;
  const int t_next = previous_time(direction, step_time(direction, step, seq_len));
  const char** end = lines;
  const char* const* room_end = lines + next_step_line_count<Real>(batch, hidden);  // never reached: a bound
  for (int b = 0; b < batch; ++b) {
    const size_t p = static_cast<size_t>(b) * seq_len + t_next;
    end = add_lines(end, room_end, gates + p * 8 * H + direction * 4 * H, 4 * H * sizeof(Real));
    if (step >= 2) {
      const size_t p_before = static_cast<size_t>(b) * seq_len + previous_time(direction, t_next);
      end = add_lines(end, room_end, cell + p_before * 2 * H + direction * H, H * sizeof(Real));
    }
  }
  return static_cast<int>(end - lines);
}

// One direction's backward: per step (T-1 down to 0) the pointwise pass per row
// (products.pointwise: writing the gate gradients over the gates and carrying dc and dh, where
// dh = dh_out(b, t), the row (H) of dL/dy, + dh_recurrent); then products(step, dgates rows
// (T * 8H apart), dh_recurrent, the next step's lines), which must leave dh_recurrent for the
// step before. next_lines: the workspace's, room for next_step_line_count.
template <class Real, class Products, class DhOut>
void backward_direction(Products& products, Real* gates, Real* dc_carry, Real* dh_recurrent, Real* dbias_sum,
                        const Real* cell, const char** next_lines, const DhOut& dh_out, int direction, int batch,
                        int seq_len, int hidden) {
  const int H = hidden, G4 = 4 * hidden, G8 = 8 * hidden, C = 2 * hidden;
  for (int step = seq_len - 1; step >= 0; --step) {
    const int t = step_time(direction, step, seq_len), t_prev = previous_time(direction, t);
    for (int b = 0; b < batch; ++b) {
      const size_t p = static_cast<size_t>(b) * seq_len + t;
      const Real* c_prev = step > 0 ? cell + (static_cast<size_t>(b) * seq_len + t_prev) * C + direction * H : nullptr;
      products.pointwise(b, gates + p * G8 + direction * G4, dc_carry + static_cast<size_t>(b) * H, dbias_sum,
                         cell + p * C + direction * H, c_prev, dh_out(b, t),
                         dh_recurrent + static_cast<size_t>(b) * H, H);
    }
    int line_count = 0;  // the double path's products (the gradient checks, BLAS) take none
    if constexpr (std::is_same<Real, float>::value)
      line_count = next_step_lines(next_lines, gates, cell, direction, step, batch, seq_len, hidden);
    products(step, gates + static_cast<size_t>(t) * G8 + direction * G4, static_cast<size_t>(seq_len) * G8,
             dh_recurrent, LineRequests{next_lines, line_count});
  }
}

// The FP32 and reference paths' per-step products: the pointwise pass rounds the gate gradients
// in place in the reference path (every later use is a product; the bias gradient, summed
// already, stays FP32), then dh = dgates W_hh. The weight gradients and dx follow the loop, as
// whole-batch GEMMs.
template <class Real>
struct RecurrentProducts {
  const RecurrentBackward<Real>& recurrent;
  int batch, hidden;
  bool round;
  void pointwise(int, Real* gates, Real* dc, Real* dbias, const Real* cell, const Real* cell_prev, const Real* dh_out,
                 const Real* dh_recurrent, int H) const {
    lstm_pointwise::backward(gates, dc, dbias, cell, cell_prev, dh_out, dh_recurrent, H, round);
  }
  void operator()(int step, Real* dgates, size_t ld_dgates, Real* dh_recurrent, LineRequests next_lines) const {
    if (step > 0) recurrent(dh_recurrent, dgates, static_cast<int>(ld_dgates), batch, next_lines);
  }
};

// The fast path's: the pointwise pass also writes the gate gradients' bfloat16 bits where the
// step's products read them (lstm_bf16::StepBackward).
struct FastProducts {
  lstm_bf16::StepBackward& step_products;
  void pointwise(int b, float* gates, float* dc, float* dbias, const float* cell, const float* cell_prev,
                 const float* dh_out, const float* dh_recurrent, int H) const {
    lstm_pointwise::backward(gates, step_products.step_dgates(b), dc, dbias, cell, cell_prev, dh_out, dh_recurrent, H);
  }
  void operator()(int step, float*, size_t, float* dh_recurrent, LineRequests next_lines) const {
    step_products(step, dh_recurrent, next_lines);
  }
};

// The backward of bilstm_backward and bilstm_maxpool_backward: dh_of(direction, workspace), the
// direction's dh_out for backward_direction. The weight gradients read the step operands
// [x_t | h_{t-1}] that the forward kept in saved.workspace (a forward that saves nothing, run in
// between, leaves them alone).
template <class Real, class DhOf>
void backward_layer(Real* dx, Real* dweight_ih, Real* dweight_hh, Real* dbias_ih, Real* dbias_hh,
                    BiLstmState<Real>& saved, const DhOf& dh_of, const Real* weight_ih, const Real* weight_hh,
                    int batch, int seq_len, int input, int hidden, int threads, Precision precision) {
  const Arithmetic arithmetic = arithmetic_for<Real>(precision);
  bool fast = false;
  if constexpr (std::is_same<Real, float>::value) fast = arithmetic == Arithmetic::bf16_fast;
  Real* gates = saved.gates;
  const int H = hidden, G4 = 4 * hidden, G8 = 8 * hidden;
  const int positions = batch * seq_len;
  const size_t state = static_cast<size_t>(batch) * H;
  const int W = input + H;  // columns of [x | h_{t-1}]
  auto workspace_of = [&](int direction) {
    return direction_workspace(saved.workspace, direction, batch, seq_len, input, hidden);
  };
  in_two_parts(threads, [&](int direction) {
    const DirectionWorkspace<Real> workspace = workspace_of(direction);
    Real *dh_recurrent = workspace.dh_recurrent, *dc_carry = workspace.dc_carry, *operand = workspace.operand;
    Real *product = workspace.product, *dbias_sum = workspace.dbias_sum;
    std::memset(dbias_sum, 0, G4 * sizeof(Real));
    std::memset(dh_recurrent, 0, state * sizeof(Real));
    std::memset(dc_carry, 0, state * sizeof(Real));
    const Real* w_ih = weight_ih + static_cast<size_t>(direction) * G4 * input;
    const Real* w_hh = weight_hh + static_cast<size_t>(direction) * G4 * H;
    const auto dh_out = dh_of(direction, workspace);
    if constexpr (std::is_same<Real, float>::value) {
      if (fast) {
        const bf16_gemm::TileSession tiles;
        lstm_bf16::StepBackward step_products(lstm_bf16::carve_workspace(workspace.bf16, batch, input, H), w_ih, w_hh,
                                              workspace.operand_bf16, direction == 0 ? dx : operand, product,
                                              direction, batch, seq_len, input, H);
        FastProducts products{step_products};
        backward_direction(products, gates, dc_carry, dh_recurrent, dbias_sum, saved.cell, workspace.next_lines,
                           dh_out, direction, batch, seq_len, H);
      }
    }
    if (!fast) {
      const RecurrentBackward<Real> recurrent(workspace, w_hh, H, arithmetic);
      RecurrentProducts<Real> products{recurrent, batch, H, rounds(arithmetic)};
      backward_direction(products, gates, dc_carry, dh_recurrent, dbias_sum, saved.cell, workspace.next_lines, dh_out,
                         direction, batch, seq_len, H);
      // dW (4H, D + H) = dgates^T (4H, P) [x | h_{t-1}] (P, D + H), the operand the forward saved: one GEMM, K = P.
      gemm(true, false, G4, W, positions, Real(1), gates + direction * G4, G8, operand, W, Real(0), product, W);
    }
    add_product(dweight_ih + static_cast<size_t>(direction) * G4 * input,
                dweight_hh + static_cast<size_t>(direction) * G4 * H, product, fast, input, H);
    for (int j = 0; j < G4; ++j) {
      dbias_ih[direction * G4 + j] += dbias_sum[j];
      dbias_hh[direction * G4 + j] += dbias_sum[j];
    }
  });
  if (fast) {  // dx = the two directions' parts
    const Real* reverse_dx = workspace_of(1).operand;
    for (size_t i = 0; i < static_cast<size_t>(positions) * input; ++i) dx[i] += reverse_dx[i];
    return;
  }
  // dx (P, D) = dgates (P, 8H) W_ih (8H, D), both directions at once, rows split in two halves.
  in_two_parts(threads, [&](int half) {
    const int first = half == 0 ? 0 : positions / 2;
    const int rows = half == 0 ? positions / 2 : positions - positions / 2;
    if (rows > 0)
      multiply_plain(dx + static_cast<size_t>(first) * input, input, gates + static_cast<size_t>(first) * G8, G8,
                     weight_ih, rows, input, G8, arithmetic, workspace_of(half).packed_other);
  });
}

}  // namespace

// y and x are the CUDA twin's inputs (cuDNN's); the weight gradients here read what the forward
// kept in saved.workspace.
template <class Real>
void bilstm_backward(Real* dx, Real* dweight_ih, Real* dweight_hh, Real* dbias_ih, Real* dbias_hh,
                     BiLstmState<Real>& saved, [[maybe_unused]] const Real* y, const Real* dy,
                     [[maybe_unused]] const Real* x, const Real* weight_ih, const Real* weight_hh, int batch,
                     int seq_len, int input, int hidden, int threads, Precision precision) {
  auto dense = [dy, seq_len, hidden](int direction, const DirectionWorkspace<Real>&) {
    return [dy, seq_len, hidden, direction](int b, int t) {
      return dy + ((static_cast<size_t>(b) * seq_len + t) * 2 + direction) * hidden;
    };
  };
  backward_layer(dx, dweight_ih, dweight_hh, dbias_ih, dbias_hh, saved, dense, weight_ih, weight_hh, batch, seq_len,
                 input, hidden, threads, precision);
}

template <class Real>
void bilstm_maxpool_backward(Real* dx, Real* dweight_ih, Real* dweight_hh, Real* dbias_ih, Real* dbias_hh,
                             BiLstmState<Real>& saved, const int32_t* argmax, const Real* dpooled,
                             [[maybe_unused]] const Real* x, const Real* weight_ih, const Real* weight_hh, int batch,
                             int seq_len, int input, int hidden, PoolMode mode, int threads, Precision precision) {
  auto pooled = [&](int direction, const DirectionWorkspace<Real>& workspace) {
    const lstm_pool::DirectionGradient<Real> gradient{workspace.pool_row, argmax, dpooled, mode,
                                                      direction,         seq_len, hidden};
    return [gradient](int b, int t) { return gradient.at(b, t); };
  };
  backward_layer(dx, dweight_ih, dweight_hh, dbias_ih, dbias_hh, saved, pooled, weight_ih, weight_hh, batch, seq_len,
                 input, hidden, threads, precision);
}

template size_t bilstm_workspace_size<float>(int, int, int, int);
template size_t bilstm_workspace_size<double>(int, int, int, int);
template void bilstm_forward<float>(float*, BiLstmState<float>&, const float*, const float*, const float*,
                                    const float*, const float*, int, int, int, int, int, Precision);
template void bilstm_forward<double>(double*, BiLstmState<double>&, const double*, const double*, const double*,
                                     const double*, const double*, int, int, int, int, int, Precision);
template void bilstm_backward<float>(float*, float*, float*, float*, float*, BiLstmState<float>&, const float*,
                                     const float*, const float*, const float*, const float*, int, int, int, int, int,
                                     Precision);
template void bilstm_maxpool_forward<float>(float*, int32_t*, float*, BiLstmState<float>&, const float*,
                                            const float*, const float*, const float*, const float*, int, int, int,
                                            int, PoolMode, int, Precision);
template void bilstm_maxpool_forward<double>(double*, int32_t*, double*, BiLstmState<double>&, const double*,
                                             const double*, const double*, const double*, const double*, int, int,
                                             int, int, PoolMode, int, Precision);
template void bilstm_maxpool_backward<float>(float*, float*, float*, float*, float*, BiLstmState<float>&,
                                             const int32_t*, const float*, const float*, const float*, const float*,
                                             int, int, int, int, PoolMode, int, Precision);
template void bilstm_maxpool_backward<double>(double*, double*, double*, double*, double*, BiLstmState<double>&,
                                              const int32_t*, const double*, const double*, const double*,
                                              const double*, int, int, int, int, PoolMode, int, Precision);
template void bilstm_backward<double>(double*, double*, double*, double*, double*, BiLstmState<double>&,
                                      const double*, const double*, const double*, const double*, const double*, int,
                                      int, int, int, int, Precision);

}  // namespace enhanced
