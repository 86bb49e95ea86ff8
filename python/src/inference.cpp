// enhanced._core's evaluation and prediction: a checkpoint run over a data set given in memory
// (an .ebin image, which python/enhanced/ebin.py builds) or as a path, with the engine the
// arguments choose, the GIL released while it runs.
#include "extension.h"

#include <cstring>

#include "enhanced/evaluate.h"
#include "enhanced/inference.h"

namespace enhanced::python {
namespace {

struct LoadedModel {
  Dataset data;
  ParameterBuffer<float> params;
};

LoadedModel load(const std::string& checkpoint, nb::object data, const std::string& name, bool labels_used) {
  LoadedModel out{open_dataset(data, name), {}};
  out.params = load_model_for_data(checkpoint, ModelFlags{}, out.data, labels_used);
  return out;
}

}  // namespace

nb::dict evaluate(const std::string& checkpoint, nb::object data, const std::string& name, int batch_size,
                  const EngineFlags& flags) {
  LoadedModel m = load(checkpoint, data, name, true);
  check_has_samples(m.data, "x");
  check_has_labels(m.data, "y");
  EvalResult r;
  {
    EngineWork release;
    const EngineChoice choice = resolve_engine_flags(flags, false);
    InferenceEngine engine = make_inference_engine(m.params, m.data, batch_size, choice);
    r = enhanced::evaluate(*engine.engine, m.data, engine.batch, false);
  }
  nb::dict out;
  out["loss"] = r.loss;
  out["accuracy"] = r.accuracy();
  out["macro_f1"] = r.macro_f1();
  out["samples"] = r.samples;
  return out;
}

nb::ndarray<nb::numpy, float, nb::ndim<2>> predict(const std::string& checkpoint, nb::object data,
                                                   const std::string& name, int batch_size, const EngineFlags& flags,
                                                   bool logits_wanted) {
  LoadedModel m = load(checkpoint, data, name, false);
  check_has_samples(m.data, "x");
  const size_t L = static_cast<size_t>(m.params.config.num_labels);
  auto* rows = new std::vector<float>(static_cast<size_t>(m.data.num_samples()) * L);
  nb::capsule owner(rows, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  {
    EngineWork release;
    const EngineChoice choice = resolve_engine_flags(flags, false);
    InferenceEngine engine = make_inference_engine(m.params, m.data, batch_size, choice);
    size_t row = 0;
    run_inference(
        *engine.engine, m.data, engine.batch,
        [&](const Batch& batch, double, const float* logits, const float* probabilities) {
          std::memcpy(rows->data() + row * L, logits_wanted ? logits : probabilities,
                      static_cast<size_t>(batch.size) * L * sizeof(float));
          row += static_cast<size_t>(batch.size);
        },
        nullptr, false);
  }
  const size_t shape[2] = {static_cast<size_t>(m.data.num_samples()), L};
  return nb::ndarray<nb::numpy, float, nb::ndim<2>>(rows->data(), 2, shape, owner);
}

}  // namespace enhanced::python
