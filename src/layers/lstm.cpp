#include "layers/lstm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <iterator>
#include <optional>
#include <type_traits>

#include "enhanced/common.h"
#include "enhanced/precision.h"
#include "layers/cpu/bf16_gemm.h"
#include "layers/cpu/carve.h"

#include "layers/cpu/blas.h"
#include "layers/cpu/lstm_bf16.h"
#include "layers/cpu/lstm_fp32.h"
#include "layers/cpu/lstm_pool.h"
#include "layers/cpu/lstm_saved_rows.h"
#include "layers/cpu/lstm_pointwise.h"
#include "layers/cpu/lstm_steps.h"
#include "layers/cpu/parts.h"
#include "layers/cpu/small_gemm.h"
#include "layers/cpu/stream_store.h"

namespace enhanced {
namespace {

// The layer's work in parts (parts.h), one a thread. The rows of a batch never meet in the
// recurrence (a row's h and c depend on that row alone), so each direction's steps run in
// slices of its rows, each slice on a thread of its own; after them, dx runs in parts of its
// positions and the bias gradient in parts of the gates, beside the weight gradients' GEMMs.
// Every element is the same sum in the same order however the work is cut, and no BLAS call's
// shape depends on it (slice_count), so the results are the same bits on any thread count.
using parts::Part;
using parts::part_count;
using parts::part_of;
using parts::in_parallel;
using parts::kPartRows;
using lstm_saved_rows::next_step_line_count;
using lstm_saved_rows::next_step_lines;
using lstm_saved_rows::sum_bias;

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
// the forward, the backward and the size function. A slice of the rows (Part) takes its rows of
// the (B, .) parts; dx's product packs W_ih once, into direction 0's packed_other.
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
  Real* slice_bias = nullptr;       // (max(1, B / kPartRows), 4H) the bias sums of a slice of several, unused
                                    // (sum_bias sums the bias gradient in one slice's order after the steps)
  uint16_t* bf16 = nullptr;         // lstm_bf16's buffers (the fast path)
  Real* step_gates = nullptr;       // (B, 4H) one step's gates as the forward computes them
  Real* step_cells = nullptr;       // (2, B, H) and two steps' cells
  Real* pool_row = nullptr;         // (B, H) the fused max-pool's rows, one a slice: h where y is not written, dL/dh's
                                    // pooled part
  Real* pool_max = nullptr;         // (B, T) feature mode's maxima of the reverse direction
  int32_t* pool_index = nullptr;    // (B, T) and their channels
  const char** next_lines = nullptr;  // the backward's next step's cache lines (next_step_lines), a slice's at
                                      // next_step_line_count(its first row) on
};

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
      2 * state, state, positions, in_reals(positions, sizeof(int32_t)),
      in_reals(next_step_line_count<Real>(batch, hidden), sizeof(const char*)),
      static_cast<size_t>(std::max(1, batch / kPartRows)) * G4};
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
  out->slice_bias = parts[15];
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

