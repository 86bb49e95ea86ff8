// What every command-line app shares: one line "error: ..." and a non-zero exit for any failure.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "enhanced/common.h"

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

}  // namespace enhanced
