#include "bench_roofline.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "enhanced/step_parts.h"

namespace enhanced::bench {
namespace {

constexpr double kFloat = 4;  // bytes of an FP32 activation, weight or moment

// The parts of the forward alone: what the inference step is made of.
PartWork blend_forward_work(const StepShape& s) {
  const double P = static_cast<double>(s.batch) * s.config.seq_len, D = s.config.embedding_dim;
  const double ids = static_cast<double>(s.ids);
  return {ids * D / 1e9, (4 * ids + kFloat * (ids * D + P * D)) / 1e9};  // ids, their rows; x written
}

PartWork lstm_forward_work(const StepShape& s) {
  const double P = static_cast<double>(s.batch) * s.config.seq_len, D = s.config.embedding_dim, H = s.config.hidden;
  // x read; c (2H) and the four gates of both directions (8H) written for the backward; h only
  // pooled (the max-pool is fused in: y is not written), the pooled features counted by the head.
  return {2 * P * 8 * H * (D + H) / 1e9, kFloat * P * (D + 10 * H) / 1e9};
}

// Dense and loss: the max-pool runs in the LSTM's forward, which hands over the pooled features.
PartWork head_forward_work(const StepShape& s) {
  const double F = s.config.pooled_features(), L = s.config.num_labels, B = s.batch;
  const double dense = 2.0 * B * F * L;
  return {dense / 1e9, kFloat * (B * F + F * L + B * L) / 1e9};  // pooled and W read, logits written
}

PartWork sum(std::initializer_list<PartWork> parts) {
  PartWork total;
  for (const PartWork& p : parts) total.gflop += p.gflop, total.gbytes += p.gbytes;
  return total;
}

// Forward and backward of each stage: the backward reads what the forward saved and writes the
// gradient of its input.
PartWork blend_work(const StepShape& s) {
  const double P = static_cast<double>(s.batch) * s.config.seq_len, D = s.config.embedding_dim;
  const double ids = static_cast<double>(s.ids);
  const PartWork forward = blend_forward_work(s);
  // dx read, the ids again, each id's gradient row read and written.
  return sum({forward, {ids * D / 1e9, (4 * ids + kFloat * (P * D + 2 * ids * D)) / 1e9}});
}

PartWork lstm_work(const StepShape& s) {
  const double P = static_cast<double>(s.batch) * s.config.seq_len, D = s.config.embedding_dim, H = s.config.hidden;
  const PartWork forward = lstm_forward_work(s);
  // Twice the forward's GEMM FLOP (the inputs' and the weights' gradients); the saved h, c and
  // gates read, dx written (dL/dh: the pooled gradient, counted by the head).
  return sum({forward, {2 * forward.gflop, kFloat * P * (12 * H + D) / 1e9}});
}

PartWork head_work(const StepShape& s) {
  const double F = s.config.pooled_features(), L = s.config.num_labels, B = s.batch;
  const PartWork forward = head_forward_work(s);
  // dlogits, pooled and W read again, W's gradient and the pooled gradient written: no (B, T, 2H)
  // gradient, the LSTM's backward reads the pooled one.
  return sum({forward, {2 * forward.gflop, kFloat * (B * L + B * F + 2 * F * L + B * F) / 1e9}});
}

PartWork optimizer_work(const StepShape& s) {
  const double n = static_cast<double>(s.updated_parameters);
  // Adam reads the parameter, gradient and both moments and writes three of them back; SGD reads
  // two and writes one. About ten FLOP an update for Adam, two for SGD.
  return {(s.adam ? 10 : 2) * n / 1e9, kFloat * n * (s.adam ? 7 : 3) / 1e9};
}

bool is_gemm_part(const std::string& part) { return part == step_part::bilstm_forward || part == step_part::bilstm; }

}  // namespace

PartWork part_work(const std::string& part, const StepShape& s) {
  static const std::pair<const char*, PartWork (*)(const StepShape&)> costs[] = {
      {step_part::blend, blend_work}, {step_part::bilstm_forward, lstm_forward_work}, {step_part::bilstm, lstm_work},
      {step_part::head, head_work},   {step_part::optimizer, optimizer_work}};
  for (const auto& [name, work] : costs)
    if (part == name) return work(s);
  return {};
}

double gemm_ceiling(const CpuCeilings& ceilings, const StepShape& s) {
  if (s.precision != Precision::bf16) return ceilings.fp32_gflops;
  return s.amx ? ceilings.amx_bf16_gflops : ceilings.avx512_bf16_gflops;
}

std::vector<RooflineRow> roofline(const std::vector<std::pair<std::string, double>>& part_seconds,
                                  const StepShape& s, const CpuCeilings& ceilings) {
  std::vector<RooflineRow> rows;
  for (const auto& [part, seconds] : part_seconds) {
    RooflineRow row;
    row.part = part;
    row.seconds = seconds;
    row.work = part_work(part, s);
    row.peak_gflops = is_gemm_part(part) ? gemm_ceiling(ceilings, s) : ceilings.fp32_gflops;
    if (row.peak_gflops > 0) row.compute_seconds = row.work.gflop / row.peak_gflops;
    if (ceilings.copy_gbytes_per_s > 0) row.memory_seconds = row.work.gbytes / ceilings.copy_gbytes_per_s;
    rows.push_back(row);
  }
  return rows;
}

namespace {

// The train step's parts at their bounds: what the step would take if each reached its own.
double train_step_at_bounds(const std::vector<RooflineRow>& rows) {
  double total = 0;
  for (const RooflineRow& row : rows)
    if (row.costed() && row.part != step_part::bilstm_forward) total += row.bound_seconds();  // fwd+bwd holds the fwd
  return total;
}

void print_row(const RooflineRow& row, const CpuCeilings& ceilings) {
  if (!row.costed()) {
    std::printf("%-16s %9.2f   (not costed: its work is the other parts' operands)\n", row.part.c_str(),
                1e3 * row.seconds);
    return;
  }
  const double peak = row.peak_gflops;
  const double rate = row.work.gflop / row.seconds, traffic = row.work.gbytes / row.seconds;
  std::printf("%-16s %9.2f %8.3f %8.1f %6.0f%% %8.3f %7.1f %6.0f%%  %-8s %8.2f\n", row.part.c_str(), 1e3 * row.seconds,
              row.work.gflop, rate, peak > 0 ? 100 * rate / peak : 0.0, row.work.gbytes, traffic,
              100 * traffic / ceilings.copy_gbytes_per_s, row.bound(), 1e3 * row.bound_seconds());
}

std::string rate_text(double gflops) {
  char text[32];
  std::snprintf(text, sizeof text, gflops > 0 ? "%.0f GFLOP/s" : "-", gflops);
  return text;
}

}  // namespace

void print_roofline(const std::vector<RooflineRow>& rows, const StepShape& s, const CpuCeilings& ceilings,
                    int threads) {
  std::printf("\nroofline: this CPU's ceilings on %d threads, measured: FP32 (%s) %s, AVX512-BF16 %s, AMX-BF16 %s, "
              "copy %.1f GB/s (read + written)\n", threads, ceilings.fp32_isa, rate_text(ceilings.fp32_gflops).c_str(),
              rate_text(ceilings.avx512_bf16_gflops).c_str(), rate_text(ceilings.amx_bf16_gflops).c_str(),
              ceilings.copy_gbytes_per_s);
  std::printf("the GEMMs (bilstm) against %s; the other parts against FP32\n",
              s.precision != Precision::bf16 ? "FP32" : s.amx ? "AMX-BF16" : "AVX512-BF16");
  std::printf("%-16s %9s %8s %8s %7s %8s %7s %7s  %-8s %8s\n", "part", "median ms", "GFLOP", "GFLOP/s", "of peak",
              "GB", "GB/s", "of copy", "bound", "ms at it");
  for (const RooflineRow& row : rows) print_row(row, ceilings);
  std::printf("train step at the parts' bounds (blend, bilstm fwd+bwd, head, optimizer): %.2f ms\n",
              1e3 * train_step_at_bounds(rows));
}

nlohmann::json roofline_json(const std::vector<RooflineRow>& rows, const StepShape& s, const CpuCeilings& ceilings) {
  nlohmann::json out{{"fp32_isa", ceilings.fp32_isa},
                     {"fp32_gflops", ceilings.fp32_gflops},
                     {"avx512_bf16_gflops", ceilings.avx512_bf16_gflops},
                     {"amx_bf16_gflops", ceilings.amx_bf16_gflops},
                     {"copy_gbytes_per_s", ceilings.copy_gbytes_per_s},
                     {"gemm_gflops_ceiling", gemm_ceiling(ceilings, s)},
                     {"train_step_at_bounds_s", train_step_at_bounds(rows)}};
  for (const RooflineRow& row : rows)
    if (row.costed())
      out["parts"][row.part] = {{"median_s", row.seconds}, {"gflop", row.work.gflop}, {"gbytes", row.work.gbytes},
                                {"bound", row.bound()}, {"bound_s", row.bound_seconds()}};
  return out;
}

}  // namespace enhanced::bench
