// The CUDA engine: the model on one CUDA device behind Engine (enhanced/engine.h), the twin of
// the CPU engine (cpu_engine.cpp's CpuEngine: the same members in the same order). It holds
// device copies of the parameters, their gradients and the optimizer moments (each ONE
// allocation carved like ParameterBuffer, so an optimizer step is one kernel), activations and
// workspaces sized once for the largest batch, cuBLAS / cuDNN handles, a compute stream and a
// copy stream; the host's parameters and optimizer state are uploaded when it is made and
// refreshed by sync_to_host.
//
// Training is pipelined: enqueue_train_step copies the batch into one of two pinned staging
// slots, uploads it on the copy stream (overlapping the step before) and queues the step on the
// compute stream, replaying a captured CUDA graph once that batch shape has run eagerly once.
// Nothing in the steady state allocates, blocks on the GPU or copies synchronously; the loss,
// accuracy and any non-finite value are accumulated on the device (steps/step_totals_steps.h,
// the CPU engine's rules) and read by collect(). forward and compute_gradients go through the
// same path and then wait.
//
// Semantics follow the CPU engine exactly: model_forward / model_backward (cpu_model.h), then
// optimizer_step (layers/optimizer.h) with the touched embedding rows, then zero_gradients. In
// a data-parallel run (data_parallel_ranks) a training step computes this rank's shard of the
// batch and exchanges the gradients over NCCL (cuda_exchange.h); forward and compute_gradients
// stay local, as on the CPU.
//
// Built only with ENHANCED_HAVE_CUDA; needs enhanced::cuda_unavailable_reason() to be empty.
// Errors (CUDA, cuBLAS, cuDNN, bad batches) throw enhanced::Error.
#pragma once

#include <memory>

#include "enhanced/engine.h"

namespace enhanced {

// The CUDA engine training the caller's `params` and `optimizer` (nullptr: inference only),
// both kept up to date by sync_to_host. options.cuda.rnn_algorithm = automatic times cuDNN's
// LSTM algorithms here (a few ms). options.precision: fp32, or bf16 (the LSTM's and the dense
// layer's GEMMs in bfloat16 with FP32 accumulation; parameters, gradients, optimizer moments,
// loss and the buffers between the layers are FP32, though the LSTM's y and dx come back holding
// bf16 values (cuDNN's bf16 data); needs compute capability 8.0). bf16_emulated is an Error (a
// CPU reference path). Prints nothing; summary() says what it set up.
std::unique_ptr<Engine> make_cuda_engine(ParameterBuffer<float>& params, OptimizerState* optimizer,
                                         const EngineOptions& options);

}  // namespace enhanced
