// enhanced-predict: a checkpoint's predictions for every sample of a set (.ebin or JSON Lines,
// labeled or not): the top-k labels with their probabilities as CSV or JSON Lines, and
// optionally the full logits and probabilities as .npy (docs/cli.md "enhanced-predict").
#include <filesystem>

#include "app.h"
#include "enhanced/atomic_file.h"
#include "enhanced/evaluate.h"
#include "enhanced/inference.h"
#include "enhanced/jsonl.h"
#include "enhanced/predict.h"
#include "enhanced/progress.h"

namespace {

using namespace enhanced;

bool is_jsonl(const std::string& path) {
  return path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
}

// The set as a .ebin: the file itself, or (JSON Lines) its conversion into a temporary under
// the system's temporary directory, removed on exit.
std::string ebin_of(const std::string& data, TempFiles& temps) {
  if (!is_jsonl(data)) return data;
  const std::filesystem::path name = std::filesystem::path(data).filename();
  const std::string ebin =
      temps.add(temp_name((std::filesystem::temp_directory_path() / ("enhanced-predict." + name.string() + ".ebin")).string()));
  convert_jsonl_to_ebin(data, ebin, 0);
  return ebin;
}

}  // namespace

int main(int argc, char** argv) {
  remove_temp_files_on_signal();  // a run ended by SIGTERM or SIGINT leaves no temporaries
  CLI::App app{"Predict labels for every sample of a set (.ebin or .jsonl, labeled or unlabeled)"};
  std::string data, checkpoint;
  PredictOutputs outputs;
  int batch_size = 64, top_k = 1;
  bool quiet = false;
  app.add_option("--checkpoint", checkpoint,
                 "Checkpoint (.safetensors from enhanced-train, or a bare state_dict: see --blend, --pool)")
      ->required();
  app.add_option("--data", data, "Samples (.ebin, or .jsonl read directly; labels, if any, are ignored)")->required();
  app.add_option("--out", outputs.top_k, "Top-k file: .csv (CSV) or .jsonl/.json (JSON Lines); default: CSV on stdout");
  app.add_option("--top-k", top_k, "Labels per sample, most probable first")->capture_default_str()->check(at_least(1));
  app.add_option("--logits", outputs.logits, "Write every logit as .npy (N, L) float32");
  app.add_option("--probabilities", outputs.probabilities, "Write every softmax probability as .npy (N, L) float32");
  app.add_option("--batch-size", batch_size, "Samples per batch")->capture_default_str()->check(at_least(1));
  EngineFlags engine_flags;
  add_engine_flags(app, engine_flags);
  ModelFlags model_flags;
  add_model_flags(app, model_flags);
  app.add_flag("--quiet", quiet, "No engine line and no progress line on stderr");
  return run_app(app, argc, argv, [&] {
    check_predict_outputs(outputs, {{"--data", data}, {"--checkpoint", checkpoint}});  // before any work
    const EngineChoice engine = resolve_engine_flags(engine_flags, !quiet);
    TempFiles temps;
    const Dataset dataset = Dataset::open(ebin_of(data, temps), data);
    check_has_samples(dataset, "--data");
    std::vector<std::string> names;
    ParameterBuffer<float> params = load_model_for_data(checkpoint, model_flags, dataset, false, &names);
    if (top_k > params.config.num_labels)
      fail("--top-k ", top_k, " is more than ", checkpoint, "'s ", params.config.num_labels, " labels");
    const InferenceEngine inference = make_inference_engine(params, dataset, batch_size, engine);
    if (!quiet) std::fprintf(stderr, "engine: %s\n", inference.engine->summary().c_str());
    const PredictStats stats = predict(*inference.engine, dataset, inference.batch, top_k, outputs, !quiet, names);
    if (!quiet)
      std::fprintf(stderr, "%lld samples in %s\n", static_cast<long long>(stats.samples),
                   duration_text(stats.seconds).c_str());
    return 0;
  });
}
