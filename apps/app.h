// What every command-line app shares: one line "error: ..." and a non-zero exit for any failure,
// the numeric flag rules, and the engine flags, resolved once by each app that runs the model.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "enhanced/common.h"
#include "enhanced/device.h"
#include "enhanced/engine.h"
#include "enhanced/inference.h"
#include "enhanced/number_rule.h"
#include "enhanced/precision.h"

namespace enhanced {

namespace detail {
template <class T>
CLI::Validator number_rule(NumberRule rule) {
  rule.integer = std::is_integral_v<T>;
  if constexpr (std::is_integral_v<T>) rule.whole_max = static_cast<long long>(std::numeric_limits<T>::max());
  rule.single = std::is_same_v<T, float>;
  return CLI::Validator([rule](std::string& text) { return rule.check(text); }, rule.range_text());
}
}  // namespace detail

// x >= low (at_least(1) for counts, at_least(0.0) for a real that may be 0).
template <class T>
CLI::Validator at_least(T low) { return detail::number_rule<T>({static_cast<double>(low)}); }
// x > low (a learning rate, Adam's epsilon).
template <class T>
CLI::Validator greater_than(T low) { return detail::number_rule<T>({static_cast<double>(low), HUGE_VAL, true}); }
// low <= x <= high.
template <class T>
CLI::Validator in_range(T low, T high) {
  return detail::number_rule<T>({static_cast<double>(low), static_cast<double>(high)});
}
// low <= x < high (SGD momentum, Adam's betas: 1 would never forget).
template <class T>
CLI::Validator in_range_below(T low, T high) {
  return detail::number_rule<T>({static_cast<double>(low), static_cast<double>(high), false, true});
}

// --threads: 0 (one per physical core: default_cpu_threads) up to kMaxThreads, far more than any
// machine has; a larger count would only ask OpenMP for threads it cannot start.
constexpr int kMaxThreads = 4096;

// A 64-bit seed: digits only, at most 2^64 - 1 (CLI11's conversion wraps "-1" silently).
inline CLI::Validator seed_rule() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        std::strtoull(text.c_str(), &end, 10);
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || errno == ERANGE)
          return cat("must be a whole number from 0 to ", std::numeric_limits<uint64_t>::max(), ", got '", text, "'");
        return "";
      },
      "SEED");
}

// A command-line mistake as one line "error: ..." and exit 1, like any other bad input; --help
// and --version exit as CLI11 decides. CLI11 writes a rule's failure as "--flag: must ...": the
// colon is taken out so that it reads as the rule's sentence.
inline int report_parse_error(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) return app.exit(e);
  std::string message = e.what();
  std::replace(message.begin(), message.end(), '\n', ' ');
  if (const size_t at = message.find(": must be "); at != std::string::npos) message.erase(at, 1);
  else message += " (see --help)";
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

// Parses the command line and runs body(); any failure prints one line "error: ..." and exits 1.
template <class Body>
int run_app(CLI::App& app, int argc, char** argv, Body body) {
  app.set_version_flag("--version", version_string());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return report_parse_error(app, e);
  }
  try {
    return body();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}

// Resolves --device auto|cpu|cuda. `cuda` without a usable GPU is an Error; `auto` falls back to
// the CPU. Prints one line to stderr saying which device was picked (and why) when verbose. Only
// the apps resolve the device, once each (resolve_engine_flags); below them it is a Device.
// --device's choices: auto (the GPU where usable, else the CPU), then every device's name.
inline std::vector<std::string> device_choices() {
  std::vector<std::string> choices{"auto"};
  for (const std::string& name : names_of(devices())) choices.push_back(name);
  return choices;
}

inline Device resolve_device(const std::string& flag, bool verbose) {
  const EnumName<Device>* named = find_name(devices(), flag);
  if (flag != "auto" && named == nullptr) fail("--device must be ", names_text(device_choices()), ", got '", flag, "'");
  if (named != nullptr && named->value == Device::cpu) {
    if (verbose) std::fprintf(stderr, "device: cpu\n");
    return Device::cpu;
  }
  const std::string reason = cuda_unavailable_reason();
  if (reason.empty()) {
    if (verbose) std::fprintf(stderr, "device: cuda\n");
    return Device::cuda;
  }
  if (named != nullptr) fail("--device ", flag, ": ", no_gpu_text(reason));
  if (verbose) std::fprintf(stderr, "device: cpu (%s)\n", no_gpu_text(reason).c_str());
  return Device::cpu;
}

