// Bidirectional single-layer LSTM (docs/model.md, forward step 2), gates i, f, g, o, zero initial state.
// Structure after haste: each step does one small GEMM (the input projection and the recurrent
// product together, K = D + H) and one fused pointwise pass. The two directions run at once on
// two threads; in FP32 with more threads, each direction's rows in slices too (a row's recurrence
// never reads another row) and its weight gradients in parts of their rows, the results the same
// bits on any thread count.
//
// Weights of both directions are stacked (forward first): weight_ih (2, 4H, D),
// weight_hh (2, 4H, H), bias_ih (2, 4H), bias_hh (2, 4H), i.e. the checkpoint's named tensors
// lstm.weight_ih_l0 / _reverse etc. laid side by side in the parameter buffer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "enhanced/model.h"
#include "enhanced/precision.h"

namespace enhanced {

// Elements of Real in the layer's workspace, what forward and backward use beside their
// tensors: per direction, the packed weights and a step's operand, gates and two steps' cells
// (where the forward computes them), b_ih + b_hh, the backward's carried dh and dc,
// [x | h_{t-1}] (B, T, D + H), the weight gradients' product, the bias sum and the bf16 kernels'
// buffers (room for every precision).
template <class Real>
size_t bilstm_workspace_size(int batch, int seq_len, int input, int hidden);

// What forward saves for backward, in caller-owned buffers (the CUDA twin's is CudnnBiLstm):
// gates (B, T, 8H), the activated gates [fwd i f g o | rev i f g o]; cell (B, T, 2H), the cell
// states [c_fwd(t), c_rev(t)]; workspace, both passes' (bilstm_workspace_size; no allocation
// inside the layer).
template <class Real>
struct BiLstmState {
  Real* gates = nullptr;
  Real* cell = nullptr;
  Real* workspace = nullptr;
};

// y (B, T, 2H) = [h_fwd(t), h_rev(t)]; fills saved.gates and saved.cell, or, with both null (an
// inference: nothing for a backward), keeps only the workspace's one step of gates and two of
// cells, where every forward computes them.
// precision: the GEMMs' (enhanced/precision.h; bf16 needs AVX512-BF16, the double path FP32).
template <class Real>
void bilstm_forward(Real* y, BiLstmState<Real>& saved, const Real* x, const Real* weight_ih, const Real* weight_hh,
                    const Real* bias_ih, const Real* bias_hh, int batch, int seq_len, int input, int hidden,
                    int threads, Precision precision = Precision::fp32);

// dx (B, T, D) =; dweight_ih, dweight_hh, dbias_ih, dbias_hh +=. saved.gates holds the forward's
// activations on entry and their pre-activation gradients on exit (consumed: run forward again
// before another backward). Unlike the CUDA twin it takes the weights: cuDNN keeps its own copy.
template <class Real>
void bilstm_backward(Real* dx, Real* dweight_ih, Real* dweight_hh, Real* dbias_ih, Real* dbias_hh,
                     BiLstmState<Real>& saved, const Real* y, const Real* dy, const Real* x, const Real* weight_ih,
                     const Real* weight_hh, int batch, int seq_len, int input, int hidden, int threads,
                     Precision precision = Precision::fp32);

// The layer with the max-pool fused into it (the CPU engine's; layers/maxpool.h is the reference
// and the CUDA engine's shape, where cuDNN's backward reads a dense dy). pooled (B, F), argmax
// (B, F) as maxpool_forward finds them in y (F = T or 2H by mode), taken as each direction
// produces h; y (B, T, 2H) or null: not written (nothing on the CPU reads it again). pooled
// null: no pooling (bilstm_forward).
template <class Real>
void bilstm_maxpool_forward(Real* pooled, int32_t* argmax, Real* y, BiLstmState<Real>& saved, const Real* x,
                            const Real* weight_ih, const Real* weight_hh, const Real* bias_ih, const Real* bias_hh,
                            int batch, int seq_len, int input, int hidden, PoolMode mode, int threads,
                            Precision precision = Precision::fp32);

// bilstm_backward of maxpool_backward's dy, without it: each step's dL/dh takes dpooled (B, F)
// where argmax (B, F), bilstm_maxpool_forward's, points, as the dense dy would give it, bit for bit.
template <class Real>
void bilstm_maxpool_backward(Real* dx, Real* dweight_ih, Real* dweight_hh, Real* dbias_ih, Real* dbias_hh,
                             BiLstmState<Real>& saved, const int32_t* argmax, const Real* dpooled, const Real* x,
                             const Real* weight_ih, const Real* weight_hh, int batch, int seq_len, int input,
                             int hidden, PoolMode mode, int threads, Precision precision = Precision::fp32);

}  // namespace enhanced
