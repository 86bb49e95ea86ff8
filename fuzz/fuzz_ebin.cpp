// Fuzzes Dataset::open (header, section bounds, offsets, ids, labels) and then walks every
// sample as the loader does: every position's three fields, and each sample into a batch.
// Whatever open() accepts must be safe to read everywhere.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "enhanced/batch.h"
#include "enhanced/common.h"
#include "enhanced/dataset.h"
#include "enhanced/loader.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace enhanced;
  try {
    const Dataset dataset = Dataset::open(fuzz::input_file().hold(data, size));
    int64_t sum = 0;
    for (int64_t s = 0; s < dataset.num_samples(); ++s) {
      sum += (dataset.has_labels() ? dataset.label(s) : 0) + static_cast<int64_t>(dataset.identifier_count(s));
      for (int t = 0; t < dataset.seq_len(); ++t) {
        for (int32_t id : dataset.identifier(s, t)) sum += id;
        for (int32_t id : dataset.auxiliary(s, t)) sum += id;
        sum += dataset.cur_word(s, t);
      }
      Batch batch;
      fill_batch(batch, dataset, &s, 1);
    }
    dataset.check_fits_model(static_cast<int64_t>(dataset.max_model_token_id()) + 1, dataset.num_labels());
    volatile int64_t keep = sum;
    (void)keep;
  } catch (const Error&) {
  }
  return 0;
}
