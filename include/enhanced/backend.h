// What the training loop needs from a device, so that one loop (trainer.cpp) drives the CPU and
// the GPU alike: queue a training step, read back what the queued steps did, evaluate, and bring
// the host's weights and optimizer state up to date for a checkpoint.
//
// The CPU backend runs each step when it is queued; the CUDA backend (CudaModel) queues it on the
// GPU. Either way the loss, accuracy and a non-finite loss come back through collect(), so the
// trainer's handling of them is the same code, tested on every machine. (A non-finite gradient
// with a finite loss throws from enqueue_train_step on the CPU, as Optimizer::step does, and
// comes back through collect() as halt kind 2 from the GPU.)
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "enhanced/batch.h"
#include "enhanced/dataset.h"
#include "enhanced/device.h"
#include "enhanced/evaluate.h"
#include "enhanced/model.h"
#include "enhanced/optimizer.h"
#include "enhanced/train_totals.h"

namespace enhanced {

class TrainingBackend {
 public:
  virtual ~TrainingBackend() = default;
  // Queues one training step: forward, backward, optimizer step. Once a step has halted, later
  // ones are skipped. The batch's memory may be reused on return.
  virtual void enqueue_train_step(const Batch& batch) = 0;
  // Waits for the queued steps; returns their totals and starts new ones. A halt stays in force.
  virtual TrainTotals collect() = 0;
  // The model as it stands after the queued steps, over a whole dataset in file order.
  virtual EvalResult evaluate(const Dataset& dataset, int batch_size) = 0;
  // Makes the host's parameters and optimizer state (the ones the backend was made with) those
  // of the device, after the queued steps.
  virtual void sync_to_host() = 0;
  // One line for the end of a run ("" when there is nothing to say).
  virtual std::string closing_note() const { return ""; }
};

// The backend for `device`, training `params` with `optimizer` (both owned by the caller and
// kept up to date by sync_to_host). threads: CPU threads for the CPU backend. cuda: the CUDA
// backend's options; it writes back the LSTM algorithm it chose, so that the run's recorded
// options name it. Prints one line about the GPU set-up to stderr.
std::unique_ptr<TrainingBackend> make_training_backend(Device device, ParameterBuffer<float>& params,
                                                       Optimizer& optimizer, int max_batch, int threads,
                                                       CudaOptions& cuda);

}  // namespace enhanced
