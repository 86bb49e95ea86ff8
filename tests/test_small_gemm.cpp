// The recurrent-step GEMM against cblas on shapes with partial panels and row blocks.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "enhanced/random.h"
#include "layers/cpu/blas.h"
#include "layers/cpu/small_gemm.h"

namespace enhanced {
namespace {

TEST(SmallGemm, MatchesBlasForBothOperandLayouts) {
  Random random(21);
  for (const auto& [m, n, k] : {std::tuple{64, 512, 128}, std::tuple{1, 1, 1}, std::tuple{9, 33, 7},
                               std::tuple{13, 20, 128}, std::tuple{8, 32, 5}, std::tuple{3, 96, 31}}) {
    const int lda = k + 3, ldc = n + 5;  // strided rows, as the LSTM's (B, T, .) layout gives
    std::vector<float> a(static_cast<size_t>(m) * lda), w(static_cast<size_t>(n) * k), wt(static_cast<size_t>(k) * n);
    for (float& v : a) v = static_cast<float>(random.uniform(-1, 1));
    for (float& v : w) v = static_cast<float>(random.uniform(-1, 1));
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < k; ++i) wt[static_cast<size_t>(i) * n + j] = w[static_cast<size_t>(j) * k + i];
    for (const bool accumulate : {false, true}) {
      // B given as W (N x K) row-major, used transposed (the forward's h W^T) ...
      std::vector<float> packed(small_gemm::packed_size(k, n));
      small_gemm::pack(packed.data(), w.data(), k, n, static_cast<size_t>(k), 1);
      std::vector<float> c(static_cast<size_t>(m) * ldc, 0.5f), expected = c;
      small_gemm::multiply(c.data(), ldc, a.data(), lda, packed.data(), m, n, k, accumulate);
      gemm(false, true, m, n, k, 1.0f, a.data(), lda, w.data(), k, accumulate ? 1.0f : 0.0f, expected.data(), ldc);
      for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], expected[i], 1e-5 * k) << m << "x" << n << "x" << k << " @" << i;
      // ... and as W^T (K x N) row-major used as is (the backward's dgates W).
      small_gemm::pack(packed.data(), wt.data(), k, n, 1, static_cast<size_t>(n));
      std::vector<float> c2(static_cast<size_t>(m) * ldc, 0.5f);
      small_gemm::multiply(c2.data(), ldc, a.data(), lda, packed.data(), m, n, k, accumulate);
      for (size_t i = 0; i < c2.size(); ++i) ASSERT_NEAR(c2[i], expected[i], 1e-5 * k) << "transposed @" << i;
    }
  }
}

// Line requests (the LSTM backward's next step's rows) change nothing in C: bit for bit the
// product without them, on K that is and is not a whole number of request turns, with fewer and
// more lines than turns.
TEST(SmallGemm, LineRequestsLeaveTheProductAlone) {
  Random random(22);
  std::vector<float> memory(4096);
  std::vector<const char*> lines;
  for (size_t i = 0; i < memory.size(); i += 16) lines.push_back(reinterpret_cast<const char*>(&memory[i]));
  for (const auto& [m, n, k] : {std::tuple{64, 128, 512}, std::tuple{9, 33, 7}, std::tuple{13, 20, 17},
                               std::tuple{3, 96, 40}, std::tuple{1, 1, 1}}) {
    const int lda = k + 3, ldc = n + 5;
    std::vector<float> a(static_cast<size_t>(m) * lda), w(static_cast<size_t>(k) * n);
    for (float& v : a) v = static_cast<float>(random.uniform(-1, 1));
    for (float& v : w) v = static_cast<float>(random.uniform(-1, 1));
    std::vector<float> packed(small_gemm::packed_size(k, n));
    small_gemm::pack(packed.data(), w.data(), k, n, 1, static_cast<size_t>(n));
    for (const int count : {1, 5, static_cast<int>(lines.size())}) {
      for (const bool accumulate : {false, true}) {
        std::vector<float> plain(static_cast<size_t>(m) * ldc, 0.5f), requested = plain;
        small_gemm::multiply(plain.data(), ldc, a.data(), lda, packed.data(), m, n, k, accumulate);
        small_gemm::multiply(requested.data(), ldc, a.data(), lda, packed.data(), m, n, k, accumulate,
                             LineRequests{lines.data(), count});
        for (size_t i = 0; i < plain.size(); ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(requested[i]), std::bit_cast<uint32_t>(plain[i]))
              << m << "x" << n << "x" << k << ", " << count << " lines, @" << i;
      }
    }
  }
}

}  // namespace
}  // namespace enhanced
