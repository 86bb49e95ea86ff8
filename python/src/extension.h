// enhanced._core, the engine inside the user's Python (nanobind): what its files share. The
// Python side (python/enhanced/model.py) turns the user's data into an .ebin image in memory and
// calls these; each releases the GIL while the engine runs.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

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

// The GIL taken for a call into Python from a thread that released it (wait_if_finalizing first).
class PythonCall {
 public:
  PythonCall() {
    wait_if_finalizing();
    state_ = PyGILState_Ensure();
  }
  ~PythonCall() { PyGILState_Release(state_); }
  PythonCall(const PythonCall&) = delete;
  PythonCall& operator=(const PythonCall&) = delete;

 private:
  PyGILState_STATE state_;
};

// The GIL released while the engine works, and taken back at the end of the scope
// (wait_if_finalizing first): nanobind's gil_scoped_release without the abort at exit.
class EngineWork {
 public:
  EngineWork() : state_(PyEval_SaveThread()) {}
  ~EngineWork() {
    wait_if_finalizing();
    PyEval_RestoreThread(state_);
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
