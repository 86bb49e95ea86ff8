#include "enhanced/predict.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <nlohmann/json.hpp>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "enhanced/atomic_file.h"
#include "enhanced/common.h"
#include "enhanced/engine.h"
#include "enhanced/evaluate.h"
#include "enhanced/label_names.h"
#include "enhanced/npy.h"
#include "enhanced/progress.h"

namespace enhanced {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Text to a temporary file (committed by the caller) or to stdout.
class TextSink {
 public:
  TextSink(TempFiles& temps, const std::string& path) : path_(path) {
    if (!path.empty()) file_ = std::make_unique<FileWriter>(temps.add(temp_name(path)));
  }
  void write(const std::string& text) {
    if (file_) file_->write(text.data(), text.size());
    else if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) fail("stdout: write failed");
  }
  void finish() {
    if (file_) file_->close();
    else if (std::fflush(stdout) != 0) fail("stdout: write failed");
  }
  void commit() {
    if (file_) commit_file(file_->path(), path_);
  }

 private:
  std::string path_;
  std::unique_ptr<FileWriter> file_;
};

// One sample's top-k as a CSV row or a JSON line. Probabilities with 9 significant digits: a
// float32 reads back exactly.
// With label names, the labels' names follow: CSV columns name_1..name_k after the others, a
// "names" list in JSON.
void append_top_k(std::string& out, PredictionFormat format, int64_t sample, const int* labels, const float* probs, int k,
                  const std::vector<std::string>& names) {
  char number[32];
  if (format == PredictionFormat::csv) {
    out += std::to_string(sample);
    for (int i = 0; i < k; ++i) {
      std::snprintf(number, sizeof number, ",%d,%.9g", labels[i], static_cast<double>(probs[labels[i]]));
      out += number;
    }
    if (!names.empty())
      for (int i = 0; i < k; ++i) {
        out += ',';
        out += csv_field(names[static_cast<size_t>(labels[i])]);
      }
    out += '\n';
    return;
  }
  out += "{\"sample\": ";
  out += std::to_string(sample);
  out += ", \"labels\": [";
  for (int i = 0; i < k; ++i) {
    if (i) out += ", ";
    out += std::to_string(labels[i]);
  }
  out += "], \"probabilities\": [";
  for (int i = 0; i < k; ++i) {
    std::snprintf(number, sizeof number, "%s%.9g", i ? ", " : "", static_cast<double>(probs[labels[i]]));
    out += number;
  }
  out += "]";
  if (!names.empty()) {
    out += ", \"names\": [";
    for (int i = 0; i < k; ++i) {
      if (i) out += ", ";
      out += nlohmann::json(names[static_cast<size_t>(labels[i])]).dump();
    }
    out += "]";
  }
  out += "}\n";
}

std::string csv_header(int k, bool named) {
  std::string header = "sample";
  for (int i = 1; i <= k; ++i) header += cat(",label_", i, ",probability_", i);
  if (named)
    for (int i = 1; i <= k; ++i) header += cat(",name_", i);
  return header + "\n";
}

// An .npy (N, L) float32 file filled row by row.
std::unique_ptr<FileWriter> open_npy(TempFiles& temps, const std::string& path, int64_t rows, int cols) {
  if (path.empty()) return nullptr;
  auto out = std::make_unique<FileWriter>(temps.add(temp_name(path)));
  const std::string header = npy_float32_header({rows, cols});
  out->write(header.data(), header.size());
  return out;
}

std::string progress_text(int64_t done, int64_t total, double seconds) {
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  char text[160];
  std::snprintf(text, sizeof text, "predict: %lld/%lld samples  %.0f samples/s  ETA %s", static_cast<long long>(done),
                static_cast<long long>(total), rate,
                duration_text(rate > 0 ? static_cast<double>(total - done) / rate : -1).c_str());
  return text;
}

}  // namespace

PredictionFormat prediction_format(const std::string& out_path) {
  if (out_path.empty() || ends_with(out_path, ".csv")) return PredictionFormat::csv;
  if (ends_with(out_path, ".jsonl") || ends_with(out_path, ".json")) return PredictionFormat::json_lines;
  fail(out_path, ": unknown prediction format: --out takes .csv (CSV) or .jsonl / .json (JSON Lines)");
}

void check_predict_outputs(const PredictOutputs& outputs, const std::vector<NamedFile>& inputs) {
  prediction_format(outputs.top_k);
  const std::vector<NamedFile> named{
      {"--out", outputs.top_k}, {"--logits", outputs.logits}, {"--probabilities", outputs.probabilities}};
  for (size_t i = 1; i < named.size(); ++i)
    if (!named[i].path.empty() && !ends_with(named[i].path, ".npy"))
      fail(named[i].path, ": ", named[i].flag, " writes NumPy .npy: name the file *.npy");
  check_outputs_spare_inputs(named, inputs);
  for (const NamedFile& output : named)
    if (!output.path.empty()) check_output_directory(output.path);
}

PredictStats predict(Engine& engine, const Dataset& dataset, int batch_size, int top_k, const PredictOutputs& outputs,
                     bool progress, const std::vector<std::string>& label_names) {
  const int L = engine.config().num_labels;
  if (top_k < 1 || top_k > L) fail("--top-k ", top_k, " must be in 1..", L, " (the model's labels)");
  check_predict_outputs(outputs, {{"--data", dataset.path()}});
  const PredictionFormat format = prediction_format(outputs.top_k);
  for (const std::string* path : {&outputs.top_k, &outputs.logits, &outputs.probabilities})
    if (!path->empty()) remove_stale_temp_files_beside(*path);  // what a killed predict left there
  TempFiles temps;
  TextSink top(temps, outputs.top_k);
  const int64_t n = dataset.num_samples();
  std::unique_ptr<FileWriter> logits = open_npy(temps, outputs.logits, n, L);
  std::unique_ptr<FileWriter> probabilities = open_npy(temps, outputs.probabilities, n, L);
  if (format == PredictionFormat::csv) top.write(csv_header(top_k, !label_names.empty()));
  ProgressLine line(progress, 1.0);
  std::vector<int> order(static_cast<size_t>(L));
  std::string text;
  int64_t done = 0;
  run_inference(engine, dataset, batch_size, [&](const Batch& batch, double, const float* z, const float* p) {
    const size_t values = static_cast<size_t>(batch.size) * L;
    if (logits) logits->write(z, values * sizeof(float));
    if (probabilities) probabilities->write(p, values * sizeof(float));
    text.clear();
    for (int b = 0; b < batch.size; ++b) {
      const float* row = p + static_cast<size_t>(b) * L;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                        [&](int x, int y) { return row[x] > row[y] || (row[x] == row[y] && x < y); });
      append_top_k(text, format, batch.sample_indices[b], order.data(), row, top_k, label_names);
    }
    top.write(text);
    done += batch.size;
    line.show(progress_text(done, n, line.elapsed_seconds()));
  }, nullptr, /*labels_used=*/false);  // labels, if any, are ignored (docs/cli.md): any value is harmless
  line.show(progress_text(done, n, line.elapsed_seconds()), true);
  line.finish();
  top.finish();
  for (FileWriter* npy : {logits.get(), probabilities.get()})
    if (npy) npy->close();
  top.commit();
  if (logits) commit_file(logits->path(), outputs.logits);
  if (probabilities) commit_file(probabilities->path(), outputs.probabilities);
  temps.remove_all();
  return PredictStats{done, line.elapsed_seconds()};
}

}  // namespace enhanced
