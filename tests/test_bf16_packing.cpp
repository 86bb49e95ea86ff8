// The bf16 kernels' packing and conversion (layers/cpu/bf16_gemm.h): plain code that runs on
// every CPU, vectorised where the CPU allows, checked here element by element against the layout
// and the rounding as bf16_gemm.h and enhanced/precision.h define them.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "bf16_kernels.h"
#include "enhanced/precision.h"
#include "enhanced/random.h"
#include "layers/cpu/bf16_gemm.h"

namespace enhanced {
namespace {

using testing::bits_of;

constexpr uint16_t kGarbage = 0xffff;  // what a reused buffer may hold (a NaN's bits)

// Random float bit patterns, every class among them: NaNs, infinities, subnormals, zeros, ties.
std::vector<float> random_bit_patterns(Random& random, size_t n) {
  std::vector<float> values(n);
  for (float& v : values) {
    uint32_t bits = static_cast<uint32_t>(random.next_u64());
    switch (random.below(6)) {
      case 0: bits |= 0x7f800000u; break;                     // infinities and NaNs
      case 1: bits &= 0x807fffffu; break;                     // zeros and subnormals
      case 2: bits = (bits & 0xffff0000u) | 0x8000u; break;   // a tie
      default: break;
    }
    std::memcpy(&v, &bits, sizeof v);
  }
  return values;
}


// Where element (k, n) of a K x N operand packed to depth padded_k lives (bf16_gemm.h's layout).
size_t packed_at(size_t padded_k, int k, int n) {
  const int panel = n / bf16_gemm::kPanelWidth, column = n % bf16_gemm::kPanelWidth;
  return static_cast<size_t>(panel) * bf16_gemm::kPanelWidth * padded_k + static_cast<size_t>(k / 2) * 64 +
         2 * column + k % 2;
}

// The packed operand as the layout defines it: element (k, n) rounded, zero in every pad.
std::vector<uint16_t> expected_packing(const std::vector<float>& source, int k, int n, size_t stride_n,
                                       size_t stride_k) {
  const size_t padded_k = bf16_gemm::padded_depth(k);
  std::vector<uint16_t> packed(bf16_gemm::packed_size(k, n), 0);
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < n; ++j) packed[packed_at(padded_k, i, j)] = to_bf16_bits(source[j * stride_n + i * stride_k]);
  return packed;
}

TEST(Bf16Packing, ConversionIsToBf16BitsOnEveryClassOfFloat) {
  Random random(3);
  for (int trial = 0; trial < 30; ++trial) {
    const int rows = 1 + static_cast<int>(random.below(5)), columns = 1 + static_cast<int>(random.below(100));
    const int ld_source = columns + static_cast<int>(random.below(3)), ld_dst = columns + static_cast<int>(random.below(3));
    const std::vector<float> source = random_bit_patterns(random, static_cast<size_t>(rows) * ld_source);
    std::vector<uint16_t> converted(static_cast<size_t>(rows) * ld_dst, kGarbage), rounding = converted;
    std::vector<float> in_place = source;
    bf16_gemm::convert_rows(converted.data(), ld_dst, source.data(), ld_source, rows, columns);
    bf16_gemm::convert_rows_rounding(rounding.data(), ld_dst, in_place.data(), ld_source, rows, columns);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < ld_source; ++j) {
        const size_t at = static_cast<size_t>(r) * ld_source + j;
        if (j >= columns) {  // past the columns: untouched
          ASSERT_EQ(bits_of(in_place[at]), bits_of(source[at]));
          continue;
        }
        const uint16_t expected = to_bf16_bits(source[at]);
        ASSERT_EQ(converted[static_cast<size_t>(r) * ld_dst + j], expected) << std::hex << bits_of(source[at]);
        ASSERT_EQ(rounding[static_cast<size_t>(r) * ld_dst + j], expected) << std::hex << bits_of(source[at]);
        ASSERT_EQ(bits_of(in_place[at]), static_cast<uint32_t>(expected) << 16) << std::hex << bits_of(source[at]);
      }
    for (int r = 0; r < rows; ++r)
      for (int j = columns; j < ld_dst; ++j) ASSERT_EQ(converted[static_cast<size_t>(r) * ld_dst + j], kGarbage);
  }
}

