// What every command-line app shares: one line "error: ..." and a non-zero exit for any failure.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "enhanced/common.h"
#include "enhanced/device.h"
#include "enhanced/engine.h"

namespace enhanced {

// Parses the command line and runs body(); CLI errors exit as CLI11 decides, everything else
// prints one line and exits 1.
template <class Body>
int run_app(CLI::App& app, int argc, char** argv, Body body) {
  app.set_version_flag("--version", version_string());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
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

// The CUDA backend's flags, the same in every app: --tf32, --cuda-graphs, --rnn-algorithm.
// Call finish_cuda_options after parsing.
struct CudaFlags {
  std::string graphs = "on";
  std::string rnn_algorithm = "auto";
};

inline void add_cuda_options(CLI::App& app, CudaOptions& options, CudaFlags& flags) {
  app.add_flag("--tf32", options.tf32, "CUDA: allow TF32 tensor-core math (faster, looser than FP32)");
  app.add_option("--cuda-graphs", flags.graphs, "CUDA: replay the training step from a captured graph (on, off)")
      ->capture_default_str();
  app.add_option("--rnn-algorithm", flags.rnn_algorithm,
                 "CUDA: cuDNN LSTM algorithm: auto (time each, keep the fastest that agrees), standard, persistent, "
                 "persistent-small-h")
      ->capture_default_str();
}

inline void finish_cuda_options(CudaOptions& options, const CudaFlags& flags) {
  if (flags.graphs != "on" && flags.graphs != "off") fail("--cuda-graphs must be on or off, got '", flags.graphs, "'");
  options.graphs = flags.graphs == "on";
  options.rnn_algorithm = parse_rnn_algorithm(flags.rnn_algorithm);
}

}  // namespace enhanced
