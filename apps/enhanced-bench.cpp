// enhanced-bench: times the training step, the inference step and each part alone on synthetic
// data of the given shapes; reports min/median/max, samples/s, FLOPs, the machine's own
// measured GEMM rate with the same BLAS and threads, and on the CPU each part's roofline against
// the CPU's measured ceilings (bench_roofline.h).
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <climits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>
#include <unistd.h>

#include "app.h"
#include "bench_roofline.h"
#include "enhanced/checkpoint.h"
#include "enhanced/cpu.h"
#include "enhanced/engine.h"
#include "enhanced/jsonl.h"
#include "enhanced/loader.h"
#include "enhanced/memory.h"
#include "enhanced/predict.h"
#include "enhanced/random.h"

namespace {

using namespace enhanced;
using Clock = std::chrono::steady_clock;

struct Timing {
  std::string name;
  std::vector<double> seconds;
  double min() const { return *std::min_element(seconds.begin(), seconds.end()); }
  double max() const { return *std::max_element(seconds.begin(), seconds.end()); }
  double median() const {
    std::vector<double> sorted = seconds;
    std::sort(sorted.begin(), sorted.end());
    return sorted[sorted.size() / 2];
  }
};

Timing time_it(const std::string& name, int warmup, int repeats, const std::function<void()>& body) {
  for (int i = 0; i < warmup; ++i) body();
  Timing timing{name, {}};
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    body();
    timing.seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return timing;
}

struct Shapes {
  int batch = 64, seq_len = 400, dim = 32, hidden = 128, labels = 104;
  int64_t vocab = 50000;
  double empty_probability = 0.3;
  int max_identifier = 5;
  double zipf = 0;  // 0: token ids uniform over V; s > 0: P(rank k) ~ 1 / k^s, as in real text
};

// Token ids, uniform or Zipf-distributed (inverse CDF over the V ranks).
class TokenSampler {
 public:
  explicit TokenSampler(const Shapes& s) : vocab_(s.vocab) {
    if (s.zipf <= 0) return;
    cdf_.resize(static_cast<size_t>(s.vocab));
    double total = 0;
    for (int64_t k = 0; k < s.vocab; ++k) cdf_[static_cast<size_t>(k)] = total += std::pow(static_cast<double>(k + 1), -s.zipf);
    for (double& c : cdf_) c /= total;
  }
  int32_t operator()(Random& random) const {
    if (cdf_.empty()) return static_cast<int32_t>(random.below(static_cast<uint64_t>(vocab_)));
    const auto at = std::lower_bound(cdf_.begin(), cdf_.end(), random.uniform());
    return static_cast<int32_t>(std::min<int64_t>(at - cdf_.begin(), vocab_ - 1));
  }

 private:
  int64_t vocab_;
  std::vector<double> cdf_;
};

// A synthetic batch: identifiers empty with the given probability, else uniform 1..max ids.
Batch synthetic_batch(const Shapes& s, uint64_t seed) {
  Random random(seed);
  const TokenSampler token(s);
  Batch batch;
  batch.size = s.batch;
  batch.seq_len = s.seq_len;
  batch.identifier_offsets.push_back(0);
  for (int p = 0; p < s.batch * s.seq_len; ++p) {
    const int count = random.uniform() < s.empty_probability ? 0 : 1 + static_cast<int>(random.below(s.max_identifier));
    for (int j = 0; j < count; ++j) batch.identifier_ids.push_back(token(random));
    batch.identifier_offsets.push_back(static_cast<int32_t>(batch.identifier_ids.size()));
    batch.cur_word_ids.push_back(token(random));
  }
  for (int b = 0; b < s.batch; ++b) {
    batch.labels.push_back(static_cast<int32_t>(random.below(s.labels)));
    batch.sample_indices.push_back(b);
  }
  return batch;
}

// GFLOP of one training step (forward + backward); the optimizer and pointwise work are not counted.
double train_gflop(const Shapes& s, const ModelConfig& c) {
  const double P = static_cast<double>(s.batch) * s.seq_len, H = s.hidden, D = s.dim;
  const double lstm_forward = 2 * P * 8 * H * (D + H);
  const double dense_forward = 2.0 * s.batch * c.pooled_features() * s.labels;
  return 3 * (lstm_forward + dense_forward) / 1e9;
}

double forward_gflop(const Shapes& s, const ModelConfig& c) { return train_gflop(s, c) / 3; }

// A set of 4 batches of the shapes, written as JSON Lines and converted, in a temporary
// directory removed with it: what the loader and the prediction path are timed on.
class BenchSet {
 public:
  explicit BenchSet(const Shapes& s)
      : dir_(std::filesystem::temp_directory_path() / ("enhanced-bench." + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir_);
    write_jsonl(s, 4 * s.batch);
    convert_jsonl_to_ebin((dir_ / "bench.jsonl").string(), (dir_ / "bench.ebin").string(), s.seq_len);
    dataset_ = Dataset::open((dir_ / "bench.ebin").string());
  }
  ~BenchSet() {
    dataset_ = Dataset();
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
  }
  BenchSet(const BenchSet&) = delete;
  BenchSet& operator=(const BenchSet&) = delete;
  const Dataset& dataset() const { return dataset_; }
  std::string path(const char* name) const { return (dir_ / name).string(); }

