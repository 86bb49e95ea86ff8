// Carved buffers (enhanced/carve.h): every piece of one allocation starts where a separate
// cudaMalloc would, on a 256-byte boundary, whatever the pieces' sizes.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "cuda_test_util.h"
#include "enhanced/carve.h"
#include "enhanced/model.h"

namespace enhanced {
namespace {

bool aligned(const void* at) { return reinterpret_cast<uintptr_t>(at) % kCarveAlignment == 0; }

// The bf16 LSTM's staging (x16, y16, dy16, dx16) at CudaBf16.BiLstmMatchesCpuOnRoundedOperands'
// first shape, B 3, T 5, D 4, H 3: back to back, y16 began 120 bytes in and dy16 300.
TEST(CarvedPieces, OddSizedPiecesEachStartOnTheBoundaryAndDoNotOverlap) {
  const size_t xs = 3 * 5 * 4, ys = 3 * 5 * 2 * 3;
  const std::array<size_t, 4> counts = {xs, ys, ys, xs};
  const CarvedPieces<4> pieces = carve_pieces<4>(counts, sizeof(uint16_t));
  for (size_t i = 0; i < counts.size(); ++i) {
    EXPECT_EQ(pieces.offsets[i] * sizeof(uint16_t) % kCarveAlignment, 0u) << "piece " << i;
    const size_t end = pieces.offsets[i] + counts[i];
    EXPECT_LE(end, i + 1 < counts.size() ? pieces.offsets[i + 1] : pieces.total) << "piece " << i;
  }
  EXPECT_EQ(pieces.offsets[0], 0u);
  // No more padding than a block a piece.
  EXPECT_LT(pieces.total * sizeof(uint16_t), (2 * xs + 2 * ys) * sizeof(uint16_t) + 4 * kCarveAlignment);
}

TEST(CarvedPieces, FloatAndDoubleActivationsStartOnTheBoundary) {
  const ModelConfig config = testing::small_config(BlendMode::mean, PoolMode::feature);  // D 7, H 5, T 6: odd sizes
  for (const LstmRows rows : {LstmRows::fused_pool, LstmRows::dense_output}) {
    const std::vector<ActivationSlot> layout = activation_layout(config, 3, 17, 5, rows);
    const size_t count = activation_count(layout);
    auto check = [&](auto tag) {
      using Real = decltype(tag);
      std::unique_ptr<Real, decltype(&std::free)> base(
          static_cast<Real*>(std::aligned_alloc(kCarveAlignment, carved_count(count, 1) * sizeof(Real))), &std::free);
      ActivationTensors<Real> act;
      EXPECT_EQ(act.carve(base.get(), layout), count);
      const bool fused = rows == LstmRows::fused_pool;
      using Pieces = std::vector<const Real*>;
      const Pieces always{act.x,       act.pooled, act.logits, act.dlogits, act.sample_losses,
                          act.dpooled, act.dx,     act.dense_workspace};
      const Pieces lstm_state{act.gates, act.cell, act.lstm_workspace}, dense_rows{act.y, act.dy};
      for (const Pieces& carved : {always, fused ? lstm_state : dense_rows})
        for (const Real* at : carved) {
          ASSERT_NE(at, nullptr);
          EXPECT_TRUE(aligned(at)) << "a piece " << (at - base.get()) << " elements in, element size " << sizeof(Real);
        }
      // What the kind does not keep is null, not an alias of the next piece.
      for (const Real* at : fused ? dense_rows : lstm_state) EXPECT_EQ(at, nullptr);
    };
    check(float{});
    check(double{});
  }
}

}  // namespace
}  // namespace enhanced
