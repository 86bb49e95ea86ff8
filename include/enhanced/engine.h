// The engine: the model on one device behind one interface, so that the trainer, the apps and
// the bench never choose a device themselves. make_engine is the only place that does.
//
// The CPU engine (src/engine/cpu_engine.cpp) runs each step when it is queued, on the caller's
// host buffers; the CUDA engine (src/engine/cuda_engine.*) holds copies on the GPU and queues
// steps without waiting. Either way the loss, accuracy and a halt come back through collect(),
// so the trainer's handling of them is the same code, tested on every machine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "enhanced/batch.h"
#include "enhanced/class_weight_mean.h"
#include "enhanced/communicator.h"
#include "enhanced/device.h"
#include "enhanced/model.h"
#include "enhanced/optimizer_config.h"
#include "enhanced/precision.h"
#include "enhanced/train_totals.h"

namespace enhanced {

struct EngineOptions {
  // EngineOptions{batch, threads, cuda} stays valid (and free of missing-initializer warnings).
  EngineOptions(int max_batch_ = 64, int threads_ = 1, CudaOptions cuda_ = {}, std::vector<float> class_weights_ = {})
      : max_batch(max_batch_), threads(threads_), cuda(cuda_), class_weights(std::move(class_weights_)) {}

  int max_batch = 64;  // largest batch any call may pass
  int threads = 1;     // CPU threads (configure_cpu_threads' result, enhanced/cpu.h)
  CudaOptions cuda;    // the CUDA engine's options (ignored on the CPU)
  // The training loss's class weights, L non-negative finite numbers (empty: unweighted). They
  // weigh training steps and compute_gradients; forward (evaluation) stays unweighted, as Keras'
  // class_weight leaves the validation loss. class_weight_mean: what their weighted sum is divided
  // by (enhanced/class_weight_mean.h): the total weight (torch's CrossEntropyLoss(weight=)) or B.
  std::vector<float> class_weights;
  ClassWeightMean class_weight_mean = ClassWeightMean::weights;
  // The ranks of a data-parallel run (docs/distributed.md), not owned; null or of size 1: this
  // process alone. With more ranks, a training step takes the whole batch, computes this rank's
  // part of it (shard_of) and leaves every rank with the whole batch's loss, gradient and update.
  // forward and compute_gradients stay local (evaluate divides the batches itself).
  Communicator* communicator = nullptr;
  // With a communicator of one rank: take the data-parallel path all the same (the shard, which
  // is the whole batch, and the exchange), so that one process or one GPU tests it.
  bool exchange_alone = false;
  // The GEMMs' arithmetic (enhanced/precision.h). make_engine refuses one the device cannot run.
  Precision precision = Precision::fp32;
};

// The engine an app's flags chose (each app resolves them once: resolve_engine_flags in
// apps/app.h): the device, the CPU threads asked for (0: one per physical core;
// configure_cpu_threads in enhanced/cpu.h gives the count), the CUDA options and the GEMMs'
// arithmetic. Whoever makes the engine adds the rest of EngineOptions (max_batch, class
// weights, communicator).
struct EngineChoice {
  Device device = Device::cpu;
  int threads = 0;
  CudaOptions cuda;
  Precision precision = Precision::fp32;
};

// The options of an engine for `choice`: `threads` is the count configure_cpu_threads gave for
// choice.threads (configured once, by whoever makes the engine).
inline EngineOptions engine_options(const EngineChoice& choice, int max_batch, int threads) {
  EngineOptions options{max_batch, threads, choice.cuda};
  options.precision = choice.precision;
  return options;
}

// The ranks a data-parallel engine exchanges gradients with (EngineOptions::communicator when
// it has more than one rank, or one with exchange_alone), else null: this process alone. Both
// engines decide with this.
Communicator* data_parallel_ranks(const EngineOptions& options);

// Throws Error unless `weights` is empty or holds num_labels non-negative finite numbers.
void check_class_weights(const std::vector<float>& weights, int num_labels);

// One part of a step that the bench times alone (the CPU engine's layers): prepare (untimed,
// may be empty), then run. With `measured`, the part's time is not run's wall time but what
// measured returns after each run (seconds): a share of run's work timed inside it.
struct EnginePart {
  std::string name;
  std::function<void()> prepare;
  std::function<void()> run;
  std::function<double()> measured;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const ModelConfig& config() const = 0;
  // One line: the device and how it runs the model.
  virtual std::string summary() const = 0;
  // The cuDNN LSTM algorithm in use (the run records it so a resume keeps the arithmetic).
  virtual RnnAlgorithm rnn_algorithm() const { return RnnAlgorithm::standard; }
  // Whether enqueue_train_step returns before the step has run (the GPU's pipeline).
  virtual bool queues_steps() const { return false; }

  // Queues one training step: forward, backward, optimizer step at `learning_rate` (this step's
  // rate, >= 0 and finite; the optimizer config's learning_rate is only the run's base rate, so a
  // schedule passes each step's value). Once a step has halted, later ones are skipped. The
  // batch's memory may be reused on return.
  virtual void enqueue_train_step(const Batch& batch, float learning_rate) = 0;
  // Waits for the queued steps; returns their totals and starts new ones. A halt stays in force.
  virtual TrainTotals collect() = 0;

  // Synchronous, after the queued steps: the batch's mean loss and its logits (B, L) on the host
  // (when not null). compute_gradients also runs backward, leaving d loss / d params for
  // download_gradients, without an optimizer step (download_gradients is defined only after it:
  // a training step leaves the CPU's gradients zeroed and the GPU's those of its backward).
  virtual double forward(const Batch& batch, float* logits) = 0;
  virtual double compute_gradients(const Batch& batch, float* logits) = 0;
  virtual void download_gradients(ParameterBuffer<float>& grads) = 0;

  // Makes the host's parameters and optimizer state (the ones the engine was made with) those
  // of the device, after the queued steps.
  virtual void sync_to_host() = 0;
  // Makes the device's parameters the host's (the ones the engine was made with), for the steps
  // queued after this call; the optimizer state stays the device's.
  virtual void sync_to_device() = 0;
  // One line for the end of a run ("" when there is nothing to say).
  virtual std::string closing_note() const { return ""; }
  // The parts of a training step on `batch`, each runnable alone (none where the device does
  // not split its step).
  virtual std::vector<EnginePart> parts(const Batch& batch) { static_cast<void>(batch); return {}; }
};

// The engine for `device`, training `params` with `optimizer` (both owned by the caller, kept
// up to date by sync_to_host). optimizer == nullptr: an engine for inference only (forward).
std::unique_ptr<Engine> make_engine(Device device, ParameterBuffer<float>& params, OptimizerState* optimizer,
                                    const EngineOptions& options);

// Version string printed by every app's --version (it says which backends this build has).
const char* version_string();

// "" when a CUDA device can be used, else the reason (no backend built, no driver, no device).
std::string cuda_unavailable_reason();

}  // namespace enhanced
