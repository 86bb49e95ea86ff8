// enhanced._core: the module's definition. Errors of the engine (enhanced::Error) reach Python as
// ValueError with the engine's one-line message.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <thread>

#include "extension.h"
#include "enhanced/common.h"
#include "enhanced/engine.h"
#include "enhanced/model.h"
#include "enhanced/training_observer.h"

namespace enhanced::python {

void wait_for_exit() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

void wait_if_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  const bool finalizing = Py_IsFinalizing();
#else
  const bool finalizing = _Py_IsFinalizing();
#endif
  if (finalizing) wait_for_exit();
}

bool holds_own_thread_state() {
#if PY_VERSION_HEX >= 0x030D0000
  PyThreadState* current = PyThreadState_GetUnchecked();
#else
  PyThreadState* current = _PyThreadState_UncheckedGet();
#endif
  return current != nullptr && current == PyGILState_GetThisThreadState();
}

Dataset open_dataset(nb::object data, const std::string& name) {
  if (nb::isinstance<nb::bytes>(data)) {
    // Viewed, not copied: the caller's bytes object outlives the call (immutable, held by its
    // argument), so the image in Python is the data's one copy in memory.
    const nb::bytes image = nb::cast<nb::bytes>(data);
    return Dataset::view({static_cast<const uint8_t*>(image.data()), image.size()}, name);
  }
  // model.py's image (ebin.image_bytes): built in place, then held unchanged by the caller, viewed alike.
  if (PyByteArray_Check(data.ptr()))
    return Dataset::view({reinterpret_cast<const uint8_t*>(PyByteArray_AS_STRING(data.ptr())),
                          static_cast<size_t>(PyByteArray_GET_SIZE(data.ptr()))}, name);
  return Dataset::open(nb::cast<std::string>(data), name);
}

namespace {

EngineFlags engine_flags(const std::string& device, int threads, const std::string& precision) {
  EngineFlags flags;
  flags.device = device;
  flags.threads = threads;
  flags.precision = precision;
  return flags;
}

}  // namespace
}  // namespace enhanced::python

NB_MODULE(_core, m) {
  using namespace enhanced;
  using namespace enhanced::python;
  m.doc() = "The enhanced engine in process (enhanced.Model binds to it)";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  m.def("version", [] { return std::string(version_string()); });
  m.attr("INTERRUPTED") = kInterruptedExit;
  // Off at exit where a fit could not stop in time (fit_hooks.stop_at_exit): see there.
  m.def("set_leak_warnings", [](bool on) { nb::set_leak_warnings(on); });
  m.def("train_flag_names", &python::train_flag_names, nb::arg("switches_only") = false);
  python::bind_training_access(m);
  // The model's names from the engine's tables (enhanced/model.h); checkpoint.py's copies are
  // checked against them (python/tests/test_names.py).
  m.attr("BLENDS") = nb::tuple(nb::cast(names_of(blend_modes())));
  m.attr("POOLS") = nb::tuple(nb::cast(names_of(pool_modes())));
  m.def("train", &python::train, nb::arg("words"), nb::arg("train"), nb::arg("train_name"), nb::arg("valid").none(),
        nb::arg("valid_name"), nb::arg("bridge"), nb::arg("label_names") = std::vector<std::string>{},
        nb::arg("class_weights") = std::vector<float>{});
  m.def(
      "evaluate",
      [](const std::string& checkpoint, nb::object data, const std::string& name, int batch_size,
         const std::string& device, int threads, const std::string& precision) {
        return python::evaluate(checkpoint, data, name, batch_size, engine_flags(device, threads, precision));
      },
      nb::arg("checkpoint"), nb::arg("data"), nb::arg("name"), nb::arg("batch_size"), nb::arg("device"),
      nb::arg("threads"), nb::arg("precision"));
  m.def(
      "predict",
      [](const std::string& checkpoint, nb::object data, const std::string& name, int batch_size,
         const std::string& device, int threads, const std::string& precision, bool logits) {
        return python::predict(checkpoint, data, name, batch_size, engine_flags(device, threads, precision), logits);
      },
      nb::arg("checkpoint"), nb::arg("data"), nb::arg("name"), nb::arg("batch_size"), nb::arg("device"),
      nb::arg("threads"), nb::arg("precision"), nb::arg("logits"));
}
