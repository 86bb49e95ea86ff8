// In-process training hooks: what run_training (trainer.h) tells a caller that trains inside its
// own process (the Python extension's Model.fit and its Keras-style callbacks), and how that
// caller stops or interrupts the run. Keras's shape: the same five calls, the same log keys.
//
// Order of the calls: set_access (the run's parameters and rate: TrainingAccess below);
// on_train_begin; per epoch on_epoch_begin, on_train_batch_begin before each step and
// on_train_batch_end after it, where the epoch's end validates on_test_begin, around each
// validation batch on_test_batch_begin and on_test_batch_end, and on_test_end (Keras's evaluate
// inside fit; a validation between epochs, --valid-every, calls none of them), on_epoch_end;
// on_train_end when the run ends normally or by a stop
// (not after an error or an interrupt, as Keras's on_train_end is not after a
// KeyboardInterrupt). A resumed run begins its epoch where the run stopped (on_epoch_begin still
// comes first); a run stopped after an epoch's last step but before its end does that end first,
// with no on_epoch_begin before it.
// A resume with nothing left to do returns 0 at once and calls nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace enhanced {

// What an observer may read and change in the run between steps: Keras's model.get_weights,
// set_weights and optimizer.learning_rate during fit. The run hands it to the observer
// (set_access) before on_train_begin and takes it back (set_access(nullptr)) before run_training
// returns; use it only from the observer's calls. Both engines: on a GPU the device holds the
// parameters, and reading waits for the queued steps, writing replaces the device's copy.
class TrainingAccess {
 public:
  virtual ~TrainingAccess() = default;
  // out (P,): the parameters after the steps taken so far, in the checkpoint's order
  // (parameter_layout, model.h): the flat buffer a checkpoint's tensors are cut from.
  virtual void read_parameters(std::vector<float>& out) = 0;
  // values (P,): the parameters the next step starts from (the optimizer's moments stay); a
  // checkpoint saved later holds them. Error unless there are P values, all finite.
  virtual void write_parameters(const std::vector<float>& values) = 0;
  // The rate of the next step.
  virtual double learning_rate() const = 0;
  // The run's base rate from the next step on (a constant rate: --lr-schedule constant, after
  // any warmup), recorded as its --lr, so a resume continues with it; the logs' "lr" is each
  // step's rate. Error when the rate follows a schedule, or `rate` is negative or not finite.
  virtual void set_learning_rate(double rate) = 0;
  // The optimizer steps taken (Keras's optimizer.iterations).
  virtual int64_t steps() const = 0;
};

// Keras's logs, by Keras's names (a validation's, on_test_*: "loss", "accuracy" and "f1",
// per batch the running ones over the batches so far): "loss" and "accuracy" (per batch: the running means over the
// epoch so far, as Keras's batch logs; per epoch: the epoch's means, as metrics.jsonl's epoch
// line), "lr" (the rate of the last step taken), and at an epoch's end with a validation set
// "val_loss", "val_accuracy" and "val_f1" (macro F1).
using TrainingLogs = std::map<std::string, double>;

// What the run does after a step (poll).
enum class TrainingDecision {
  carry_on,
  // model.stop_training = True: the run ends after this step, saved as a normal end saves (the
  // state file and last.safetensors; an epoch's last step does its epoch end first; asked at an
  // epoch's end, the run ends there, as a run of that many epochs ends); the exit
  // code is 0 and a resume continues from the step, as it would from any checkpoint. Asked
  // within an epoch, after the save the run validates and calls on_epoch_end with the part's
  // logs, as Keras's fit ends an epoch it broke out of; that validation is none of the run's
  // (no best checkpoint, early stopping or plateau sees it) and its metrics line comes after
  // the saved state.
  stop,
  // Ctrl-C in the caller's process: the step reached is saved exactly as enhanced-train saves on
  // SIGINT, and run_training returns kInterruptedExit; a resume continues bit for bit.
  interrupt,
};

// run_training's code for a run ended by TrainingDecision::interrupt: the SIGINT path's 128 + 2.
inline constexpr int kInterruptedExit = 130;

// Every member has a default that does nothing, so an observer overrides what it needs. Epochs
// are 0-based (Keras's on_epoch_begin(epoch)); batch is the step's 0-based index in its epoch.
// The calls come on the training thread of a one-process run (run_training refuses an observer
// with several ranks); an exception thrown from one ends the run as an error does (nothing is
// saved by it: the last checkpoint stays the last).
class TrainingObserver {
 public:
  virtual ~TrainingObserver() = default;
  // The run's parameters and rate (TrainingAccess), or null when the run is done with them.
  virtual void set_access(TrainingAccess* access) { static_cast<void>(access); }
  virtual void on_train_begin() {}
  virtual void on_epoch_begin(int64_t epoch) { static_cast<void>(epoch); }
  virtual void on_train_batch_begin(int64_t batch) { static_cast<void>(batch); }
  virtual void on_train_batch_end(int64_t batch, const TrainingLogs& logs) {
    static_cast<void>(batch);
    static_cast<void>(logs);
  }
  virtual void on_epoch_end(int64_t epoch, const TrainingLogs& logs) {
    static_cast<void>(epoch);
    static_cast<void>(logs);
  }
  // An epoch end's validation: its start, each batch's (0-based index; logs: the validation's
  // so far), its end (logs: the whole set's).
  virtual void on_test_begin() {}
  virtual void on_test_batch_begin(int64_t batch) { static_cast<void>(batch); }
  virtual void on_test_batch_end(int64_t batch, const TrainingLogs& logs) {
    static_cast<void>(batch);
    static_cast<void>(logs);
  }
  virtual void on_test_end(const TrainingLogs& logs) { static_cast<void>(logs); }
  // logs: the last epoch's, or the running ones when no epoch ended in this process.
  virtual void on_train_end(const TrainingLogs& logs) { static_cast<void>(logs); }

  // The run stopped on an error it reports itself (a non-finite loss): the line enhanced-train
  // prints on stderr comes here instead, for the caller's exception; run_training then returns
  // that error's exit code (3). Called on the training thread, before run_training returns.
  virtual void on_failure(const std::string& reason) { static_cast<void>(reason); }

  // Whether on_train_batch_end wants loss and accuracy. They need the step's totals read back
  // (a collect, which on a GPU waits for the step): false keeps the engine's pipeline, and
  // on_train_batch_end gets only "lr". Asked once, when the run starts.
  virtual bool wants_batch_logs() const { return false; }

  // Asked after each step that does not end the run anyway (the run's last step, or one whose
  // validation stopped it early), after on_train_batch_end, and after a SIGINT/SIGTERM check
  // where the run handles signals; and after each on_epoch_end, the last one included: a stop
  // there ends the run at that epoch's end (no step of the next), an interrupt there returns
  // kInterruptedExit. Reading it must be cheap: it runs between steps.
  virtual TrainingDecision poll() { return TrainingDecision::carry_on; }
};

}  // namespace enhanced
