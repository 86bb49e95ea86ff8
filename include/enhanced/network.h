// The whole model on the CPU: forward (with the loss and its gradient fused) and backward, as
// the layers' calls in order and in reverse. Activations are caller-owned and sized once.
#pragma once

#include <cstdint>
#include <vector>

#include "enhanced/batch.h"
#include "enhanced/huge_pages.h"
#include "enhanced/model.h"

namespace enhanced {

// Activations are large and read with big strides ((B, T, .) rows of one time step are T rows
// apart), so they live in huge pages too.
template <class Real>
using ActivationBuffer = std::vector<Real, HugePageAllocator<Real>>;

template <class Real>
struct Activations {
  int capacity = 0;            // largest batch the buffers hold
  ActivationBuffer<Real> x;         // (B, T, D) blended embeddings
  ActivationBuffer<Real> gates;     // (B, T, 8H) LSTM gates; overwritten by their gradients in backward
  ActivationBuffer<Real> cell;      // (B, T, 2H)
  ActivationBuffer<Real> y;         // (B, T, 2H) BiLSTM output
  ActivationBuffer<Real> pooled;    // (B, F)
  std::vector<int32_t> argmax; // (B, F)
  ActivationBuffer<Real> logits;    // (B, L)
  ActivationBuffer<Real> dlogits;   // (B, L)
  ActivationBuffer<Real> sample_losses;  // (B)
  ActivationBuffer<Real> dpooled;   // (B, F)
  ActivationBuffer<Real> dy;        // (B, T, 2H)
  ActivationBuffer<Real> dx;        // (B, T, D)
  ActivationBuffer<Real> lstm_scratch;

  void reserve(const ModelConfig& config, int batch);
};

// Sets the engine's CPU threads: `requested`, or every core when 0; returns the count. BLAS is
// kept single-threaded, since the layers split their work over these threads themselves
// (an idle BLAS pool spinning beside them would steal the cores).
int configure_cpu_threads(int requested);

// Runs the model on `batch`; returns the mean loss. With `with_gradient`, also leaves
// d loss / d logits in activations.dlogits for backward.
template <class Real>
double model_forward(Activations<Real>& activations, const ParameterBuffer<Real>& params, const Batch& batch,
                     int threads, bool with_gradient);

// grads += d loss / d params (the embedding rows named in the batch only). Requires the
// matching model_forward(..., with_gradient = true) just before.
template <class Real>
void model_backward(ParameterBuffer<Real>& grads, Activations<Real>& activations, const ParameterBuffer<Real>& params,
                    const Batch& batch, int threads);

}  // namespace enhanced
