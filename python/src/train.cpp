// enhanced._core.train: enhanced-train's run inside the user's Python. The words are
// enhanced-train's flags (python/enhanced/model.py builds them from fit's keyword arguments) and
// are parsed by the app's own parser (apps/train_flags.h), so the options, defaults and checks are
// the CLI's; the data sets come in memory or as paths; the run calls back into Python through a
// TrainingObserver with the GIL taken for each call and released while the engine works.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <vector>

#include "extension.h"
#include "enhanced/batch_stream.h"
#include "enhanced/label_names.h"
#include "enhanced/trainer.h"
#include "enhanced/training_observer.h"
#include "train_flags.h"

namespace enhanced::python {
namespace {

nb::dict to_dict(const TrainingLogs& logs) {
  nb::dict out;
  for (const auto& [key, value] : logs) out[key.c_str()] = value;
  return out;
}

// The Python bridge (fit_hooks.py's Bridge) behind TrainingObserver. A Python exception in a
// callback ends the run as an error does; Ctrl-C, seen when Python's signal handlers run between
// two steps (PyErr_CheckSignals), interrupts it: the step reached is saved, then the caller
// raises KeyboardInterrupt.
class PythonObserver final : public TrainingObserver {
 public:
  explicit PythonObserver(nb::object bridge) : bridge_(std::move(bridge)) {
    PythonCall gil;
    wants_batch_logs_ = nb::cast<bool>(bridge_.attr("wants_batch_logs"));
    narrate_ = nb::cast<bool>(bridge_.attr("narrate"));
    wants_batch_begin_ = nb::cast<bool>(bridge_.attr("wants_batch_begin"));
    wants_test_batches_ = nb::cast<bool>(bridge_.attr("wants_test_batches"));
  }

  // The bridge holds the run's TrainingAccess (Model.get_weights, set_weights, optimizer during
  // fit) until the run takes it back (None).
  // A Ctrl-C (or SIGTERM) landing in it interrupts the run as in any hook, and the call is made
  // again: the access must be given and taken back (the first signal decides: a handler raises once).
  void set_access(TrainingAccess* access) override {
    PythonCall gil;
    nb::object value = access ? nb::cast(access, nb::rv_policy::reference) : nb::none();
    const auto give = [&] { bridge_.attr("set_access")(value); };
    if (!interruptible(give)) interruptible(give);
  }
  void on_train_begin() override { call("on_train_begin"); }
  // Only where a callback has the hook: no GIL taken before each step otherwise.
  void on_train_batch_begin(int64_t batch) override {
    if (wants_batch_begin_) call("on_train_batch_begin", batch);
  }
  void on_epoch_begin(int64_t epoch) override { call("on_epoch_begin", epoch); }
  void on_train_batch_end(int64_t batch, const TrainingLogs& logs) override {
    call("on_train_batch_end", batch, logs);
  }
  void on_test_begin() override { call("on_test_begin"); }
  // Only where a callback has the hook: no GIL taken around each validation batch otherwise.
  void on_test_batch_begin(int64_t batch) override {
    if (wants_test_batches_) call("on_test_batch_begin", batch);
  }
  void on_test_batch_end(int64_t batch, const TrainingLogs& logs) override {
    if (wants_test_batches_) call("on_test_batch_end", batch, logs);
  }
  void on_test_end(const TrainingLogs& logs) override { call("on_test_end", logs); }
  void on_epoch_end(int64_t epoch, const TrainingLogs& logs) override { call("on_epoch_end", epoch, logs); }
  void on_train_end(const TrainingLogs& logs) override { call("on_train_end", logs); }
  void on_failure(const std::string& reason) override { call("on_failure", reason); }
  bool wants_batch_logs() const override { return wants_batch_logs_; }
  // A Ctrl-C seen in a callback the run did not poll after (on_train_end): the caller raises it.
  bool interrupted() const { return interrupted_; }
  // The engine's informational lines (TrainOptions::narrate) follow fit's verbose.
  bool narrate() const { return narrate_; }

  TrainingDecision poll() override {
    PythonCall gil;
    if (!interrupted_ && PyErr_CheckSignals() != 0) {
      PyErr_Clear();  // fit raises KeyboardInterrupt again, after the save
      interrupted_ = true;
    }
    int decision = static_cast<int>(TrainingDecision::interrupt);
    if (!interrupted_) interruptible([&] { decision = nb::cast<int>(bridge_.attr("poll")()); });
    return interrupted_ ? TrainingDecision::interrupt : static_cast<TrainingDecision>(decision);
  }

