// The BiLSTM's products on the bfloat16 kernels (--precision bf16 where the CPU has AVX512-BF16
// or AMX-BF16; layers/cpu/bf16_gemm.h): what layers/lstm.cpp's direction loops call a step at a
// time in place of the FP32 products. Every operand is converted once, vectorised, while it is in
// cache: x_t straight to bfloat16 into the step's operand (whose h_{t-1} the pointwise pass writes,
// and which the backward reads again), the step's gate gradients by the backward's pointwise pass
// for the three products that read them (dh, dx and the weight gradients, copied straight into
// the weight gradients' packed layout), and the weights packed once per call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "layers/cpu/line_requests.h"

namespace enhanced::lstm_bf16 {

// One direction's buffers, carved by carve_workspace from the caller's workspace_size(...)
// uint16_t elements (layers/lstm.cpp keeps them in the layer's workspace).
struct Workspace {
  uint16_t* weights;       // the forward's [W_ih | W_hh]^T or the backward's W_hh, packed
  uint16_t* weights_ih;    // the backward's W_ih, packed
  uint16_t* step_operand;  // a step's [x_t | h_{t-1}], (B, D + H), in a forward that saves nothing
  uint16_t* step_dgates;   // a step's gate gradients, (B, 4H)
  uint16_t* chunk_operand;  // (D + H, chunk K): [x | h_{t-1}]^T of a chunk's steps
  uint16_t* chunk_dgates;   // a chunk's gate gradients, packed (chunk K) x 4H
  uint16_t* kernel;         // bf16_gemm::multiply's own, for the largest K of the products
};
size_t workspace_size(int batch, int input, int hidden);
Workspace carve_workspace(uint16_t* base, int batch, int input, int hidden);

// A step's gates (B, 4H) = [x_t | h_{t-1}] (B, D + H) [W_ih | W_hh]^T of one direction. The
// operand's rows are the caller's: gather_x converts x_t into them, the forward's pointwise pass
// of the step before writes h_{t-1} there as bfloat16 (lstm_pointwise::forward).
class StepProjection {
 public:
  StepProjection(const Workspace& workspace, const float* w_ih, const float* w_hh, int input, int hidden);
  // operand rows [0, D) = x_t rounded to bfloat16; rows ld_operand apart, of x ld_x.
  void gather_x(uint16_t* operand, size_t ld_operand, const float* x, size_t ld_x, int batch) const;
  // Rows of gates ld_gates apart, of operand ld_operand.
  void operator()(float* gates, size_t ld_gates, const uint16_t* operand, size_t ld_operand, int batch) const;

 private:
  int input_, hidden_;
  uint16_t* packed_;  // [W_ih | W_hh]^T, (D + H) x 4H
  uint16_t* kernel_;  // the multiply's workspace
};

// One direction's backward products, a step at a time after its pointwise pass, which leaves the
// step's gate gradients dgates (B, 4H) rounded to bfloat16 in place and their bits in
// step_dgates(b) (every later use is a product):
//   dh_recurrent (B, H) = dgates W_hh (for the step before; not at the last),
//   dx rows (B, D)      = dgates W_ih (this direction's part of dx),
//   product (D + H, 4H) += [x_t | h_{t-1}]^T dgates (the weight gradients, transposed), K = the
//                          positions, multiplied a chunk of ~512 positions at a time.
class StepBackward {
 public:
  // operand (B, T, D + H) the forward's [x_t | h_{t-1}] in bfloat16; dx_part (B, T, D) this
  // direction's dx (=); product (D + H, 4H) the weight gradients' (=, complete after the last step).
  StepBackward(const Workspace& workspace, const float* w_ih, const float* w_hh, const uint16_t* operand,
               float* dx_part, float* product, int direction, int batch, int seq_len, int input, int hidden);
  // Where the pointwise pass writes row b's gate gradients as bfloat16 (4H).
  uint16_t* step_dgates(int b) const { return buffers_.step_dgates + static_cast<size_t>(b) * 4 * hidden_; }
  // step counts down from T - 1 to 0; dh_recurrent: written for the step before; next_lines: what
  // the dh product requests while it runs (line_requests.h).
  void operator()(int step, float* dh_recurrent, LineRequests next_lines);

 private:
  void add_to_chunk(int step, int t, int slot);
  int direction_, batch_, seq_len_, input_, hidden_;
  int pair_batch_;       // B rounded up to even: each step's K rows start a pair
  int chunk_steps_;      // steps a chunk of the weight gradients' K holds
  int chunk_rows_ = 0;   // K of the chunk being filled
  const uint16_t* operand_;
  float *dx_part_, *product_;
  Workspace buffers_;
};

}  // namespace enhanced::lstm_bf16
