// enhanced-bench: times the training step, the inference step and each part alone on synthetic
// data of the given shapes; reports min/median/max, samples/s, FLOPs and the machine's own
// measured GEMM rate with the same BLAS and threads.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>
#include <unistd.h>

#include "enhanced/app.h"
#include "enhanced/checkpoint.h"
#ifdef ENHANCED_HAVE_CUDA
#include "enhanced/cuda_model.h"
#endif
#include "enhanced/device.h"
#include "enhanced/jsonl.h"
#include "enhanced/loader.h"
#include "enhanced/network.h"
#include "enhanced/optimizer.h"
#include "enhanced/random.h"
#include "layers/blas.h"
#include "layers/dense.h"
#include "layers/embedding_blend.h"
#include "layers/lstm.h"
#include "layers/maxpool.h"
#include "layers/softmax_xent.h"

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

// The machine's sgemm rate on a GEMM the size of the step's big ones, same BLAS, same threads.
// Taken from the fastest of its runs, so the engine's share of it is not flattered by a slow one.
double measure_gemm_gflops(int threads, int warmup, int repeats) {
  const int m = 4096, n = 1024, k = 160;
  std::vector<float> a(static_cast<size_t>(m) * k, 0.5f), b(static_cast<size_t>(k) * n, 0.25f), c(static_cast<size_t>(m) * n);
  openblas_set_num_threads(threads);
  const Timing t = time_it("gemm", warmup, repeats * 3, [&] {
    gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  });
  return 2.0 * m * n * k / t.min() / 1e9;  // the best run: what the machine can do, not what it did under load
}

