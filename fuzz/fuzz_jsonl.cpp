// Fuzzes the JSONL sample parser through convert_jsonl_to_ebin with T = 4 (the data CLI tests'
// T, whose files are the seeds) for inputs of even size and T from the first sample for odd
// ones, labeled or unlabeled as the input is, and opens what it writes: any .ebin the converter produces
// must pass Dataset::open. Output goes to a folder of its own in /dev/shm (tmpfs: its fsync
// costs nothing; the converter's scan for stale temporaries sees only this folder).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "enhanced/common.h"
#include "enhanced/dataset.h"
#include "enhanced/jsonl.h"
#include "fuzz_file.h"

namespace {

const std::string& output_path() {
  static const std::string path = [] {
    const std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    const std::filesystem::path dir = base / ("enhanced-fuzz-jsonl." + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return (dir / "out.ebin").string();
  }();
  static const bool removed_at_exit = std::atexit([] {
    std::error_code error;
    std::filesystem::remove_all(std::filesystem::path(output_path()).parent_path(), error);
  }) == 0;
  (void)removed_at_exit;
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace enhanced;
  bool converted = false;
  try {
    convert_jsonl_to_ebin(fuzz::input_file().hold(data, size), output_path(), size % 2 == 0 ? 4 : 0);
    converted = true;
  } catch (const Error&) {
  }
  if (converted) {
    try {
      Dataset::open(output_path());
    } catch (const Error& e) {
      std::fprintf(stderr, "the converter wrote an .ebin that does not open: %s\n", e.what());
      std::abort();
    }
    std::remove(output_path().c_str());
  }
  return 0;
}
