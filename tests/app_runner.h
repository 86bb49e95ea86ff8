// Runs an app binary from the build tree and captures its exit status and output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "enhanced/demo.h"

namespace enhanced::testing {

struct AppResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// A file's bytes ("" when it cannot be read), to compare two runs' outputs.
inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs a shell command line, stdout and stderr together.
inline AppResult run_command(const std::string& command_line) {
  const std::string command = command_line + " 2>&1";
  AppResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer;
  size_t read;
  while ((read = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), read);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Runs an app of the build tree. `address_space_mib` > 0 runs the app under that RLIMIT_AS
// (ulimit -v), so that a test can prove an input is refused before a large allocation rather
// than by it. AddressSanitizer reserves terabytes of shadow address space, so its builds run
// without the limit. `timeout_s` > 0 ends the app after that many seconds (exit status 124), so
// that a test of an input that could block (a FIFO) fails instead of hanging.
inline AppResult run_app(const std::string& app, const std::string& arguments, int address_space_mib = 0,
                         int timeout_s = 0) {
#if defined(__SANITIZE_ADDRESS__)
  address_space_mib = 0;
#endif
  const std::string limit = address_space_mib > 0 ? "ulimit -v " + std::to_string(address_space_mib * 1024) + " && " : "";
  const std::string timeout = timeout_s > 0 ? "timeout -k 5 " + std::to_string(timeout_s) + " " : "";
  return run_command(limit + timeout + std::string(ENHANCED_APP_DIR) + "/" + app + " " + arguments);
}

// enhanced-train's report of a halt, from "error: non-finite " up to its first ';' (what, step,
// epoch, batch); "" when the output has none.
inline std::string halt_message(const std::string& output) {
  const size_t at = output.find("error: non-finite ");
  return at == std::string::npos ? std::string() : output.substr(at, output.find(';', at) - at);
}

// The tiny demo set the CLI tests train on (80 / 24 / 24 samples, T = 16, V = 128, D = 8).
inline DemoFiles write_small_demo(const std::filesystem::path& dir) {
  DemoOptions options;
  options.train_samples = 80;
  options.valid_samples = 24;
  options.test_samples = 24;
  options.seq_len = 16;
  options.vocab_size = 128;
  options.embedding_dim = 8;
  return write_demo(dir.string(), options);
}

// enhanced-train flags for a small model on that set (5 batches an epoch), device not named.
inline std::string small_train_flags(const DemoFiles& files) {
  return "--data " + files.train_ebin + " --valid " + files.valid_ebin + " --pretrained " + files.embeddings +
         " --embedding-dim 8 --hidden 6 --batch-size 16 --threads 2 --quiet ";
}

}  // namespace enhanced::testing
