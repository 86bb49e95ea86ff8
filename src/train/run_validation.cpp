#include "train/run_validation.h"

#include <cstdio>

#include "enhanced/evaluate.h"

namespace enhanced {

Validation validate_step(Engine& engine, const Dataset& valid, int batch_size, Communicator& communicator,
                         int64_t step, nlohmann::json& line, ProgressLine& progress) {
  const EvalResult result = evaluate(engine, valid, batch_size, false, &communicator);
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
