// enhanced-eval: loss, accuracy, macro-F1, per-label table and confusion matrix of a checkpoint
// on a held-out .ebin set; optionally every prediction as CSV.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "app.h"
#include "enhanced/atomic_file.h"
#include "enhanced/checkpoint.h"
#include "enhanced/engine.h"
#include "enhanced/evaluate.h"
#include "enhanced/inference.h"
#include "enhanced/label_names.h"

namespace {

using namespace enhanced;

// Characters (UTF-8 code points) of a name: what a terminal's columns count, near enough.
size_t characters(const std::string& text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// A label's name padded to `width` characters ("" without names).
std::string name_column(const std::vector<std::string>& names, int label, size_t width) {
  if (names.empty()) return "";
  const std::string& name = names[static_cast<size_t>(label)];
  return " " + name + std::string(width - std::min(width, characters(name)), ' ');
}

// The tables; with label names, each label's row shows its name after its number.
void print_report(const EvalResult& r, const std::string& data, const std::string& checkpoint,
                  const std::vector<std::string>& names) {
  std::printf("checkpoint  %s\ndata        %s\nsamples     %lld\nloss        %.6f\naccuracy    %.4f\nmacro-F1    %.4f\n\n",
              checkpoint.c_str(), data.c_str(), static_cast<long long>(r.samples), r.loss, r.accuracy(), r.macro_f1());
  size_t width = 4;  // "name"
  for (const std::string& name : names) width = std::max(width, characters(name));
  const std::string name_header = names.empty() ? "" : " name" + std::string(width - 4, ' ');
  std::printf("%6s%s %9s %9s %9s %9s\n", "label", name_header.c_str(), "support", "precision", "recall", "F1");
  for (int l = 0; l < r.num_labels; ++l) {
    int64_t support = 0;
    for (int p = 0; p < r.num_labels; ++p) support += r.confusion[static_cast<size_t>(l) * r.num_labels + p];
    std::printf("%6d%s %9lld %9.4f %9.4f %9.4f\n", l, name_column(names, l, width).c_str(),
                static_cast<long long>(support), r.precision(l), r.recall(l), r.f1(l));
  }
  if (r.num_labels > 20) {
    std::printf("\n(confusion matrix omitted for %d labels; use --json)\n", r.num_labels);
    return;
  }
  const std::string names_pad = names.empty() ? "" : std::string(width + 1, ' ');  // over the rows' names
  std::printf("\nconfusion (rows: true label, columns: predicted)\n%6s%s", "", names_pad.c_str());
  for (int p = 0; p < r.num_labels; ++p) std::printf(" %6d", p);
  std::printf("\n");
  for (int t = 0; t < r.num_labels; ++t) {
    std::printf("%6d%s", t, name_column(names, t, width).c_str());
    for (int p = 0; p < r.num_labels; ++p)
      std::printf(" %6lld", static_cast<long long>(r.confusion[static_cast<size_t>(t) * r.num_labels + p]));
    std::printf("\n");
  }
}

// With label names: "name" in each label's entry, and "label_names" (the list, in label order).
nlohmann::json report_json(const EvalResult& r, const std::vector<std::string>& names) {
  nlohmann::json labels = nlohmann::json::array();
  for (int l = 0; l < r.num_labels; ++l) {
    labels.push_back({{"label", l}, {"precision", r.precision(l)}, {"recall", r.recall(l)}, {"f1", r.f1(l)}});
    if (!names.empty()) labels.back()["name"] = names[static_cast<size_t>(l)];
  }
  nlohmann::json confusion = nlohmann::json::array();
  for (int t = 0; t < r.num_labels; ++t)
    confusion.push_back(std::vector<int64_t>(r.confusion.begin() + static_cast<std::ptrdiff_t>(t) * r.num_labels,
                                             r.confusion.begin() + static_cast<std::ptrdiff_t>(t + 1) * r.num_labels));
  nlohmann::json out{{"samples", r.samples}, {"loss", r.loss}, {"accuracy", r.accuracy()}, {"macro_f1", r.macro_f1()},
                     {"labels", labels}, {"confusion", confusion}};
  if (!names.empty()) out["label_names"] = names;
  return out;
}

// With label names, two more columns at the end (the first four as without): label_name, predicted_name.
void write_predictions(const std::string& path, const EvalResult& r, const std::vector<std::string>& names) {
  std::string text = names.empty() ? "sample,label,predicted,probability\n"
                                   : "sample,label,predicted,probability,label_name,predicted_name\n";
  char line[96];
  for (const Prediction& p : r.predictions) {
    std::snprintf(line, sizeof line, "%lld,%d,%d,%.6f", static_cast<long long>(p.sample), p.label, p.predicted,
                  static_cast<double>(p.probability));
    text += line;
    for (const int32_t label : {p.label, p.predicted}) {
      if (names.empty()) break;
      text += ',';
      text += csv_field(names[static_cast<size_t>(label)]);
    }
    text += '\n';
  }
  remove_stale_temp_files_beside(path);  // what a killed eval left there
  write_file_atomically(path, {{text.data(), text.size()}});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Evaluate a checkpoint on a held-out .ebin set"};
  std::string data, checkpoint, predictions;
  int batch_size = 64;
  bool json = false;
  app.add_option("--data", data, "Held-out set (.ebin)")->required();
  app.add_option("--checkpoint", checkpoint,
                 "Checkpoint (.safetensors from enhanced-train, or a bare state_dict: see --blend, --pool)")
      ->required();
  app.add_option("--predictions", predictions, "Write sample,label,predicted,probability rows to this CSV");
  app.add_flag("--json", json, "Print one JSON object instead of tables");
  app.add_option("--batch-size", batch_size, "Samples per batch")->capture_default_str()->check(at_least(1));
  EngineFlags engine_flags;
  add_engine_flags(app, engine_flags);
  ModelFlags model_flags;
  add_model_flags(app, model_flags);
  return run_app(app, argc, argv, [&] {
    check_outputs_spare_inputs({{"--predictions", predictions}}, {{"--data", data}, {"--checkpoint", checkpoint}});
    if (!predictions.empty()) check_output_directory(predictions);
    const EngineChoice engine = resolve_engine_flags(engine_flags, !json);
    const Dataset dataset = Dataset::open(data);
    check_has_samples(dataset, "--data");
    check_has_labels(dataset, "--data", "enhanced-predict gives an unlabeled set's predictions");
    std::vector<std::string> names;
    ParameterBuffer<float> params = load_model_for_data(checkpoint, model_flags, dataset, true, &names);
    const InferenceEngine inference = make_inference_engine(params, dataset, batch_size, engine);
    if (!json) std::fprintf(stderr, "engine: %s\n", inference.engine->summary().c_str());
    const EvalResult result = evaluate(*inference.engine, dataset, inference.batch, !predictions.empty());
    if (!predictions.empty()) write_predictions(predictions, result, names);
    if (json) std::printf("%s\n", report_json(result, names).dump(2).c_str());
    else print_report(result, data, checkpoint, names);
    return 0;
  });
}
