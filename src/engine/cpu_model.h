// The whole model on the CPU: forward (with the loss and its gradient fused) and backward, as
// the layers' calls in order and in reverse (cpu_model.cpp); the CPU engine around them is
// cpu_engine.h. The gradient checks run these in double precision; everything else goes through
// make_engine (enhanced/engine.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "enhanced/batch.h"
#include "enhanced/engine.h"
#include "enhanced/huge_pages.h"
#include "enhanced/model.h"
#include "layers/softmax_xent.h"

namespace enhanced {

// The activations, one huge-page allocation (they are large and read with big strides: the
// (B, T, .) rows of one time step are T rows apart) carved by activation_layout, sized once.
// The CPU's activation_layout: the layers' workspaces sized by their own functions (for any
// precision), the one size the engine allocates and the memory estimate counts.
template <class Real>
std::vector<ActivationSlot> cpu_activation_layout(const ModelConfig& config, int batch);

template <class Real>
struct Activations : ActivationTensors<Real> {
  int capacity = 0;  // largest batch the buffers hold
  std::vector<Real, HugePageAllocator<Real>> data;
  std::vector<int32_t> argmax_data;

  void reserve(const ModelConfig& config, int batch);
};

// Runs the model on `batch`; returns the mean loss (class_weights (L, nullable): the weighted
// loss of layers/softmax_xent.h, divided as class_weight_mean says). With `with_gradient`, also
// leaves d loss / d logits in activations.dlogits for backward. whole (nullable): the batch is
// one rank's part of a step (softmax_cross_entropy's LossDenominator): the loss returned is its
// share of the whole mean.
// precision: the LSTM's and the dense layer's GEMMs' (enhanced/precision.h; double: FP32 only).
template <class Real>
double model_forward(Activations<Real>& activations, const ParameterBuffer<Real>& params, const Batch& batch,
                     int threads, bool with_gradient, const float* class_weights = nullptr,
                     const LossDenominator* whole = nullptr, Precision precision = Precision::fp32,
                     ClassWeightMean class_weight_mean = ClassWeightMean::weights);

// grads += d loss / d params (the embedding rows named in the batch only). Requires the
// matching model_forward(..., with_gradient = true) just before.
template <class Real>
void model_backward(ParameterBuffer<Real>& grads, Activations<Real>& activations, const ParameterBuffer<Real>& params,
                    const Batch& batch, int threads, Precision precision = Precision::fp32);

// The model's stages alone, each a forward or a forward and its backward as model_forward and
// model_backward run them, on the caller's buffers: what the bench times (Engine::parts).
std::vector<EnginePart> model_parts(Activations<float>& activations, ParameterBuffer<float>& params,
                                    ParameterBuffer<float>& grads, const Batch& batch, int threads,
                                    Precision precision, const float* class_weights);

}  // namespace enhanced
