// The model on one CUDA device: device copies of the parameters, their gradients and the
// optimizer moments (each ONE allocation carved like ParameterBuffer, so an optimizer step is
// one kernel), activations and workspaces sized once for the largest batch, cuBLAS / cuDNN
// handles, a compute stream and a copy stream.
//
// Training is pipelined: enqueue_train_step copies the batch into one of two pinned staging
// slots, uploads it on the copy stream (overlapping the step before) and queues the step on the
// compute stream, replaying a captured CUDA graph once that batch shape has run eagerly once.
// Nothing in the steady state allocates, blocks on the GPU or copies synchronously; the loss,
// accuracy and any non-finite value are accumulated on the device and read by collect() (at the
// logging interval). The synchronous calls (train_step, compute_gradients, forward) go through
// the same path and then wait.
//
// Semantics follow the CPU engine exactly: model_forward / model_backward (cpu_model.h), then
// optimizer_step (layers/optimizer.h) with the touched embedding rows, then zero_gradients.
// make_cuda_engine puts it behind the Engine interface (enhanced/engine.h).
//
// Only available in builds with ENHANCED_HAVE_CUDA; needs enhanced::cuda_unavailable_reason()
// to be empty. Errors (CUDA, cuBLAS, cuDNN, bad batches) throw enhanced::Error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "enhanced/batch.h"
#include "enhanced/communicator.h"
#include "enhanced/device.h"
#include "enhanced/model.h"
#include "enhanced/engine.h"
#include "enhanced/optimizer_config.h"
#include "enhanced/precision.h"
#include "enhanced/train_totals.h"

namespace enhanced {

class CudaModel {
 public:
  // Allocates everything for batches of up to max_batch samples on the current CUDA device.
  // Parameters start at zero (call upload_parameters), optimizer moments at zero, step 0.
  // options.rnn_algorithm = automatic times cuDNN's LSTM algorithms here (a few ms).
  // class_weights (L, or empty: unweighted): the training loss's (train_step, enqueue_train_step,
  // compute_gradients); forward stays unweighted (EngineOptions::class_weights).
  // precision: fp32, or bf16 (the LSTM's and the dense layer's GEMMs in bfloat16 with FP32
  // accumulation; parameters, gradients, optimizer moments, loss and the buffers between the
  // layers are FP32, though the LSTM's y and dx come back holding bf16 values (cuDNN's bf16 data);
  // needs compute capability 8.0). bf16_emulated is an Error (a CPU reference path).
  // data_parallel (null: alone): the ranks of a data-parallel run (docs/distributed.md), even
  // one: training steps and compute_gradients then compute this rank's shard of each batch
  // (shard_of) and exchange the gradients over NCCL, so that every rank holds the whole batch's
  // gradient and loss; forward stays this rank's (evaluation shards itself). The device must be
  // this rank's already (select_rank_device). Needs a build with NCCL.
  CudaModel(const ModelConfig& config, const OptimizerConfig& optimizer, int max_batch,
            const CudaOptions& options = {}, const std::vector<float>& class_weights = {},
            Precision precision = Precision::fp32, Communicator* data_parallel = nullptr);
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;
  CudaModel(CudaModel&&) noexcept;
  CudaModel& operator=(CudaModel&&) noexcept;

  const ModelConfig& config() const;
  int max_batch() const;
  // One line: the GPU, the LSTM algorithm (and what its selection measured), graphs on or off,
  // the precision.
  std::string summary() const;
  RnnAlgorithm rnn_algorithm() const;
  // Training steps replayed from a CUDA graph so far; why graphs are off ("" when they are on).
  int64_t graph_replays() const;
  const std::string& graphs_off_reason() const;

  // Host <-> device copies of the whole parameter buffer (config must match). Synchronous,
  // ordered after every queued step.
  void upload_parameters(const ParameterBuffer<float>& params);
  void download_parameters(ParameterBuffer<float>& params) const;

  // d loss / d params of the last backward (compute_gradients or train_step): the value the CPU
  // model_backward adds into zeroed grads. Synchronous.
  void download_gradients(ParameterBuffer<float>& grads) const;

  // Optimizer state, as OptimizerState keeps it: first = SGD velocity or Adam m, second =
  // Adam v; steps = steps taken. For checkpoints / resume. Null pointers are skipped.
  void upload_optimizer_state(const ParameterBuffer<float>* first, const ParameterBuffer<float>* second,
                              int64_t steps);
  void download_optimizer_state(ParameterBuffer<float>* first, ParameterBuffer<float>* second) const;
  // Steps applied (after a collect that saw a halt: the steps before the halted one).
  int64_t optimizer_steps() const;

  // Pipelined training step: forward, backward, optimizer step, queued without waiting for the
  // GPU (it waits only for the upload of the batch two steps back, whose staging slot it
  // reuses). learning_rate: this step's rate, which reaches the device in the step's scalars (a
  // replayed graph reads it there). The batch's memory may be reused on return. Bad batches and
  // bad rates throw before anything is queued.
  void enqueue_train_step(const Batch& batch, float learning_rate);
  // Waits for every queued step; returns the totals since the last collect and starts new ones.
  // A halt stays in force (later steps keep being skipped): the caller stops training.
  TrainTotals collect();

  // One synchronous training step. Returns the mean loss. When the loss is not finite it is
  // returned and the weights stay unchanged (the caller stops, as the CPU trainer does); a
  // non-finite gradient norm with a finite loss throws Error (as optimizer_step). Either way
  // the halt is cleared. logits_host (B, L), when not null, receives the logits (data-parallel:
  // the shard's). The rate is the optimizer config's learning_rate.
  double train_step(const Batch& batch, float* logits_host = nullptr);

  // Forward and backward only (no optimizer step): leaves the gradients for download_gradients.
  double compute_gradients(const Batch& batch, float* logits_host = nullptr);

  // Evaluation: forward only. Returns the mean loss; logits_host (B, L) when not null.
  double forward(const Batch& batch, float* logits_host);

  // The global gradient norm (before clipping) of the last synchronous train_step.
  double last_gradient_norm() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The CUDA engine: the model and optimizer state copied to the GPU, synced back by sync_to_host;
// optimizer == nullptr: inference only. Prints nothing; summary() says what it set up.
std::unique_ptr<Engine> make_cuda_engine(ParameterBuffer<float>& params, OptimizerState* optimizer,
                                         const EngineOptions& options);

}  // namespace enhanced
