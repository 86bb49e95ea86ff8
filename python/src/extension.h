// enhanced._core, the engine inside the user's Python (nanobind): what its files share. The
// Python side (python/enhanced/model.py) turns the user's data into an .ebin image in memory and
// calls these; each releases the GIL while the engine runs.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cxxabi.h>

#include <string>
#include <vector>

#include "app.h"
#include "enhanced/dataset.h"

namespace nb = nanobind;

namespace enhanced::python {

// Blocks the calling thread for good when the interpreter is finalizing: Python exits while fit
// runs in a daemon thread. Taking the GIL then ends the thread with pthread_exit, whose forced
// unwinding through a noexcept frame (a GIL guard's destructor, nanobind's dispatch) aborts the
// whole process ("terminate called without an active exception"); waiting lets it exit cleanly.
void wait_if_finalizing();

// Blocks the calling thread for good: the process's exit ends it.
[[noreturn]] void wait_for_exit();

// Whether this thread's Python thread state is the current one (it holds the GIL). Not so while
// CPython ends the thread from inside a call (the forced unwinding of its pthread_exit).
bool holds_own_thread_state();

// The GIL taken for a call into Python from a thread that released it (wait_if_finalizing first).
// Python exiting can end the thread inside the call: a callback that released the GIL (time.sleep)
// takes it back from a finalizing interpreter, and CPython calls pthread_exit. The unwinding then
// reaches this destructor with the thread state no longer current, where PyGILState_Release is a
// fatal error ("must be current when releasing"): the thread waits for the process's exit instead,
// which also stops the unwinding before the engine's frames. Finalizing can also start between
// wait_if_finalizing and PyGILState_Ensure: that pthread_exit is caught and waited out alike.
class PythonCall {
 public:
  PythonCall() {
    wait_if_finalizing();
    try {
      state_ = PyGILState_Ensure();
    } catch (abi::__forced_unwind&) {
      wait_for_exit();
    }
  }
  ~PythonCall() {
    if (!holds_own_thread_state()) wait_for_exit();
    PyGILState_Release(state_);
  }
  PythonCall(const PythonCall&) = delete;
  PythonCall& operator=(const PythonCall&) = delete;

 private:
  PyGILState_STATE state_;
};

// The GIL released while the engine works, and taken back at the end of the scope
// (wait_if_finalizing first): nanobind's gil_scoped_release without the abort at exit. The
// pthread_exit of finalizing starting after that check is caught here: unwinding out of this
// (noexcept) destructor would abort the process.
class EngineWork {
 public:
  EngineWork() : state_(PyEval_SaveThread()) {}
  ~EngineWork() {
    wait_if_finalizing();
    try {
      PyEval_RestoreThread(state_);
    } catch (abi::__forced_unwind&) {
      wait_for_exit();
    }
  }
  EngineWork(const EngineWork&) = delete;
  EngineWork& operator=(const EngineWork&) = delete;

 private:
  PyThreadState* state_;
};

// A data set given as bytes or a bytearray (an .ebin image, read where Python holds it, no copy: keep
// `data` alive while the Dataset is used) or as a path, named `name` in errors (the image's
// name, or the path).
Dataset open_dataset(nb::object data, const std::string& name);

// {loss, accuracy, macro_f1, samples} of `checkpoint` on a labelled set (enhanced-eval's numbers).
nb::dict evaluate(const std::string& checkpoint, nb::object data, const std::string& name, int batch_size,
                  const EngineFlags& flags);

// (N, L) softmax probabilities (or logits) of `checkpoint` on a set (enhanced-predict's numbers).
nb::ndarray<nb::numpy, float, nb::ndim<2>> predict(const std::string& checkpoint, nb::object data,
                                                   const std::string& name, int batch_size, const EngineFlags& flags,
                                                   bool logits_wanted);

// enhanced-train's run on `words` (its flags) over the data sets given (bytes or paths; valid may be
// None; the training data may also be an enhanced.stream.Stream: batches read one at a time),
// calling `bridge` (python/enhanced/fit_hooks.py's Bridge) as its TrainingObserver. Returns
// run_training's exit code: 0, kInterruptedExit after Ctrl-C (the step reached saved), or the
// code of a run stopped by a non-finite loss. label_names and class_weights (each may be empty):
// the names and weights as values, as --label-names and --class-weights would give them.
int train(const std::vector<std::string>& words, nb::object train_data, const std::string& train_name,
          nb::object valid_data, const std::string& valid_name, nb::object bridge,
          const std::vector<std::string>& label_names, const std::vector<float>& class_weights);

// enhanced._core.TrainingAccess: what fit's bridge is given (set_access) to read and write the
// running fit's parameters (a flat float32 array in the checkpoint's order) and learning rate.
void bind_training_access(nb::module_& m);

// enhanced-train's flags' long names ("lr", "lr-schedule", "help", ...): what fit may be given;
// switches_only: those that take no value ("drop-last"), which fit gives True or False.
std::vector<std::string> train_flag_names(bool switches_only);

}  // namespace enhanced::python