 private:
  static nb::object logs_of(const TrainingLogs& logs) { return to_dict(logs); }
  template <class T>
  static T logs_of(T value) {
    return value;
  }

  // Every call into Python: a Ctrl-C that Python's handler raises inside it (it runs at the next
  // bytecode; SIGTERM's fit_hooks.Terminated is one) is the same interrupt: swallowed here, the
  // run saves at the next poll. Other errors end the run. False where it was interrupted.
  template <class F>
  bool interruptible(F&& f) {
    try {
      f();
      return true;
    } catch (nb::python_error& e) {
      if (!e.matches(PyExc_KeyboardInterrupt)) throw;
      interrupted_ = true;
      return false;
    }
  }

  template <class... Args>
  void call(const char* method, const Args&... args) {
    PythonCall gil;
    interruptible([&] { bridge_.attr(method)(logs_of(args)...); });
  }

  nb::object bridge_;
  bool wants_batch_logs_ = false;
  bool narrate_ = true;
  bool wants_batch_begin_ = false;
  bool wants_test_batches_ = false;
  bool interrupted_ = false;
};

// The batches of enhanced.stream.Stream (a generator or a tf.data.Dataset read batch by batch): its
// next_image(new_pass) returns the next batch's .ebin image (a bytearray), or None at the end of the
// data, called with the GIL taken from the training thread. The bytes are held (and viewed by
// the run, not copied) until the next call; its exceptions (a bad batch, the generator's own) end
// the run as errors, unchanged, but a Ctrl-C or SIGTERM raised while it waits for the batch (in
// the user's generator, or waiting for the reading thread) is an interrupt: the run saves the
// step reached, and fit raises it after the save. A validation's stream (deferring: fit's bridge)
// is read with the bridge's defer_signals set: fit's signal handler then records the signal
// instead of raising it, the validation completes whole, and the run's next poll interrupts it
// (fit_hooks.first_signal_decides); a KeyboardInterrupt raised all the same (a handler of the
// user's) ends the run as an error does.
class PythonBatchImages final : public BatchImages {
 public:
  explicit PythonBatchImages(nb::object stream, nb::object deferring = nb::none())
      : stream_(std::move(stream)), deferring_(std::move(deferring)) {}
  ~PythonBatchImages() override {
    PythonCall gil;
    current_.reset();
  }

  std::span<const uint8_t> next_image(bool new_pass) override {
    PythonCall gil;
    current_ = nb::none();  // the batch before is released here, under the GIL
    const bool defers = !deferring_.is_none();
    if (defers) nb::setattr(deferring_, "defer_signals", nb::bool_(true));
    try {
      current_ = stream_.attr("next_image")(new_pass);
    } catch (nb::python_error& e) {
      if (defers) nb::setattr(deferring_, "defer_signals", nb::bool_(false));
      if (defers || !e.matches(PyExc_KeyboardInterrupt)) throw;  // SIGTERM's fit_hooks.Terminated is one
      interrupted_ = true;
      return {};
    }
    if (defers) nb::setattr(deferring_, "defer_signals", nb::bool_(false));
    if (current_.is_none()) return {};
    if (!PyByteArray_Check(current_.ptr())) fail("the stream's next_image returned no bytearray");
    return {reinterpret_cast<const uint8_t*>(PyByteArray_AS_STRING(current_.ptr())),
            static_cast<size_t>(PyByteArray_GET_SIZE(current_.ptr()))};
  }
  bool interrupted() const override { return interrupted_; }

