#include "train/run_validation.h"

#include <cstdio>

#include "enhanced/evaluate.h"

namespace enhanced {

namespace {

// Keras's evaluate logs.
TrainingLogs test_logs(const EvalResult& result) {
  return {{"loss", result.loss}, {"accuracy", result.accuracy()}, {"f1", result.macro_f1()}};
}

}  // namespace

Validation validate_step(Engine& engine, BatchSource& valid, Communicator& communicator,
                         int64_t step, nlohmann::json& line, ProgressLine& progress, TrainingObserver* observer) {
  EvalHooks hooks;
  if (observer) {
    hooks.batch_begin = [observer](int64_t batch) { observer->on_test_batch_begin(batch); };
    hooks.batch_end = [observer](int64_t batch, const EvalResult& so_far) {
      observer->on_test_batch_end(batch, test_logs(so_far));
    };
    observer->on_test_begin();
  }
  const EvalResult result = evaluate(engine, valid, false, &communicator, observer ? &hooks : nullptr);
  if (observer) observer->on_test_end(test_logs(result));
  const Validation v{step, result.loss, result.accuracy(), result.macro_f1()};
  line["valid_loss"] = v.loss;
  line["valid_accuracy"] = v.accuracy;
  line["valid_f1"] = v.f1;
  char text[128];
  std::snprintf(text, sizeof text, "step %lld: valid loss %.4f  acc %.3f  f1 %.3f", static_cast<long long>(step),
                v.loss, v.accuracy, v.f1);
  progress.note(text);
  return v;
}

}  // namespace enhanced