TEST(Bf16Packing, PackRowsWritesTheLayoutAndEveryPad) {
  Random random(5);
  for (int trial = 0; trial < 40; ++trial) {
    const int k = 1 + static_cast<int>(random.below(90)), n = 1 + static_cast<int>(random.below(100));
    const bool transposed = trial % 2 == 1;  // element (k, n) at n * K or at k * N
    const size_t stride_n = transposed ? static_cast<size_t>(k) : 1, stride_k = transposed ? 1 : static_cast<size_t>(n);
    const std::vector<float> source = random_bit_patterns(random, static_cast<size_t>(k) * n);
    std::vector<uint16_t> packed(bf16_gemm::packed_size(k, n), kGarbage);
    // Stacked along K in two calls, as [W_ih; W_hh] is.
    const int split = static_cast<int>(random.below(k + 1));
    bf16_gemm::pack_rows(packed.data(), k, 0, source.data(), split, n, stride_n, stride_k);
    bf16_gemm::pack_rows(packed.data(), k, split, source.data() + split * stride_k, k - split, n, stride_n, stride_k);
    ASSERT_EQ(packed, expected_packing(source, k, n, stride_n, stride_k)) << k << " x " << n << " split " << split;
  }
}

// What the LSTM's backward does a step at a time: the step's rows converted, packed at an even
// offset, an odd count padded with a zero row, the chunk's pad rows zeroed once.
TEST(Bf16Packing, PackingConvertedRowsInStepsGivesTheWholeOperandsPacking) {
  Random random(7);
  for (int trial = 0; trial < 30; ++trial) {
    const int rows_a_step = 1 + static_cast<int>(random.below(9)), steps = 1 + static_cast<int>(random.below(12));
    const int n = 1 + static_cast<int>(random.below(80)), pair_rows = rows_a_step + rows_a_step % 2;
    const int k = steps * pair_rows;
    const std::vector<float> source = random_bit_patterns(random, static_cast<size_t>(steps) * rows_a_step * n);
    // The whole operand, with the pad row after each odd step a zero row.
    std::vector<float> whole(static_cast<size_t>(k) * n, 0.0f);
    for (int s = 0; s < steps; ++s)
      std::memcpy(&whole[static_cast<size_t>(s) * pair_rows * n], &source[static_cast<size_t>(s) * rows_a_step * n],
                  sizeof(float) * rows_a_step * n);
    const size_t padded_k = bf16_gemm::padded_depth(k);
    std::vector<uint16_t> packed(bf16_gemm::packed_size(k, n), kGarbage), step_rows(static_cast<size_t>(rows_a_step) * n);
    bf16_gemm::zero_rows(packed.data(), padded_k, k, n);
    for (int s = 0; s < steps; ++s) {
      bf16_gemm::convert_rows(step_rows.data(), n, &source[static_cast<size_t>(s) * rows_a_step * n], n, rows_a_step, n);
      bf16_gemm::pack_converted_rows(packed.data(), padded_k, s * pair_rows, step_rows.data(), n, rows_a_step, n);
    }
    ASSERT_EQ(packed, expected_packing(whole, k, n, 1, static_cast<size_t>(n))) << rows_a_step << " rows, " << steps;
  }
}

TEST(Bf16Packing, TransposeMovesEveryElementAndNothingElse) {
  Random random(11);
  for (int trial = 0; trial < 24; ++trial) {
    // Random shapes, then whole 32 x 32 blocks with ragged edges (the LSTM's 64 x 160 and more).
    const bool blocks = trial >= 20;
    const int rows = blocks ? 64 + (trial - 20) * 3 : 1 + static_cast<int>(random.below(70));
    const int columns = blocks ? 160 + (trial - 20) * 5 : 1 + static_cast<int>(random.below(50));
    const size_t ld_source = columns + random.below(3), ld_dst = rows + random.below(3);
    std::vector<uint16_t> source(rows * ld_source);
    for (uint16_t& v : source) v = static_cast<uint16_t>(random.below(0xffff));
    std::vector<uint16_t> dst(columns * ld_dst, kGarbage);
    bf16_gemm::transpose(dst.data(), ld_dst, source.data(), ld_source, rows, columns);
    for (int c = 0; c < columns; ++c)
      for (size_t r = 0; r < ld_dst; ++r)
        ASSERT_EQ(dst[c * ld_dst + r], r < static_cast<size_t>(rows) ? source[r * ld_source + c] : kGarbage);
  }
}

}  // namespace
}  // namespace enhanced