 private:
  nb::object stream_;
  nb::object deferring_;
  nb::object current_;
  bool interrupted_ = false;
};

// Parses enhanced-train's flags from `words` with the app's parser; a bad word is a ValueError
// with CLI11's message.
// The data set's name stands for --data (run_training records it).
TrainFlags parse_train_flags(const std::vector<std::string>& words, const std::string& data_name) {
  CLI::App app{"enhanced.Model.fit"};
  TrainFlags flags;
  add_train_flags(app, flags);
  flags.options.data_path = data_name;
  std::vector<std::string> reversed(words.rbegin(), words.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    fail("fit: ", e.what());
  }
  finish_train_flags(app, flags);
  return flags;
}

// The labels' names and the class weights given as values (fit's label_names and a class_weight
// dict or list), as --label-names and --class-weights give them: recorded by the run, and a
// resume given others refuses them.
void set_label_names_and_class_weights(TrainOptions& o, const std::vector<std::string>& label_names,
                                       const std::vector<float>& class_weights) {
  if (!label_names.empty()) {
    check_label_names(label_names, "label_names");
    o.label_names = label_names;
    o.given_flags.insert("--label-names");
  }
  if (!class_weights.empty()) {
    if (!o.class_weights.empty()) fail("fit: class_weight is given twice");
    o.class_weight_values = class_weights;
  }
}

}  // namespace

void bind_training_access(nb::module_& m) {
  nb::class_<TrainingAccess>(m, "TrainingAccess",
                             "The running fit's parameters and rate (training_observer.h), valid in its callbacks")
      .def("read_parameters",
           [](TrainingAccess& access) {
             auto* values = new std::vector<float>();
             nb::capsule owner(values, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
             access.read_parameters(*values);
             const size_t shape[1] = {values->size()};
             return nb::ndarray<nb::numpy, float, nb::ndim<1>>(values->data(), 1, shape, owner);
           })
      .def("write_parameters",
           [](TrainingAccess& access, nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu> values) {
             access.write_parameters(std::vector<float>(values.data(), values.data() + values.shape(0)));
           })
      .def("learning_rate", &TrainingAccess::learning_rate)
      .def("set_learning_rate", &TrainingAccess::set_learning_rate)
      .def("steps", &TrainingAccess::steps);
}

std::vector<std::string> train_flag_names(bool switches_only) {
  CLI::App app{"enhanced.Model.fit"};
  TrainFlags flags;
  add_train_flags(app, flags);
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options())
    if (!option->get_lnames().empty() && (!switches_only || option->get_expected_max() == 0))
      names.push_back(option->get_lnames().front());
  return names;
}

int train(const std::vector<std::string>& words, nb::object train_data, const std::string& train_name,
          nb::object valid_data, const std::string& valid_name, nb::object bridge,
          const std::vector<std::string>& label_names, const std::vector<float>& class_weights) {
  TrainFlags flags = parse_train_flags(words, train_name);
  set_label_names_and_class_weights(flags.options, label_names, class_weights);
  flags.options.handle_signals = false;  // Python owns SIGINT: Ctrl-C reaches the run through poll
  flags.options.progress = false;        // the bridge shows progress (verbose)
  flags.options.engine = resolve_engine_flags(flags.engine, false);
  // In-memory bytes are viewed where Python holds them (train_data lives through the call): one copy.
  // A validation stream (enhanced.stream.Stream) is read a pass each validation, never held whole.
  PythonObserver observer(bridge);
  flags.options.narrate = observer.narrate();
  std::optional<Dataset> valid_set;
  std::optional<PythonBatchImages> valid_images;
  std::optional<StreamedBatches> valid_stream;
  ValidationData valid;
  if (nb::hasattr(valid_data, "next_image")) {
    valid_images.emplace(valid_data, bridge);
    const StreamShape shape{nb::cast<int>(valid_data.attr("seq_len")), nb::cast<int64_t>(valid_data.attr("vocab_size")),
                            nb::cast<int>(valid_data.attr("num_labels")), nb::cast<int>(valid_data.attr("batch_size"))};
    valid = {&valid_stream.emplace(*valid_images, shape, nb::cast<int64_t>(valid_data.attr("steps_per_epoch")),
                                   nb::cast<std::string>(valid_data.attr("name")), true),
             valid_name};
  } else if (!valid_data.is_none()) {
    valid = &valid_set.emplace(open_dataset(valid_data, valid_name));
  }
  if (nb::hasattr(train_data, "next_image")) {
    PythonBatchImages images(train_data);
    const StreamShape shape{nb::cast<int>(train_data.attr("seq_len")), flags.options.vocab_size,
                            flags.options.num_labels, flags.options.batch_size};
    // Errors name the batches as the user holds them (x: batch 7); the run records train_name.
    StreamedBatches stream(images, shape, nb::cast<int64_t>(train_data.attr("steps_per_epoch")),
                           nb::cast<std::string>(train_data.attr("name")));
    EngineWork release;
    const int code = run_training(flags.options, stream, valid, &observer);
    return code == 0 && observer.interrupted() ? kInterruptedExit : code;
  }
  const Dataset train = open_dataset(train_data, train_name);
  EngineWork release;
  const int code = run_training(flags.options, train, valid, &observer);
  return code == 0 && observer.interrupted() ? kInterruptedExit : code;
}

}  // namespace enhanced::python
