#include "layers/cpu/lstm_bf16.h"

#include <algorithm>
#include <cstring>

#include "layers/cpu/bf16_gemm.h"
#include "layers/cpu/carve.h"
#include "layers/cpu/lstm_steps.h"
#include "layers/cpu/packing_clock.h"

namespace enhanced::lstm_bf16 {
namespace {

constexpr int kChunkPositions = 512;  // the weight gradients' K a chunk: its panels stay in cache

// B rounded up to even: each step's K rows of a chunk start a pair.
int pair_batch(int batch) { return batch + batch % 2; }
int chunk_steps(int batch) { return std::max(1, kChunkPositions / std::max(2, pair_batch(batch))); }

// The workspace's parts in order, each on a 64-byte boundary; base null: sizes only. Every part
// grows with the batch, so that a workspace sized for the largest batch holds every smaller
// one's carving: the chunk buffers are sized for max(512, B rounded up to even) rows, which
// bounds chunk_steps * pair_batch (exactly that product would shrink at some larger batches).
Workspace carve(uint16_t* base, int batch, int input, int hidden, size_t* total) {
  const int width = input + hidden, gates4 = 4 * hidden, chunk_rows = std::max(kChunkPositions, pair_batch(batch));
  const size_t sizes[] = {std::max(bf16_gemm::packed_size(width, gates4), bf16_gemm::packed_size(gates4, hidden)),
                          bf16_gemm::packed_size(gates4, input),
                          static_cast<size_t>(batch) * width,
                          static_cast<size_t>(batch) * gates4,
                          static_cast<size_t>(width) * chunk_rows,
                          bf16_gemm::packed_size(chunk_rows, gates4),
                          bf16_gemm::multiply_workspace_size(std::max({width, gates4, chunk_rows}))};
  uint16_t* parts[7] = {};
  const size_t elements = carve_parts(base, sizes, 32, base ? &parts : nullptr);
  if (total) *total = elements;
  return {parts[0], parts[1], parts[2], parts[3], parts[4], parts[5], parts[6]};
}

void pack(uint16_t* out, const float* source, int k, int n, size_t stride_n, size_t stride_k) {
  const packing_clock::Scope packing;
  bf16_gemm::pack_rows(out, k, 0, source, k, n, stride_n, stride_k);
}

}  // namespace

size_t workspace_size(int batch, int input, int hidden) {
  size_t total = 0;
  carve(nullptr, batch, input, hidden, &total);
  return total;
}

Workspace carve_workspace(uint16_t* base, int batch, int input, int hidden) {
  return carve(base, batch, input, hidden, nullptr);
}

StepProjection::StepProjection(const Workspace& workspace, const float* w_ih, const float* w_hh, int input, int hidden)
    : input_(input), hidden_(hidden), packed_(workspace.weights), kernel_(workspace.kernel) {
  const packing_clock::Scope packing;
  const int k = input + hidden, n = 4 * hidden;
  bf16_gemm::pack_rows(packed_, k, 0, w_ih, input, n, static_cast<size_t>(input), 1);
  bf16_gemm::pack_rows(packed_, k, input, w_hh, hidden, n, static_cast<size_t>(hidden), 1);
}

void StepProjection::gather_x(uint16_t* operand, size_t ld_operand, const float* x, size_t ld_x, int batch) const {
  const packing_clock::Scope packing;
  bf16_gemm::convert_rows(operand, static_cast<int>(ld_operand), x, static_cast<int>(ld_x), batch, input_);
}

void StepProjection::operator()(float* gates, size_t ld_gates, const uint16_t* operand, size_t ld_operand,
                                int batch) const {
  const int k = input_ + hidden_;
  bf16_gemm::multiply(gates, static_cast<int>(ld_gates), operand, static_cast<int>(ld_operand), packed_, batch,
                      4 * hidden_, k, false, kernel_);
}

StepBackward::StepBackward(const Workspace& workspace, const float* w_ih, const float* w_hh, const uint16_t* operand,
                           float* dx_part, float* product, int direction, int batch, int seq_len, int input,
                           int hidden)
    : direction_(direction), batch_(batch), seq_len_(seq_len), input_(input), hidden_(hidden),
      pair_batch_(pair_batch(batch)), chunk_steps_(lstm_bf16::chunk_steps(batch)), operand_(operand),
      dx_part_(dx_part), product_(product), buffers_(workspace) {
  // dh = dgates W_hh: element (k, n) = W_hh[k][n]; dx = dgates W_ih likewise.
  pack(buffers_.weights, w_hh, 4 * hidden, hidden, 1, static_cast<size_t>(hidden));
  pack(buffers_.weights_ih, w_ih, 4 * hidden, input, 1, static_cast<size_t>(input));
  if (seq_len == 0) std::memset(product, 0, static_cast<size_t>(input + hidden) * 4 * hidden * sizeof(float));
}

void StepBackward::operator()(int step, float* dh_recurrent, LineRequests next_lines) {
  const int gates4 = 4 * hidden_, t = lstm_steps::step_time(direction_, step, seq_len_);
  if (step > 0)
    bf16_gemm::multiply(dh_recurrent, hidden_, buffers_.step_dgates, gates4, buffers_.weights, batch_, hidden_, gates4,
                        false, buffers_.kernel, next_lines);
  bf16_gemm::multiply(dx_part_ + static_cast<size_t>(t) * input_, seq_len_ * input_, buffers_.step_dgates, gates4,
                      buffers_.weights_ih, batch_, input_, gates4, false, buffers_.kernel);
  const int done = seq_len_ - 1 - step;  // steps before this one
  add_to_chunk(step, t, done % chunk_steps_);
  const bool chunk_full = done % chunk_steps_ == chunk_steps_ - 1 || step == 0;
  if (chunk_full)
    bf16_gemm::multiply(product_, gates4, buffers_.chunk_operand, chunk_rows_, buffers_.chunk_dgates, input_ + hidden_,
                        gates4, chunk_rows_, done >= chunk_steps_, buffers_.kernel);
}

// The step's K rows of the chunk: its dgates packed, its [x_t | h_{t-1}] (the forward's rows)
// transposed, each padded to an even count with a zero row.
void StepBackward::add_to_chunk(int step, int t, int slot) {
  const packing_clock::Scope packing;
  const int gates4 = 4 * hidden_, width = input_ + hidden_;
  if (slot == 0) {  // a new chunk: its K, and its pad rows zero
    chunk_rows_ = std::min(chunk_steps_, step + 1) * pair_batch_;  // steps left, this one included
    bf16_gemm::zero_rows(buffers_.chunk_dgates, bf16_gemm::padded_depth(chunk_rows_), chunk_rows_, gates4);
  }
  const int first_row = slot * pair_batch_;
  bf16_gemm::pack_converted_rows(buffers_.chunk_dgates, bf16_gemm::padded_depth(chunk_rows_), first_row,
                                 buffers_.step_dgates, gates4, batch_, gates4);
  // The step's rows start at position (0, t)'s; they are T positions apart.
  uint16_t* columns = buffers_.chunk_operand + first_row;
  bf16_gemm::transpose(columns, chunk_rows_, operand_ + static_cast<size_t>(t) * width,
                       static_cast<size_t>(seq_len_) * width, batch_, width);
  if (batch_ % 2 == 1)
    for (int w = 0; w < width; ++w) columns[static_cast<size_t>(w) * chunk_rows_ + batch_] = 0;
}

}  // namespace enhanced::lstm_bf16
