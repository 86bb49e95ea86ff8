// The non-temporal row copy against the source, on every start within a line and on lengths that
// do and do not fill lines: each of its ways (AVX-512 lines where the CPU has them, SSE2,
// memcpy) copies exactly [0, n) and touches nothing around it.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "layers/cpu/stream_store.h"

namespace enhanced {
namespace {

TEST(StreamStore, CopiesExactlyTheRowAtEveryAlignment) {
  std::vector<float> source(600);
  for (size_t i = 0; i < source.size(); ++i) source[i] = 0.25f * static_cast<float>(i) - 7.0f;
  alignas(64) static float destination[700];
  for (const size_t n : {0, 1, 3, 4, 15, 16, 17, 64, 512, 515}) {
    for (size_t start = 0; start < 20; ++start) {  // dst 64-, 16- and 4-byte aligned
      std::fill(std::begin(destination), std::end(destination), -1.0f);
      stream_store::copy(destination + start, source.data() + 1, n);  // a source not starting a line
      stream_store::fence();
      ASSERT_EQ(std::memcmp(destination + start, source.data() + 1, n * sizeof(float)), 0) << n << " at " << start;
      for (size_t i = 0; i < start; ++i) ASSERT_EQ(destination[i], -1.0f) << "before, " << n << " at " << start;
      for (size_t i = start + n; i < std::size(destination); ++i)
        ASSERT_EQ(destination[i], -1.0f) << "after, " << n << " at " << start;
    }
  }
}

}  // namespace
}  // namespace enhanced
