// Opening a user's input file, the same way for every reader in io/: a directory or device is
// refused by name, an unopenable file says why; the stream is at the start, its size known.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "enhanced/common.h"

namespace enhanced {

struct InputFile {
  std::ifstream stream;
  size_t size = 0;
};

inline InputFile open_input_file(const std::string& path) {
  std::error_code error;
  if (std::filesystem::exists(path, error) && !std::filesystem::is_regular_file(path, error))
    fail(path, ": not a regular file");
  InputFile file;
  file.stream.open(path, std::ios::binary | std::ios::ate);
  if (!file.stream) fail(path, ": cannot open (", std::strerror(errno), ")");
  file.size = static_cast<size_t>(file.stream.tellg());
  file.stream.seekg(0);
  return file;
}

}  // namespace enhanced
