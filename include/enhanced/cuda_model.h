// The model on one CUDA device: device copies of the parameters, their gradients and the
// optimizer moments (each ONE allocation carved like ParameterBuffer, so an optimizer step is
// one kernel), activations and workspaces sized once for the largest batch, cuBLAS / cuDNN
// handles and a stream. A training step uploads the batch (pinned staging, one async copy),
// runs forward, backward and the optimizer step, and allocates nothing in the steady state
// (only a batch with more identifier ids than any before grows the id buffers).
//
// Semantics follow the CPU path exactly: model_forward / model_backward (network.h), then
// Optimizer::step (optimizer.h) with the touched embedding rows, then zero_gradients.
//
// Only available in builds with ENHANCED_HAVE_CUDA; needs enhanced::cuda_unavailable_reason()
// to be empty. Errors (CUDA, cuBLAS, cuDNN, bad batches) throw enhanced::Error.
#pragma once

#include <cstdint>
#include <memory>

#include "enhanced/batch.h"
#include "enhanced/model.h"
#include "enhanced/optimizer.h"

namespace enhanced {

class CudaModel {
 public:
  // Allocates everything for batches of up to max_batch samples on the current CUDA device.
  // Parameters start at zero (call upload_parameters), optimizer moments at zero, step 0.
  // tf32: allow TF32 tensor-core math in cuDNN (CUDNN_DEFAULT_MATH) and cuBLAS; off by default
  // so results track the FP32 CPU engine.
  CudaModel(const ModelConfig& config, const OptimizerConfig& optimizer, int max_batch, bool tf32 = false);
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;
  CudaModel(CudaModel&&) noexcept;
  CudaModel& operator=(CudaModel&&) noexcept;

  const ModelConfig& config() const;
  int max_batch() const;

  // Host <-> device copies of the whole parameter buffer (config must match). Synchronous.
  void upload_parameters(const ParameterBuffer<float>& params);
  void download_parameters(ParameterBuffer<float>& params) const;

  // d loss / d params of the last backward (compute_gradients or train_step): the value the CPU
  // model_backward adds into zeroed grads. Synchronous.
  void download_gradients(ParameterBuffer<float>& grads) const;

  // Optimizer state, as the CPU Optimizer keeps it: first = SGD velocity or Adam m, second =
  // Adam v; steps = steps taken. For checkpoints / resume. Null pointers are skipped.
  void upload_optimizer_state(const ParameterBuffer<float>* first, const ParameterBuffer<float>* second,
                              int64_t steps);
  void download_optimizer_state(ParameterBuffer<float>* first, ParameterBuffer<float>* second) const;
  int64_t optimizer_steps() const;

  // One training step: forward, backward, optimizer step. Returns the mean loss. When the loss
  // is not finite it is returned and the weights stay unchanged (the caller stops, as the CPU
  // trainer does); a non-finite gradient norm with a finite loss throws Error (as
  // Optimizer::step). logits_host (B, L), when not null, receives the logits (for accuracy).
  double train_step(const Batch& batch, float* logits_host = nullptr);

  // Forward and backward only (no optimizer step): leaves the gradients for download_gradients.
  double compute_gradients(const Batch& batch, float* logits_host = nullptr);

  // Evaluation: forward only. Returns the mean loss; logits_host (B, L) when not null.
  double forward(const Batch& batch, float* logits_host);

  // The global gradient norm (before clipping) of the last train_step.
  double last_gradient_norm() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace enhanced