// Both directions' workspaces, forward's first.
template <class Real>
std::array<DirectionWorkspace<Real>, 2> direction_workspaces(Real* workspace, int batch, int seq_len, int input,
                                                             int hidden) {
  return {direction_workspace(workspace, 0, batch, seq_len, input, hidden),
          direction_workspace(workspace, 1, batch, seq_len, input, hidden)};
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

// One direction's forward over the rows `part` of the batch: per step, x_t into their operand
// rows (whose h_{t-1} the step before wrote; zero at the first step), their gates =
// project(operand), then the pointwise pass per row, which writes h into the next step's operand
// rows and out's, whose pool takes it at once; bias_sum (4H) = b_ih + b_hh.
template <class Real, class Project, class Rows>
void forward_direction(Project& project, const Rows& rows, const lstm_pool::HOutput<Real>& out, const Real* x,
                       const Real* bias_sum, int direction, Part part, int seq_len, int input, int hidden,
                       bool round) {
  const int H = hidden, first = part.first, end = part.first + part.count;
  const size_t ld = rows.operand_ld(), ld_x = static_cast<size_t>(seq_len) * input;
  const Real* x_rows = x + first * ld_x;
  for (int step = 0; step < seq_len; ++step) {
    const int t = step_time(direction, step, seq_len), t_prev = previous_time(direction, t);
    auto* operand = rows.operand_at(t);
    project.gather_x(operand + first * ld, ld, x_rows + static_cast<size_t>(t) * input, ld_x, part.count);
    if (step == 0)
      for (int b = first; b < end; ++b) std::memset(operand + b * ld + input, 0, H * sizeof(*operand));
    project(rows.step_gates_at(first), 4 * static_cast<size_t>(H), operand + first * ld, ld, part.count);
    auto* next = step + 1 < seq_len ? rows.operand_at(step_time(direction, step + 1, seq_len)) + input : nullptr;
    for (int b = first; b < end; ++b) {
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
                       const Real* bias_sum, int direction, Part part, int batch, int seq_len, int input,
                       int hidden, bool round) {
  const int width = input + hidden;
  if (saved.gates == nullptr) {
    const StepRows<Real, Op> rows{{workspace.step_gates, workspace.step_cells, batch, hidden}, step_operand, width};
    forward_direction(project, rows, out, x, bias_sum, direction, part, seq_len, input, hidden, round);
  } else {
    const SavedRows<Real, Op> rows{
        {workspace.step_gates, workspace.step_cells, batch, hidden}, saved.gates, saved.cell, saved_operand, direction,
        seq_len, width};
    forward_direction(project, rows, out, x, bias_sum, direction, part, seq_len, input, hidden, round);
  }
}

// Where direction `direction`'s rows `part` put h and its maxima (pooled null: none): feature
// mode's forward direction straight into pooled and argmax, the reverse one into its workspace
// until combine_features.
template <class Real>
lstm_pool::HOutput<Real> h_output(Real* y, Real* pooled, int32_t* argmax, PoolMode mode,
                                  const DirectionWorkspace<Real>& workspace, int direction, Part part, int seq_len,
                                  int hidden) {
  lstm_pool::DirectionPool<Real> pool{pooled, argmax, mode, direction, seq_len, hidden};
  if (pooled && mode == PoolMode::feature && direction == 1)
    pool.max = workspace.pool_max, pool.index = workspace.pool_index;
  return {y, workspace.pool_row + static_cast<size_t>(part.first) * hidden, pool};
}

// The slices of its rows each direction's steps run in: in FP32, one a thread, two directions at
// once (one slice a direction on fewer than four threads or fewer than 16 rows). One a direction
// elsewhere: the fast bf16 kernels' scratch is a direction's; the bf16 paths' bias gradient sums
// the unrounded gate gradients, which only the steps see; and the double path (the gradient
// checks) multiplies in BLAS, whose sums may depend on the rows it is given.
template <class Real>
int slice_count(Arithmetic arithmetic, int threads, int batch) {
  const bool fp32 = std::is_same<Real, float>::value && arithmetic == Arithmetic::fp32;
  return fp32 ? part_count(threads / 2, batch) : 1;
}

}  // namespace

template <class Real>
void bilstm_maxpool_forward(Real* pooled, int32_t* argmax, Real* y, BiLstmState<Real>& saved, const Real* x,
                            const Real* weight_ih, const Real* weight_hh, const Real* bias_ih, const Real* bias_hh,
                            int batch, int seq_len, int input, int hidden, PoolMode mode, int threads,
                            Precision precision) {
  const Arithmetic arithmetic = arithmetic_for<Real>(precision);
  const int G4 = 4 * hidden, slices = slice_count<Real>(arithmetic, threads, batch);
  const auto workspaces = direction_workspaces(saved.workspace, batch, seq_len, input, hidden);
  std::optional<lstm_fp32::StepProjection<Real>> projections[2];
  std::optional<lstm_bf16::StepProjection> fast_projections[2];
  auto prepare = [&](int direction) {  // b_ih + b_hh, added in the pointwise pass; the weights packed
    const DirectionWorkspace<Real>& workspace = workspaces[direction];
    for (int j = 0; j < G4; ++j) workspace.bias_sum[j] = bias_ih[direction * G4 + j] + bias_hh[direction * G4 + j];
    const Real* w_ih = weight_ih + static_cast<size_t>(direction) * G4 * input;
    const Real* w_hh = weight_hh + static_cast<size_t>(direction) * G4 * hidden;
    if constexpr (std::is_same<Real, float>::value) {
      if (arithmetic == Arithmetic::bf16_fast) {
        fast_projections[direction].emplace(lstm_bf16::carve_workspace(workspace.bf16, batch, input, hidden), w_ih,
                                            w_hh, input, hidden);
        return;
      }
    }
    projections[direction].emplace(workspace.packed_weights, w_ih, w_hh, input, hidden, rounds(arithmetic));
  };
  auto run_slice = [&](int task) {
    const int direction = task % 2;
    const Part part = part_of(task / 2, slices, batch);
    const DirectionWorkspace<Real>& workspace = workspaces[direction];
    const lstm_pool::HOutput<Real> out = h_output(y, pooled, argmax, mode, workspace, direction, part, seq_len, hidden);
    if constexpr (std::is_same<Real, float>::value) {
      if (arithmetic == Arithmetic::bf16_fast) {
        const bf16_gemm::TileSession tiles;  // AMX: the tiles configured once for the 400 steps
        const lstm_bf16::Workspace buffers = lstm_bf16::carve_workspace(workspace.bf16, batch, input, hidden);
        forward_direction(*fast_projections[direction], saved, workspace, workspace.operand_bf16,
                          buffers.step_operand, out, x, workspace.bias_sum, direction, part, batch, seq_len, input,
                          hidden, true);
        return;
      }
    }
    Real* step_operand = workspace.operand;  // the double path (the gradient checks) has no packed_other
    if constexpr (std::is_same<Real, float>::value) step_operand = workspace.packed_other;
    forward_direction(*projections[direction], saved, workspace, workspace.operand, step_operand, out, x,
                      workspace.bias_sum, direction, part, batch, seq_len, input, hidden, rounds(arithmetic));
  };
  in_parallel(threads, 2, 2 * slices, prepare, run_slice);
  if (pooled && mode == PoolMode::feature)
    lstm_pool::combine_features(pooled, argmax, workspaces[1].pool_max, workspaces[1].pool_index,
                                static_cast<size_t>(batch) * seq_len, hidden);
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

// One direction's backward over the rows `part` of the batch: per step (T-1 down to 0) the
// pointwise pass per row (products.pointwise: writing the gate gradients over the gates,
// carrying dc and dh, where dh = dh_out(b, t), the row (H) of dL/dy, + dh_recurrent, and adding
// them to dbias_sum); then products(step, the rows' dgates (T * 8H apart), their
// dh_recurrent, their count, the next step's lines), which must leave dh_recurrent for the step
// before. next_lines: the part's, room for next_step_line_count(part.count).
template <class Real, class Products, class DhOut>
void backward_direction(Products& products, Real* gates, Real* dc_carry, Real* dh_recurrent, Real* dbias_sum,
                        const Real* cell, const char** next_lines, const DhOut& dh_out, int direction, Part part,
                        int seq_len, int hidden) {
  const int H = hidden, G4 = 4 * hidden, G8 = 8 * hidden, C = 2 * hidden;
  const size_t ld_dgates = static_cast<size_t>(seq_len) * G8;
  for (int step = seq_len - 1; step >= 0; --step) {
    const int t = step_time(direction, step, seq_len), t_prev = previous_time(direction, t);
    for (int b = part.first; b < part.first + part.count; ++b) {
      const size_t p = static_cast<size_t>(b) * seq_len + t;
      const Real* c_prev = step > 0 ? cell + (static_cast<size_t>(b) * seq_len + t_prev) * C + direction * H : nullptr;
      products.pointwise(b, gates + p * G8 + direction * G4, dc_carry + static_cast<size_t>(b) * H, dbias_sum,
                         cell + p * C + direction * H, c_prev, dh_out(b, t),
                         dh_recurrent + static_cast<size_t>(b) * H, H);
    }
    int line_count = 0;  // the double path's products (the gradient checks, BLAS) take none
    if constexpr (std::is_same<Real, float>::value)
      line_count = next_step_lines(next_lines, gates, cell, direction, step, part, seq_len, hidden);
    products(step, gates + part.first * ld_dgates + static_cast<size_t>(t) * G8 + direction * G4, ld_dgates,
             dh_recurrent + static_cast<size_t>(part.first) * H, part.count, LineRequests{next_lines, line_count});
  }
}

// The FP32 and reference paths' per-step products: the pointwise pass rounds the gate gradients
// in place in the reference path (every later use is a product; the bias gradient, summed
// already, stays FP32), then dh = dgates W_hh. The weight gradients and dx follow the steps
// (backward_products).
template <class Real>
struct RecurrentProducts {
  const lstm_fp32::RecurrentBackward<Real>& recurrent;
  bool round;
  void pointwise(int, Real* gates, Real* dc, Real* dbias, const Real* cell, const Real* cell_prev, const Real* dh_out,
                 const Real* dh_recurrent, int H) const {
    lstm_pointwise::backward(gates, dc, dbias, cell, cell_prev, dh_out, dh_recurrent, H, round);
  }
  void operator()(int step, Real* dgates, size_t ld_dgates, Real* dh_recurrent, int rows,
                  LineRequests next_lines) const {
    if (step > 0) recurrent(dh_recurrent, dgates, static_cast<int>(ld_dgates), rows, next_lines);
  }
};

// The fast path's (the whole batch, one slice): the pointwise pass also writes the gate
// gradients' bfloat16 bits where the step's products read them (lstm_bf16::StepBackward).
struct FastProducts {
  lstm_bf16::StepBackward& step_products;
  void pointwise(int b, float* gates, float* dc, float* dbias, const float* cell, const float* cell_prev,
                 const float* dh_out, const float* dh_recurrent, int H) const {
    lstm_pointwise::backward(gates, step_products.step_dgates(b), dc, dbias, cell, cell_prev, dh_out, dh_recurrent, H);
  }
  void operator()(int step, float*, size_t, float* dh_recurrent, int, LineRequests next_lines) const {
    step_products(step, dh_recurrent, next_lines);
  }
};

// What the backward's passes share: the state the forward saved, each direction's workspace,
// the arithmetic, the shapes, the threads and the slices of rows each direction's steps run in.
template <class Real>
struct BackwardPass {
  Real* gates;  // the forward's activations in, the gate gradients out (B, T, 8H)
  const Real* cell;
  std::array<DirectionWorkspace<Real>, 2> workspaces;
  Arithmetic arithmetic;
  int batch, seq_len, input, hidden, threads, slices;
};

// The backward's steps, each direction's rows in pass.slices slices: dh_of(direction, row), the
// direction's dh_out for backward_direction, writing its rows in row (H, the slice's own). In
// several slices, each slice's own bias sums go to its row of slice_bias, unused:
// backward_products sums the bias gradient in a single slice's order. dx: the fast path's
// forward direction's part of it.
template <class Real, class DhOf>
void backward_steps(const BackwardPass<Real>& pass, const DhOf& dh_of, Real* dx, const Real* weight_ih,
                    const Real* weight_hh) {
  const int H = pass.hidden, G4 = 4 * H, batch = pass.batch, input = pass.input, seq_len = pass.seq_len;
  const bool fast = pass.arithmetic == Arithmetic::bf16_fast;
  std::optional<lstm_fp32::RecurrentBackward<Real>> recurrent[2];
  std::optional<lstm_bf16::StepBackward> fast_steps[2];
  auto prepare = [&](int direction) {
    const DirectionWorkspace<Real>& workspace = pass.workspaces[direction];
    std::memset(workspace.dbias_sum, 0, G4 * sizeof(Real));
    std::memset(workspace.dh_recurrent, 0, static_cast<size_t>(batch) * H * sizeof(Real));
    std::memset(workspace.dc_carry, 0, static_cast<size_t>(batch) * H * sizeof(Real));
    const Real* w_ih = weight_ih + static_cast<size_t>(direction) * G4 * input;
    const Real* w_hh = weight_hh + static_cast<size_t>(direction) * G4 * H;
    if constexpr (std::is_same<Real, float>::value) {
      if (fast) {
        fast_steps[direction].emplace(lstm_bf16::carve_workspace(workspace.bf16, batch, input, H), w_ih, w_hh,
                                      workspace.operand_bf16, direction == 0 ? dx : workspace.operand,
                                      workspace.product, direction, batch, seq_len, input, H);
        return;
      }
    }
    recurrent[direction].emplace(workspace.packed_weights, w_hh, H, rounds(pass.arithmetic));
  };
  auto run_slice = [&](int task) {
    const int direction = task % 2;
    const Part part = part_of(task / 2, pass.slices, batch);
    const DirectionWorkspace<Real>& workspace = pass.workspaces[direction];
    const auto dh_out = dh_of(direction, workspace.pool_row + static_cast<size_t>(part.first) * H);
    Real* dbias_sum = workspace.dbias_sum;
    if (pass.slices > 1) {
      dbias_sum = workspace.slice_bias + static_cast<size_t>(task / 2) * G4;
      std::memset(dbias_sum, 0, G4 * sizeof(Real));
    }
    const char** next_lines = workspace.next_lines + next_step_line_count<Real>(part.first, H);
    if constexpr (std::is_same<Real, float>::value) {
      if (fast) {
        const bf16_gemm::TileSession tiles;
        FastProducts products{*fast_steps[direction]};
        backward_direction(products, pass.gates, workspace.dc_carry, workspace.dh_recurrent, dbias_sum, pass.cell,
                           next_lines, dh_out, direction, part, seq_len, H);
        return;
      }
    }
    RecurrentProducts<Real> products{*recurrent[direction], rounds(pass.arithmetic)};
    backward_direction(products, pass.gates, workspace.dc_carry, workspace.dh_recurrent, dbias_sum, pass.cell,
                       next_lines, dh_out, direction, part, seq_len, H);
  };
  in_parallel(pass.threads, 2, 2 * pass.slices, prepare, run_slice);
}

// After the FP32 and reference paths' steps: each direction's weight gradients, GEMMs of
// K = P in parts of dW's rows where OpenBLAS sums a part as the whole
// (lstm_fp32::weight_gradient_parts; one in double); beside them dx in parts of the positions
// and, after several slices, the bias gradient in parts of the gates (sum_bias). dx's rows are
// independent in small_gemm, so FP32 cuts them one part a thread; the double path (BLAS) keeps
// the two halves it always had.
template <class Real>
void backward_products(const BackwardPass<Real>& pass, Real* dx, const Real* weight_ih) {
  const int H = pass.hidden, G4 = 4 * H, G8 = 8 * H, W = pass.input + H, positions = pass.batch * pass.seq_len;
  constexpr bool halves = !std::is_same<Real, float>::value;
  const int dx_parts = halves ? 2 : part_count(pass.threads, positions);
  auto dx_part = [&](int index) {
    if (!halves) return part_of(index, dx_parts, positions);
    return index == 0 ? Part{0, positions / 2} : Part{positions / 2, positions - positions / 2};
  };
  const int bias_parts = pass.slices > 1 ? part_count(pass.threads / 2, G4) : 0;  // a direction
  const int weight_parts = halves ? 1 : lstm_fp32::weight_gradient_parts(pass.threads, G4, W, positions);
  const int weight_tasks = 2 * weight_parts, bias_tasks = 2 * bias_parts;
  std::optional<lstm_fp32::InputGradient<Real>> input_gradient;
  auto pack = [&](int) {
    input_gradient.emplace(pass.workspaces[0].packed_other, weight_ih, pass.input, G8, rounds(pass.arithmetic));
  };
  in_parallel(pass.threads, 1, weight_tasks + bias_tasks + dx_parts, pack, [&](int task) {
    if (task < weight_tasks) {  // dW's rows (4H, D + H) = dgates^T [x | h_{t-1}], the operand the forward saved
      const int direction = task % 2;
      const Part rows = part_of(task / 2, weight_parts, G4);
      gemm(true, false, rows.count, W, positions, Real(1), pass.gates + direction * G4 + rows.first, G8,
           pass.workspaces[direction].operand, W, Real(0),
           pass.workspaces[direction].product + static_cast<size_t>(rows.first) * W, W);
    } else if (task < weight_tasks + bias_tasks) {
      const int direction = (task - weight_tasks) % 2;
      sum_bias(pass.workspaces[direction].dbias_sum, pass.gates, part_of((task - weight_tasks) / 2, bias_parts, G4),
               direction, pass.batch, pass.seq_len, H);
    } else {  // dx (P, D) = dgates (P, 8H) W_ih (8H, D), both directions at once
      const Part part = dx_part(task - weight_tasks - bias_tasks);
      if (part.count > 0)
        (*input_gradient)(dx + static_cast<size_t>(part.first) * pass.input,
                          pass.gates + static_cast<size_t>(part.first) * G8, G8, part.count);
    }
  });
}

// The backward of bilstm_backward and bilstm_maxpool_backward (dh_of: backward_steps'): the
// steps, then the products that read every step's gate gradients. The weight gradients read the
// step operands [x_t | h_{t-1}] that the forward kept in saved.workspace (a float forward that
// saves nothing, run in between, leaves them alone; the double path's uses their first rows).
template <class Real, class DhOf>
void backward_layer(Real* dx, Real* dweight_ih, Real* dweight_hh, Real* dbias_ih, Real* dbias_hh,
                    BiLstmState<Real>& saved, const DhOf& dh_of, const Real* weight_ih, const Real* weight_hh,
                    int batch, int seq_len, int input, int hidden, int threads, Precision precision) {
  const Arithmetic arithmetic = arithmetic_for<Real>(precision);
  const bool fast = arithmetic == Arithmetic::bf16_fast;
  const int H = hidden, G4 = 4 * hidden;
  const BackwardPass<Real> pass{saved.gates,
                                saved.cell,
                                direction_workspaces(saved.workspace, batch, seq_len, input, hidden),
                                arithmetic,
                                batch,
                                seq_len,
                                input,
                                hidden,
                                threads,
                                slice_count<Real>(arithmetic, threads, batch)};
  backward_steps(pass, dh_of, dx, weight_ih, weight_hh);
  if (!fast) backward_products(pass, dx, weight_ih);
  for (int direction = 0; direction < 2; ++direction) {
    const DirectionWorkspace<Real>& workspace = pass.workspaces[direction];
    add_product(dweight_ih + static_cast<size_t>(direction) * G4 * input,
                dweight_hh + static_cast<size_t>(direction) * G4 * H, workspace.product, fast, input, H);
    for (int j = 0; j < G4; ++j) {
      dbias_ih[direction * G4 + j] += workspace.dbias_sum[j];
      dbias_hh[direction * G4 + j] += workspace.dbias_sum[j];
    }
  }
  if (fast) {  // dx = the two directions' parts
    const Real* reverse_dx = pass.workspaces[1].operand;
    for (size_t i = 0; i < static_cast<size_t>(batch) * seq_len * input; ++i) dx[i] += reverse_dx[i];
  }
}

}  // namespace

// y and x are the CUDA twin's inputs (cuDNN's); the weight gradients here read what the forward
// kept in saved.workspace.
template <class Real>
void bilstm_backward(Real* dx, Real* dweight_ih, Real* dweight_hh, Real* dbias_ih, Real* dbias_hh,
                     BiLstmState<Real>& saved, [[maybe_unused]] const Real* y, const Real* dy,
                     [[maybe_unused]] const Real* x, const Real* weight_ih, const Real* weight_hh, int batch,
                     int seq_len, int input, int hidden, int threads, Precision precision) {
  auto dense = [dy, seq_len, hidden](int direction, Real*) {
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
  auto pooled = [&](int direction, Real* row) {
    const lstm_pool::DirectionGradient<Real> gradient{row, argmax, dpooled, mode, direction, seq_len, hidden};
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
