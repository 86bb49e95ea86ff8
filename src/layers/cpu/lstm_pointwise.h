// The LSTM's fused pointwise passes for one row of H units, forward and backward. The float
// versions use vectorizable exp/tanh (Cephes-style, within ~2 ulp) and are compiled for AVX-512,
// AVX2 and baseline x86-64, picked at load time; the double versions (used by the gradient
// checks) call the C library.
#pragma once

#include <cstdint>

namespace enhanced::lstm_pointwise {

// gates (4H): pre-activations without bias in, activations i, f, g, o out; cell, h (H) out;
// h_next (H) or nullptr: h again, where the next step's product reads it (its operand row's h
// part), as is, rounded to bfloat16 (round_next, the reference path) or as bfloat16 bits (the
// fast path), so no pass of its own converts or copies h; cell_prev (H) or nullptr for a zero
// initial state; bias (4H) = b_ih + b_hh, added here so the input projection needs no pass of
// its own.
void forward(float* gates, float* cell, float* h, float* h_next, const float* cell_prev, const float* bias, int hidden,
             bool round_next);
void forward(float* gates, float* cell, float* h, uint16_t* h_next, const float* cell_prev, const float* bias,
             int hidden);
void forward(double* gates, double* cell, double* h, double* h_next, const double* cell_prev, const double* bias,
             int hidden, bool round_next);

// gates (4H): activations in, pre-activation gradients out (rounded to bfloat16 when round, or
// when gates_bf16 is given, which also takes their bits); dc (H): carried cell gradient, in from
// step t+1 and out for step t-1; dh_out, dh_recurrent (H): the two parts of dL/dh; dbias (4H) +=
// the gate gradients, unrounded (the bias gradient summed as the steps go, instead of a pass over
// all of them afterwards).
void backward(float* gates, float* dc, float* dbias, const float* cell, const float* cell_prev, const float* dh_out,
              const float* dh_recurrent, int hidden, bool round);
void backward(float* gates, uint16_t* gates_bf16, float* dc, float* dbias, const float* cell, const float* cell_prev,
              const float* dh_out, const float* dh_recurrent, int hidden);
void backward(double* gates, double* dc, double* dbias, const double* cell, const double* cell_prev,
              const double* dh_out, const double* dh_recurrent, int hidden, bool round);

}  // namespace enhanced::lstm_pointwise