double loader_samples_per_second(const Shapes& s, int repeats) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("enhanced-bench." + std::to_string(::getpid()));
  fs::create_directories(dir);
  const int samples = 4 * s.batch;
  {
    std::ofstream out(dir / "bench.jsonl");
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
  convert_jsonl_to_ebin((dir / "bench.jsonl").string(), (dir / "bench.ebin").string(), s.seq_len);
  double rate = 0;
  {
    const Dataset dataset = Dataset::open((dir / "bench.ebin").string());
    LoaderOptions options;
    options.batch_size = s.batch;
    options.prefetch = false;  // one core: the consumer thread does all the work
    BatchLoader loader(dataset, options);
    int64_t epoch = 0;
    const Timing t = time_it("loader", 1, repeats, [&] {
      loader.start_epoch(epoch++);
      while (loader.next()) {
      }
    });
    rate = samples / t.median();
  }
  fs::remove_all(dir);
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Benchmark the training and inference steps of the engine"};
  Shapes s;
  std::string device = "cpu", optimizer_name = "adam", dump_case, blend = "mean", pool = "feature";
  int threads = 0, warmup = 2, repeats = 7;
  bool json = false, lazy = false, skip_loader = false, skip_unavailable = false;
  CudaOptions cuda_options;
  CudaFlags cuda_flags;
  std::string cuda_summary;
  app.add_option("--device", device, "cpu or cuda")->capture_default_str();
  app.add_option("--batch-size,-B", s.batch, "B")->capture_default_str();
  app.add_option("--seq-len,-T", s.seq_len, "T")->capture_default_str();
  app.add_option("--embedding-dim,-D", s.dim, "D")->capture_default_str();
  app.add_option("--hidden,-H", s.hidden, "H")->capture_default_str();
  app.add_option("--vocab-size,-V", s.vocab, "V")->capture_default_str();
  app.add_option("--num-labels,-L", s.labels, "L")->capture_default_str();
  app.add_option("--empty-probability", s.empty_probability, "P(identifier empty)")->capture_default_str();
  app.add_option("--max-identifier", s.max_identifier, "Identifier length uniform in 1..this")->capture_default_str();
  app.add_option("--zipf", s.zipf, "Token ids Zipf-distributed with this exponent (0: uniform); ~1 is like text")
      ->capture_default_str();
  app.add_option("--blend", blend, "mean or scalar-mean")->capture_default_str();
  app.add_option("--pool", pool, "feature or time")->capture_default_str();
  app.add_option("--optimizer", optimizer_name, "sgd or adam")->capture_default_str();
  app.add_flag("--lazy-embedding-updates", lazy, "Lazy embedding updates");
  add_cuda_options(app, cuda_options, cuda_flags);
  app.add_option("--threads", threads, "CPU threads (default: every core)");
  app.add_option("--warmup", warmup, "Untimed runs first")->capture_default_str();
  app.add_option("--repeats", repeats, "Timed runs")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--no-loader", skip_loader, "Skip the loader throughput measurement");
  app.add_flag("--json", json, "Print one JSON object");
  app.add_flag("--skip-unavailable", skip_unavailable,
               "Exit 77 (CTest's skip) with the reason when the device cannot be used, instead of failing");
  app.add_option("--dump-case", dump_case,
                 "Write the initial weights and the batch to this directory (checkpoint.safetensors, "
                 "batch.safetensors) so peers time the same function on the same data");
  return run_app(app, argc, argv, [&] {
    if (device == "auto") fail("--device must be cpu or cuda: a benchmark names what it measures");
    finish_cuda_options(cuda_options, cuda_flags);
    if (device == "cuda" && skip_unavailable && !cuda_unavailable_reason().empty()) {
      std::printf("skipped: no usable GPU: %s\n", cuda_unavailable_reason().c_str());
      return 77;
    }
    const Device chosen = resolve_device(device, false);
    const int thread_count = configure_cpu_threads(threads);
    ModelConfig c;
    c.vocab_size = s.vocab;
    c.embedding_dim = s.dim;
    c.hidden = s.hidden;
    c.seq_len = s.seq_len;
    c.num_labels = s.labels;
    c.blend = parse_blend_mode(blend);
    c.pool = parse_pool_mode(pool);
    c.validate();
    ParameterBuffer<float> params(c), grads(c);
    initialize_parameters(params, 1);
    OptimizerConfig oc;
    oc.kind = parse_optimizer_kind(optimizer_name);
    oc.learning_rate = oc.kind == OptimizerKind::sgd ? 0.01f : 1e-3f;
    oc.lazy_embedding = lazy;
    Optimizer optimizer(oc, c);
    const Batch batch = synthetic_batch(s, 3);
    Activations<float> a;
    a.reserve(c, s.batch);
    std::vector<int32_t> rows;
    const int B = s.batch, T = s.seq_len, D = s.dim, H = s.hidden, F = c.pooled_features(), L = s.labels;
    // Prints the table (or JSON) for the timings taken on either device.
    auto report = [&](const std::vector<Timing>& timings, double initial_loss) {
      const bool on_cpu = chosen == Device::cpu;
      // The CPU's own sgemm rate is the yardstick for the CPU engine only.
      const double gemm_rate = on_cpu ? measure_gemm_gflops(thread_count, warmup, repeats) : 0.0;
      const double loader_rate = skip_loader ? 0.0 : loader_samples_per_second(s, repeats);
      configure_cpu_threads(thread_count);  // the GEMM-rate measurement gave BLAS the threads
      rusage usage{};
      getrusage(RUSAGE_SELF, &usage);
      const double train_flop = train_gflop(s, c), forward_flop = forward_gflop(s, c);
      const double train_rate = train_flop / timings[0].median(), forward_rate = forward_flop / timings[1].median();
      if (json) {
        nlohmann::json out{{"device", device}, {"threads", thread_count}, {"blas", openblas_get_config()},
                           {"shapes", {{"B", s.batch}, {"T", s.seq_len}, {"D", s.dim}, {"H", s.hidden}, {"V", s.vocab},
                                       {"L", s.labels}, {"empty_probability", s.empty_probability},
                                       {"max_identifier", s.max_identifier}, {"zipf", s.zipf}}},
                           {"blend", blend}, {"pool", pool}, {"optimizer", optimizer_name}, {"lazy_embedding", lazy}, {"initial_loss", initial_loss},
                           {"train_gflop", train_flop}, {"forward_gflop", forward_flop},
                           {"train_gflops_achieved", train_rate}, {"forward_gflops_achieved", forward_rate},
                           {"gemm_gflops", gemm_rate}, {"loader_samples_per_s", loader_rate},
                           {"peak_rss_mib", static_cast<double>(usage.ru_maxrss) / 1024.0}};
        if (!on_cpu) out["cuda"] = cuda_summary;
        for (const Timing& t : timings)
          out["times"][t.name] = {{"min_s", t.min()}, {"median_s", t.median()}, {"max_s", t.max()},
                                  {"samples_per_s", s.batch / t.median()}};
        std::printf("%s\n", out.dump(2).c_str());
        return 0;
      }
      if (on_cpu) std::printf("enhanced-bench: cpu, %d threads, %s\n", thread_count, openblas_get_config());
      else std::printf("enhanced-bench: cuda, %s\n", cuda_summary.c_str());
      std::printf("B=%d T=%d D=%d H=%d V=%lld L=%d%s, %s%s, %d warm-up + %d timed runs\n\n", s.batch, s.seq_len, s.dim,
                  s.hidden, static_cast<long long>(s.vocab), s.labels,
                  s.zipf > 0 ? cat(", token ids Zipf(", s.zipf, ")").c_str() : "", optimizer_name.c_str(),
                  lazy ? " (lazy embedding)" : "", warmup, repeats);
      std::printf("%-16s %10s %10s %10s %12s\n", "part", "min ms", "median ms", "max ms", "samples/s");
      for (const Timing& t : timings)
        std::printf("%-16s %10.2f %10.2f %10.2f %12.0f\n", t.name.c_str(), 1e3 * t.min(), 1e3 * t.median(), 1e3 * t.max(),
                    s.batch / t.median());
      std::printf("\ntrain step: %.2f GFLOP, %.1f GFLOP/s; inference: %.2f GFLOP, %.1f GFLOP/s\n", train_flop, train_rate,
                  forward_flop, forward_rate);
      if (on_cpu)
        std::printf("machine sgemm rate (same BLAS, %d threads): %.1f GFLOP/s -> train step at %.0f%% of it\n",
                    thread_count, gemm_rate, 100 * train_rate / gemm_rate);
      if (!skip_loader)
        std::printf("loader (one core): %.0f samples/s = %.1fx what the train step consumes\n", loader_rate,
                    loader_rate / (s.batch / timings[0].median()));
      std::printf("peak RSS: %.0f MiB\n", static_cast<double>(usage.ru_maxrss) / 1024.0);
      return 0;
    };
    double initial_loss = 0;
    if (!dump_case.empty()) {
      std::filesystem::create_directories(dump_case);
      save_checkpoint(dump_case + "/checkpoint.safetensors", params);
      save_batch(dump_case + "/batch.safetensors", batch);
    }
    initial_loss = model_forward(a, params, batch, thread_count, false);
    std::vector<Timing> timings;
#ifdef ENHANCED_HAVE_CUDA
    if (chosen == Device::cuda) {
      CudaModel model(c, oc, s.batch, cuda_options);
      model.upload_parameters(params);
      initial_loss = model.forward(batch, a.logits.data());
      // As the trainer runs: steps queued back to back (graph replays once captured), the
      // totals read once per run of kPipelined steps. Each sample is one step's share.
      constexpr int kPipelined = 20;
      Timing pipelined = time_it("train step", warmup, repeats, [&] {
        for (int i = 0; i < kPipelined; ++i) model.enqueue_train_step(batch);
        if (model.collect().halted) fail("the benchmark's training diverged");
      });
      for (double& seconds : pipelined.seconds) seconds /= kPipelined;
      timings.push_back(pipelined);
      timings.push_back(time_it("inference step", warmup, repeats, [&] { model.forward(batch, a.logits.data()); }));
      timings.push_back(time_it("train step, sync", warmup, repeats, [&] { model.train_step(batch); }));
      cuda_summary = cat(model.summary(), "; ", model.graph_replays(), " graph replays");
      return report(timings, initial_loss);
    }
#endif
    timings.push_back(time_it("train step", warmup, repeats, [&] {
      embedding_touched_rows(rows, batch.identifier_ids.data(), static_cast<int64_t>(batch.identifier_ids.size()),
                             batch.cur_word_ids.data(), batch.positions());
      model_forward(a, params, batch, thread_count, true);
      model_backward(grads, a, params, batch, thread_count);
      optimizer.step(params, grads, rows);
      zero_gradients(grads, rows);
    }));
    timings.push_back(time_it("inference step", warmup, repeats, [&] { model_forward(a, params, batch, thread_count, false); }));
    timings.push_back(time_it("blend fwd+bwd", warmup, repeats, [&] {
      embedding_blend_forward(a.x.data(), batch.identifier_offsets.data(), batch.identifier_ids.data(),
                              batch.cur_word_ids.data(), params.embedding, B * T, D, c.blend);
      embedding_blend_backward(grads.embedding, a.dx.data(), batch.identifier_offsets.data(), batch.identifier_ids.data(),
                               batch.cur_word_ids.data(), B * T, D, c.blend);
    }));
    timings.push_back(time_it("bilstm fwd", warmup, repeats, [&] {
      bilstm_forward(a.y.data(), a.gates.data(), a.cell.data(), a.x.data(), params.weight_ih, params.weight_hh,
                     params.bias_ih, params.bias_hh, B, T, D, H, thread_count);
    }));
    timings.push_back(time_it("bilstm fwd+bwd", warmup, repeats, [&] {
      bilstm_forward(a.y.data(), a.gates.data(), a.cell.data(), a.x.data(), params.weight_ih, params.weight_hh,
                     params.bias_ih, params.bias_hh, B, T, D, H, thread_count);
      bilstm_backward(a.dx.data(), grads.weight_ih, grads.weight_hh, grads.bias_ih, grads.bias_hh, a.gates.data(),
                      a.lstm_scratch.data(), a.cell.data(), a.y.data(), a.dy.data(), a.x.data(), params.weight_ih,
                      params.weight_hh, B, T, D, H, thread_count);
    }));
    timings.push_back(time_it("head fwd+bwd", warmup, repeats, [&] {
      maxpool_forward(a.pooled.data(), a.argmax.data(), a.y.data(), B, T, 2 * H, c.pool);
      dense_forward(a.logits.data(), a.pooled.data(), params.dense_weight, params.dense_bias, B, F, L);
      softmax_cross_entropy(a.dlogits.data(), a.sample_losses.data(), a.logits.data(), batch.labels.data(), B, L);
      dense_backward(a.dpooled.data(), grads.dense_weight, grads.dense_bias, a.dlogits.data(), a.pooled.data(),
                     params.dense_weight, B, F, L);
      maxpool_backward(a.dy.data(), a.argmax.data(), a.dpooled.data(), B, T, 2 * H, c.pool);
    }));
    std::fill(grads.data.begin(), grads.data.end(), 0.0f);
    embedding_touched_rows(rows, batch.identifier_ids.data(), static_cast<int64_t>(batch.identifier_ids.size()),
                           batch.cur_word_ids.data(), batch.positions());
    timings.push_back(time_it("optimizer", warmup, repeats, [&] { optimizer.step(params, grads, rows); }));
    return report(timings, initial_loss);
  });
}
