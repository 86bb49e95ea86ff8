// Fuzzes load_embedding_table over its three formats (the .npy header's dict literal, the
// word2vec header and rows, raw float32 with D = 2, the seeds' D).
#include <cstddef>
#include <cstdint>

#include "enhanced/common.h"
#include "enhanced/embedding_table.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace enhanced;
  try {
    const EmbeddingTable table = load_embedding_table(fuzz::input_file().hold(data, size), RawTableShape{2});
    if (table.values.size() != static_cast<size_t>(table.rows) * static_cast<size_t>(table.dim)) std::abort();
  } catch (const Error&) {
  }
  return 0;
}
