// Runs an app binary from the build tree and captures its exit status and output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace enhanced::testing {

struct AppResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline AppResult run_app(const std::string& app, const std::string& arguments) {
  const std::string command = std::string(ENHANCED_APP_DIR) + "/" + app + " " + arguments + " 2>&1";
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

}  // namespace enhanced::testing