// The engine flags, the same in every app that runs the model, as given: --threads, --device,
// --precision (enhanced/precision.h) and the CUDA backend's --tf32, --cuda-graphs and
// --rnn-algorithm. Each app resolves them once (resolve_engine_flags) into an EngineChoice.
struct EngineFlags {
  int threads = 0;              // 0: one per physical core (default_cpu_threads)
  std::string device = "auto";  // enhanced-bench: cpu (a benchmark names what it measures)
  bool tf32 = false;
  std::string cuda_graphs = "on";
  std::string rnn_algorithm = "auto";
  std::string precision = "fp32";
};

// Adds the engine flags to `app`; `devices` is --device's help, flags.device its default.
inline void add_engine_flags(CLI::App& app, EngineFlags& flags,
                             const std::string& devices = names_text(device_choices())) {
  app.add_option("--threads", flags.threads, "CPU threads (default: one per physical core this process may run on)")
      ->check(in_range(0, kMaxThreads));
  app.add_option("--device", flags.device, devices)->capture_default_str();
  app.add_flag("--tf32", flags.tf32, "CUDA: allow TF32 tensor-core math (faster, looser than FP32)");
  app.add_option("--cuda-graphs", flags.cuda_graphs, "CUDA: replay the training step from a captured graph (on, off)")
      ->capture_default_str();
  app.add_option("--rnn-algorithm", flags.rnn_algorithm,
                 "CUDA: cuDNN LSTM algorithm: " + names_text(rnn_algorithms()) +
                     " (auto: time each, keep the fastest that agrees)")
      ->capture_default_str();
  app.add_option("--precision", flags.precision,
                 "GEMM arithmetic: " + names_text(precisions()) +
                     " (bf16: bfloat16 operands, FP32 accumulation, AVX512-BF16 or a GPU; bf16-emulated: bf16's "
                     "arithmetic on any CPU, no faster than fp32)")
      ->capture_default_str();
}

// The CUDA flags checked (Error on a bad one) and typed. They are checked on every machine: a
// typo is one clear line, never ignored because the run happens to be on the CPU.
inline CudaOptions cuda_options(const EngineFlags& flags) {
  if (flags.cuda_graphs != "on" && flags.cuda_graphs != "off")
    fail("--cuda-graphs must be on or off, got '", flags.cuda_graphs, "'");
  CudaOptions options;
  options.tf32 = flags.tf32;
  options.graphs = flags.cuda_graphs == "on";
  options.rnn_algorithm = parse_rnn_algorithm(flags.rnn_algorithm);
  return options;
}

// The engine flags checked and typed (Error on a bad one), and the device resolved (its line on
// stderr when verbose): what an app passes down to the memory check and the engine.
inline EngineChoice resolve_engine_flags(const EngineFlags& flags, bool verbose) {
  EngineChoice choice;
  choice.cuda = cuda_options(flags);
  choice.precision = parse_precision(flags.precision);
  choice.threads = flags.threads;
  choice.device = resolve_device(flags.device, verbose);
  return choice;
}

// --blend and --pool of the apps that run a checkpoint (enhanced-eval, enhanced-predict): for a
// checkpoint without the engine's metadata; with it, a given flag must agree with the saved model.
inline void add_model_flags(CLI::App& app, ModelFlags& flags) {
  app.add_option("--blend", flags.blend,
                 "Bare checkpoint: " + names_text(blend_modes()) + " (default: mean); else must match its model")
      ->check(CLI::IsMember(names_of(blend_modes())));
  app.add_option("--pool", flags.pool,
                 "Bare checkpoint: " + names_text(pool_modes()) + " (default: feature); else must match its model")
      ->check(CLI::IsMember(names_of(pool_modes())));
}

}  // namespace enhanced
