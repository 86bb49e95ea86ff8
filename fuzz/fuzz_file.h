// The fuzzers' input as a file: the parsers take paths (the .ebin one maps its file), so each
// input is written to an in-memory file (memfd) and named by its /proc/self/fd path. No disk.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace enhanced::fuzz {

class FuzzFile {
 public:
  FuzzFile() : fd_(::memfd_create("enhanced-fuzz-input", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }

  // Replaces the file's content with the input; returns its path.
  const std::string& hold(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      const ssize_t written = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (written <= 0) std::abort();
      done += static_cast<size_t>(written);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

// One file for the whole run of a fuzzer (LLVMFuzzerTestOneInput is called once per input).
inline FuzzFile& input_file() {
  static FuzzFile file;
  return file;
}

}  // namespace enhanced::fuzz
