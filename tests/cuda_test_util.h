// What the CUDA test files share: the skip with the reason where no GPU can be used, and the
// small model and batch streams they train on.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "enhanced/batch.h"
#include "enhanced/device.h"
#include "enhanced/model.h"
#include "enhanced/random.h"
#include "gradcheck.h"

namespace enhanced::testing {

inline std::string gpu_unavailable() {
#ifdef ENHANCED_HAVE_CUDA
  return cuda_unavailable_reason();
#else
  return "this build has no CUDA backend (configured with ENHANCED_CUDA=OFF or no toolkit)";
#endif
}

// Every GPU test starts with this: SKIPPED with the reason, never a vacuous pass.
#define SKIP_WITHOUT_GPU()                                                 \
  do {                                                                     \
    const std::string skip_reason_ = ::enhanced::testing::gpu_unavailable(); \
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;               \
  } while (0)

inline ModelConfig small_config(BlendMode blend, PoolMode pool, int hidden = 5) {
  ModelConfig c;
  c.vocab_size = 23;
  c.embedding_dim = 7;
  c.hidden = hidden;
  c.seq_len = 6;
  c.num_labels = 4;
  c.blend = blend;
  c.pool = pool;
  return c;
}

// `count` batches of 4 samples over ids < vocab; every fifth has 2 samples, as an epoch's last.
inline std::vector<Batch> training_batches(const ModelConfig& config, int count, uint64_t seed,
                                           int64_t vocab = 0) {
  Random random(seed);
  const int ids = static_cast<int>(vocab > 0 ? vocab : config.vocab_size);
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i)
    batches.push_back(random_batch(i % 5 == 4 ? 2 : 4, config.seq_len, ids, config.num_labels, random));
  return batches;
}

}  // namespace enhanced::testing
