// Fuzzes the safetensors reader (header, offsets, dtypes, shapes), every tensor's copy out, and
// the checkpoint load on top (metadata, the model's shapes, finiteness). Any Error is a refusal,
// which is fine; a crash, a sanitizer report or an allocation beyond libFuzzer's limit is a bug.
#include <cstddef>
#include <cstdint>

#include "enhanced/checkpoint.h"
#include "enhanced/common.h"
#include "enhanced/safetensors.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace enhanced;
  try {
    const SafetensorsReader reader(fuzz::input_file().hold(data, size));
    for (const auto& [name, tensor] : reader.tensors()) {
      try {
        if (tensor.dtype == "F32") reader.floats(name, tensor.shape);
        else if (tensor.dtype == "I32") reader.int32s(name);
        else if (tensor.dtype == "U64") reader.uint64s(name);
      } catch (const Error&) {
      }
    }
    // With the engine's metadata: read_model; without: the model from the shapes (time pooling,
    // with T = 16 as the data would give it, for inputs of odd size).
    read_checkpoint(reader, {BlendMode::mean, size % 2 ? PoolMode::time : PoolMode::feature, 16});
  } catch (const Error&) {
  }
  return 0;
}