 private:
  void write_jsonl(const Shapes& s, int samples) const {
    std::ofstream out(dir_ / "bench.jsonl");
    Random random(7);
    for (int i = 0; i < samples; ++i) {
      out << "{\"label\":" << random.below(s.labels) << ",\"tokens\":[";
      for (int t = 0; t < s.seq_len; ++t) {
        out << (t ? ",[[" : "[[");
        const int count = random.uniform() < s.empty_probability ? 0 : 1 + static_cast<int>(random.below(s.max_identifier));
        for (int j = 0; j < count; ++j) out << (j ? "," : "") << random.below(s.vocab);
        out << "],[],[" << random.below(s.vocab) << "]]";
      }
      out << "]}\n";
    }
  }

  std::filesystem::path dir_;
  Dataset dataset_;
};

double loader_samples_per_second(const Shapes& s, const BenchSet& set, int repeats) {
  LoaderOptions options;
  options.batch_size = s.batch;
  options.prefetch = false;  // one core: the consumer thread does all the work
  BatchLoader loader(set.dataset(), options);
  int64_t epoch = 0;
  const Timing t = time_it("loader", 1, repeats, [&] {
    loader.start_epoch(epoch++);
    while (loader.next()) {
    }
  });
  return static_cast<double>(set.dataset().num_samples()) / t.median();
}

// Seconds per sample of enhanced-predict's path on the set: the prefetching loader feeding the
// engine's forward pass, softmax, top-1 and the CSV file written and renamed into place.
double predict_seconds_per_sample(Engine& engine, const Shapes& s, const BenchSet& set, int repeats) {
  const PredictOutputs outputs{set.path("predictions.csv"), "", ""};
  const Timing t = time_it("predict", 1, repeats, [&] { predict(engine, set.dataset(), s.batch, 1, outputs, false); });
  return t.median() / static_cast<double>(set.dataset().num_samples());
}

// What the command line asked for.
struct BenchOptions {
  Shapes shapes;
  std::string optimizer = "adam", dump_case, blend = "mean", pool = "feature";
  int warmup = 2, repeats = 7;
  bool json = false, lazy = false, skip_loader = false, skip_unavailable = false;
  EngineFlags engine;
};

void add_options(CLI::App& app, BenchOptions& o) {
  Shapes& s = o.shapes;
  app.add_option("--batch-size,-B", s.batch, "B")->capture_default_str()->check(at_least(1));
  app.add_option("--seq-len,-T", s.seq_len, "T")->capture_default_str()->check(at_least(1));
  app.add_option("--embedding-dim,-D", s.dim, "D")->capture_default_str()->check(in_range(1, kMaxModelWidth));
  app.add_option("--hidden,-H", s.hidden, "H")->capture_default_str()->check(in_range(1, kMaxModelWidth));
  app.add_option("--vocab-size,-V", s.vocab, "V")->capture_default_str()->check(at_least(int64_t{1}));
  app.add_option("--num-labels,-L", s.labels, "L")->capture_default_str()->check(in_range(1, kMaxModelWidth));
  app.add_option("--empty-probability", s.empty_probability, "P(identifier empty)")->capture_default_str()->check(in_range(0.0, 1.0));
  app.add_option("--max-identifier", s.max_identifier, "Identifier length uniform in 1..this")
      ->capture_default_str()
      ->check(at_least(1));
  app.add_option("--zipf", s.zipf, "Token ids Zipf-distributed with this exponent (0: uniform); ~1 is like text")
      ->capture_default_str()
      ->check(at_least(0.0));
  app.add_option("--blend", o.blend, names_text(blend_modes()))->capture_default_str();
  app.add_option("--pool", o.pool, names_text(pool_modes()))->capture_default_str();
  app.add_option("--optimizer", o.optimizer, optimizer_names_text())->capture_default_str();
  app.add_flag("--lazy-embedding-updates", o.lazy, "Lazy embedding updates");
  o.engine.device = "cpu";  // --device auto is refused (run_bench)
  add_engine_flags(app, o.engine, names_text(devices()));
  app.add_option("--warmup", o.warmup, "Untimed runs first")->capture_default_str()->check(at_least(0));
  app.add_option("--repeats", o.repeats, "Timed runs")->capture_default_str()->check(at_least(1));
  app.add_flag("--no-loader", o.skip_loader, "Skip the loader and prediction measurements");
  app.add_flag("--json", o.json, "Print one JSON object");
  app.add_flag("--skip-unavailable", o.skip_unavailable,
               "Exit 77 (CTest's skip) with the reason when the device cannot be used, instead of failing");
  app.add_option("--dump-case", o.dump_case,
                 "Write the initial weights and the batch to this directory (checkpoint.safetensors, "
                 "batch.safetensors) so peers time the same function on the same data");
}

ModelConfig model_config(const BenchOptions& o) {
  // The synthetic batch's identifier offsets are int32, as a loaded batch's are.
  const Shapes& s = o.shapes;
  if (static_cast<int64_t>(s.batch) * s.seq_len * s.max_identifier > INT32_MAX)
    fail("-B ", s.batch, " x -T ", s.seq_len, " x --max-identifier ", s.max_identifier,
         " identifier ids do not fit a batch's int32 offsets");
  ModelConfig c;
  c.vocab_size = o.shapes.vocab;
  c.embedding_dim = o.shapes.dim;
  c.hidden = o.shapes.hidden;
  c.seq_len = o.shapes.seq_len;
  c.num_labels = o.shapes.labels;
  c.blend = parse_blend_mode(o.blend);
  c.pool = parse_pool_mode(o.pool);
  c.validate();
  return c;
}

OptimizerConfig optimizer_config(const BenchOptions& o) {
  OptimizerConfig oc;
  oc.kind = parse_optimizer_kind(o.optimizer);
  oc.learning_rate = optimizer_info(oc.kind).bench_learning_rate;
  oc.lazy_embedding = o.lazy;
  return oc;
}

// The engine's memory and the bench's own: its synthetic batch (ids, offsets, at most
// --max-identifier + 1 ids a position) and the Zipf table (one double per token id).
void check_bench_memory(const BenchOptions& o, const ModelConfig& c, const OptimizerConfig& optimizer, Device device) {
  const Shapes& s = o.shapes;
  MemoryEstimate need = estimate_memory(c, &optimizer, s.batch, device);
  need.other = static_cast<uint64_t>(s.batch) * s.seq_len * (s.max_identifier + 2) * sizeof(int32_t) +
               (s.zipf > 0 ? static_cast<uint64_t>(s.vocab) * sizeof(double) : 0);
  check_fits_memory(need, model_run_text(c, &optimizer, s.batch, device), available_memory());
}

// The training step as the trainer runs it: steps queued back to back, the totals read once per
// `queued` steps (one on an engine that runs each step when queued, 20 on one that queues them,
// so that graph replays and the pipeline are what is timed). Each sample is one step's share.
Timing time_train_step(Engine& engine, const Batch& batch, float learning_rate, int warmup, int repeats) {
  const int queued = engine.queues_steps() ? 20 : 1;
  Timing timing = time_it("train step", warmup, repeats, [&] {
    for (int i = 0; i < queued; ++i) engine.enqueue_train_step(batch, learning_rate);
    if (engine.collect().halted != Halt::none) fail("the benchmark's training diverged");
  });
  for (double& seconds : timing.seconds) seconds /= queued;
  return timing;
}

std::vector<Timing> time_engine(Engine& engine, const Batch& batch, const BenchOptions& o) {
  std::vector<Timing> timings;
  const float learning_rate = optimizer_config(o).learning_rate;
  timings.push_back(time_train_step(engine, batch, learning_rate, o.warmup, o.repeats));
  timings.push_back(time_it("inference step", o.warmup, o.repeats, [&] { engine.forward(batch, nullptr); }));
  if (engine.queues_steps())  // what a step costs when the host waits for each one
    timings.push_back(time_it("train step, sync", o.warmup, o.repeats, [&] {
      engine.enqueue_train_step(batch, learning_rate);
      engine.collect();
    }));
  for (const EnginePart& part : engine.parts(batch)) {
    if (part.prepare) part.prepare();
    if (!part.measured) {
      timings.push_back(time_it(part.name, o.warmup, o.repeats, part.run));
      continue;
    }
    Timing timing{part.name, {}};  // the share the part measures inside each run
    for (int i = 0; i < o.warmup + o.repeats; ++i) {
      part.run();
      const double seconds = part.measured();
      if (i >= o.warmup) timing.seconds.push_back(seconds);
    }
    timings.push_back(timing);
  }
  return timings;
}

struct Measured {
  std::vector<Timing> timings;
  double initial_loss = 0;
  double initial_max_abs_logit = 0;  // what a loss comparison's tolerance scales with (bench/peers.py)
  std::string summary;   // the engine's one line
  bool cpu = true;       // the CPU's sgemm rate is the yardstick for the CPU engine only
  int threads = 1;
  double loader_rate = 0;         // samples/s, one core (0: not measured)
  double predict_sample_s = 0;    // enhanced-predict's path, seconds a sample (0: not measured)
  double inference_sample_s() const { return timings[1].median() / static_cast<double>(batch); }
  int batch = 1;
  bench::StepShape step;  // what the roofline's cost model reads
};

// The cost model's view of the step (bench_roofline.h): the shapes, the batch's ids, what the
// optimizer updates.
bench::StepShape step_shape(const BenchOptions& o, const ModelConfig& c, const Batch& batch, size_t parameters,
                            const std::string& engine_summary) {
  bench::StepShape s{c, batch.size, 0, static_cast<int64_t>(parameters), static_cast<int64_t>(parameters),
                     o.optimizer == "adam", parse_precision(o.engine.precision), false};
  s.ids = static_cast<int64_t>(batch.identifier_ids.size() + batch.cur_word_ids.size());
  if (o.lazy) {  // the rows the batch touches, and every other parameter
    std::vector<int32_t> rows(batch.identifier_ids);
    rows.insert(rows.end(), batch.cur_word_ids.begin(), batch.cur_word_ids.end());
    std::sort(rows.begin(), rows.end());
    const auto unique = static_cast<int64_t>(std::unique(rows.begin(), rows.end()) - rows.begin());
    s.updated_parameters -= (c.vocab_size - unique) * c.embedding_dim;
  }
  s.amx = engine_summary.find("amx") != std::string::npos;
  return s;
}

std::vector<bench::RooflineRow> roofline_rows(const Measured& m, const CpuCeilings& ceilings) {
  std::vector<std::pair<std::string, double>> parts;
  for (const Timing& t : m.timings)
    if (t.name != "train step" && t.name != "inference step") parts.emplace_back(t.name, t.median());
  return bench::roofline(parts, m.step, ceilings);
}

void print_json(const Measured& m, const BenchOptions& o, const ModelConfig& c, double gemm_rate, double loader_rate,
                double peak_rss_mib, const CpuCeilings& ceilings) {
  const Shapes& s = o.shapes;
  const double train_flop = train_gflop(s, c), forward_flop = forward_gflop(s, c);
  nlohmann::json out{{"device", o.engine.device}, {"threads", m.threads}, {"blas", cpu_blas_name()},
                     {"shapes", {{"B", s.batch}, {"T", s.seq_len}, {"D", s.dim}, {"H", s.hidden}, {"V", s.vocab},
                                 {"L", s.labels}, {"empty_probability", s.empty_probability},
                                 {"max_identifier", s.max_identifier}, {"zipf", s.zipf}}},
                     {"blend", o.blend}, {"pool", o.pool}, {"optimizer", o.optimizer}, {"lazy_embedding", o.lazy},
                     {"precision", o.engine.precision}, {"cpu_avx512_bf16", cpu_bf16_support().avx512_bf16},
                     {"cpu_amx_bf16", cpu_bf16_support().amx_bf16},
                     {"initial_loss", m.initial_loss}, {"initial_max_abs_logit", m.initial_max_abs_logit}, {"train_gflop", train_flop}, {"forward_gflop", forward_flop},
                     {"train_gflops_achieved", train_flop / m.timings[0].median()},
                     {"forward_gflops_achieved", forward_flop / m.timings[1].median()}, {"gemm_gflops", gemm_rate},
                     {"loader_samples_per_s", loader_rate}, {"peak_rss_mib", peak_rss_mib},
                     {"predict_ms_per_sample", 1e3 * m.predict_sample_s},
                     {"inference_step_ms_per_sample", 1e3 * m.inference_sample_s()}};
  out["engine"] = m.summary;  // the device's line; on the CPU in bf16, the kernels it chose
  if (m.cpu) out["roofline"] = bench::roofline_json(roofline_rows(m, ceilings), m.step, ceilings);
  for (const Timing& t : m.timings)
    out["times"][t.name] = {{"min_s", t.min()}, {"median_s", t.median()}, {"max_s", t.max()},
                            {"samples_per_s", s.batch / t.median()}};
  std::printf("%s\n", out.dump(2).c_str());
}

void print_table(const Measured& m, const BenchOptions& o, const ModelConfig& c, double gemm_rate, double loader_rate,
                 double peak_rss_mib, const CpuCeilings& ceilings) {
  const Shapes& s = o.shapes;
  const double train_flop = train_gflop(s, c), forward_flop = forward_gflop(s, c);
  const double train_rate = train_flop / m.timings[0].median(), forward_rate = forward_flop / m.timings[1].median();
  if (m.cpu) std::printf("enhanced-bench: cpu, %d threads, %s\n", m.threads, cpu_blas_name().c_str());
  else std::printf("enhanced-bench: %s\n", m.summary.c_str());
  std::printf("B=%d T=%d D=%d H=%d V=%lld L=%d%s, %s%s, %d warm-up + %d timed runs\n\n", s.batch, s.seq_len, s.dim,
              s.hidden, static_cast<long long>(s.vocab), s.labels,
              s.zipf > 0 ? cat(", token ids Zipf(", s.zipf, ")").c_str() : "", o.optimizer.c_str(),
              o.lazy ? " (lazy embedding)" : "", o.warmup, o.repeats);
  std::printf("%-16s %10s %10s %10s %12s\n", "part", "min ms", "median ms", "max ms", "samples/s");
  for (const Timing& t : m.timings)
    std::printf("%-16s %10.2f %10.2f %10.2f %12.0f\n", t.name.c_str(), 1e3 * t.min(), 1e3 * t.median(), 1e3 * t.max(),
                s.batch / t.median());
  std::printf("\ntrain step: %.2f GFLOP, %.1f GFLOP/s; inference: %.2f GFLOP, %.1f GFLOP/s\n", train_flop, train_rate,
              forward_flop, forward_rate);
  if (m.cpu)
    std::printf("machine sgemm rate (same BLAS, %d threads): %.1f GFLOP/s -> train step at %.0f%% of it\n", m.threads,
                gemm_rate, 100 * train_rate / gemm_rate);
  if (!o.skip_loader) {
    std::printf("loader (one core): %.0f samples/s = %.1fx what the train step consumes\n", loader_rate,
                loader_rate / (s.batch / m.timings[0].median()));
    std::printf("prediction (enhanced-predict's path, loader feeding, %lld samples): %.3f ms/sample; inference step "
                "%.3f ms/sample (prediction at %.2fx its time)\n",
                static_cast<long long>(4 * s.batch), 1e3 * m.predict_sample_s, 1e3 * m.inference_sample_s(),
                m.predict_sample_s / m.inference_sample_s());
  }
  std::printf("peak RSS: %.0f MiB\n", peak_rss_mib);
  if (m.cpu) bench::print_roofline(roofline_rows(m, ceilings), m.step, ceilings, m.threads);
}

// Prints the table (or JSON) for the timings taken on either device.
int report(const Measured& m, const BenchOptions& o, const ModelConfig& c) {
  const double gemm_rate = m.cpu ? cpu_gemm_gflops(m.threads, o.warmup, o.repeats * 3) : 0.0;
  const double loader_rate = m.loader_rate;
  configure_cpu_threads(m.threads);  // the GEMM-rate measurement gave BLAS the threads
  const CpuCeilings ceilings = m.cpu ? measure_cpu_ceilings(m.threads) : CpuCeilings{};
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
  if (o.json) print_json(m, o, c, gemm_rate, loader_rate, peak_rss_mib, ceilings);
  else print_table(m, o, c, gemm_rate, loader_rate, peak_rss_mib, ceilings);
  return 0;
}

int run_bench(BenchOptions& o) {
  if (o.engine.device == "auto") fail("--device must be cpu or cuda: a benchmark names what it measures");
  if (o.engine.device == "cuda" && o.skip_unavailable && !cuda_unavailable_reason().empty()) {
    cuda_options(o.engine);  // a bad CUDA flag is an error even where the GPU is skipped
    std::printf("skipped: %s\n", no_gpu_text(cuda_unavailable_reason()).c_str());
    return 77;
  }
  const EngineChoice chosen = resolve_engine_flags(o.engine, false);
  Measured m;
  m.threads = configure_cpu_threads(chosen.threads);
  m.cpu = chosen.device == Device::cpu;
  const ModelConfig c = model_config(o);
  const OptimizerConfig optimizer_settings = optimizer_config(o);
  check_bench_memory(o, c, optimizer_settings, chosen.device);
  ParameterBuffer<float> params(c);
  initialize_parameters(params, 1);
  OptimizerState optimizer(optimizer_settings, c);
  const Batch batch = synthetic_batch(o.shapes, 3);
  if (!o.dump_case.empty()) {
    std::filesystem::create_directories(o.dump_case);
    save_checkpoint(o.dump_case + "/checkpoint.safetensors", params);
    save_batch(o.dump_case + "/batch.safetensors", batch);
  }
  const std::unique_ptr<Engine> engine =
      make_engine(chosen.device, params, &optimizer, engine_options(chosen, o.shapes.batch, m.threads));
  std::vector<float> logits(static_cast<size_t>(batch.size) * c.num_labels);
  m.initial_loss = engine->forward(batch, logits.data());
  for (const float logit : logits) m.initial_max_abs_logit = std::max(m.initial_max_abs_logit, std::fabs(double{logit}));
  m.timings = time_engine(*engine, batch, o);
  m.batch = o.shapes.batch;
  if (!o.skip_loader) {
    const BenchSet set(o.shapes);
    m.predict_sample_s = predict_seconds_per_sample(*engine, o.shapes, set, o.repeats);
    m.loader_rate = loader_samples_per_second(o.shapes, set, o.repeats);
  }
  m.summary = engine->summary();
  m.step = step_shape(o, c, batch, params.size(), m.summary);
  if (const std::string note = engine->closing_note(); !note.empty()) m.summary += "; " + note;
  return report(m, o, c);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Benchmark the training and inference steps of the engine"};
  BenchOptions options;
  add_options(app, options);
  return run_app(app, argc, argv, [&] { return run_bench(options); });
}
