// The LSTM's fused pointwise passes for one row of H units, forward and backward. The float
// versions use vectorizable exp/tanh (Cephes-style, within ~2 ulp) and are compiled for AVX-512,
// AVX2 and baseline x86-64, picked at load time; the double versions (used by the gradient
// checks) call the C library.
#pragma once

namespace enhanced::lstm_pointwise {

// gates (4H): pre-activations in, activations i, f, g, o out; cell, h (H) out;
// cell_prev (H) or nullptr for a zero initial state.
void forward(float* gates, float* cell, float* h, const float* cell_prev, int hidden);
void forward(double* gates, double* cell, double* h, const double* cell_prev, int hidden);

// gates (4H): activations in, pre-activation gradients out; dc (H): carried cell gradient,
// in from step t+1 and out for step t-1; dh_out, dh_recurrent (H): the two parts of dL/dh.
void backward(float* gates, float* dc, const float* cell, const float* cell_prev, const float* dh_out,
              const float* dh_recurrent, int hidden);
void backward(double* gates, double* dc, const double* cell, const double* cell_prev, const double* dh_out,
              const double* dh_recurrent, int hidden);

}  // namespace enhanced::lstm_pointwise
