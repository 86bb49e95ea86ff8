// Fuzzes the --class-weights file parser (read_class_weights: separators, numbers, their count,
// finiteness and sign) with L = 4, the class weights tests' L (their files are the seeds), for
// inputs of even size and L = 1 for odd ones (the bound on the count is reached at once). Any
// Error is a refusal, which is fine; a crash or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>

#include "enhanced/common.h"
#include "fuzz_file.h"
#include "train/class_weights.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace enhanced;
  try {
    read_class_weights(fuzz::input_file().hold(data, size), size % 2 == 0 ? 4 : 1);
  } catch (const Error&) {
  }
  return 0;
}
