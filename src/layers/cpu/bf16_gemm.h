// The bf16 twin of small_gemm for CPUs with AVX512-BF16 or AMX-BF16: C (M x N) (+)= A (M x K)
// B (K x N), A and B in bfloat16, C in FP32. B is packed once into 32-column panels of K/2 rows
// of column pairs (element (k, n) and (k + 1, n) side by side, as VDPBF16PS and TDPBF16PS read
// them), K padded with zero rows to a multiple of 32 (one AMX tile's depth); A is row-major
// bfloat16. Each product of two bfloat16 numbers is exact in FP32, so the results differ from the
// reference path (small_gemm on operands rounded to bfloat16) only by the order of FP32 sums.
#pragma once

#include <cstddef>
#include <cstdint>

#include "layers/cpu/line_requests.h"

namespace enhanced::bf16_gemm {

inline constexpr int kPanelWidth = 32;

// K as packed: rounded up to a multiple of 32.
inline size_t padded_depth(int k) { return static_cast<size_t>((k + 31) / 32 * 32); }

// uint16_t elements of multiply's workspace for depth k: one block of 32 of A's rows, K padded
// (the AMX kernel copies a ragged block there; the AVX512-BF16 kernel needs none). A workspace
// sized for a K serves every smaller one.
inline constexpr int kBlockRowsOfA = 32;
inline size_t multiply_workspace_size(int k) { return kBlockRowsOfA * padded_depth(k); }

// multiply's kernel: C (M x N, row stride ldc) (+)= A (M x K, row stride lda) * packed (K x N);
// workspace: multiply_workspace_size(k) elements, the caller's; requests: line_requests.h.
using Kernel = void (*)(float* c, int ldc, const uint16_t* a, int lda, const uint16_t* packed, int m, int n, int k,
                        bool accumulate, uint16_t* workspace, LineRequests requests);

// The instructions a kernel runs on.
enum class Isa { avx512_bf16, amx_bf16 };

// The kernel for those instructions where this process runs them, else nullptr. AMX needs the
// CPU's AMX-BF16 and the kernel's leave to use the tile data (arch_prctl, asked once).
Kernel native_kernel(Isa isa);

// Whether multiply can run, and on what ("amx-bf16", "avx512-bf16", "a test's kernel" or
// "none"): a test's kernel where one is set, else AMX where the process runs it, else
// AVX512-BF16. ENHANCED_BF16_KERNEL=avx512-bf16 keeps a CPU with AMX on AVX512-BF16 (to measure
// one against the other); any other value than that or amx-bf16 is an error.
bool available();
const char* kernel_name();

// For tests: multiply runs `kernel` (a native one, or the same kernel sources compiled against
// models of the instructions: tests/bf16_isa_model.h) until it is set back to nullptr. Not to be
// changed while a multiply runs.
void set_kernel_for_tests(Kernel kernel);

// uint16_t elements needed to pack a K x N operand (K to padded_depth, N to whole panels).
size_t packed_size(int k, int n);

// Packs rows [row_offset, row_offset + k) of a total_k-row operand whose element (k, n) is
// source[n * stride_n + k * stride_k], rounded to bfloat16 (to_bf16_bits), zero-padded; as
// small_gemm::pack_rows, so [A; B] can be stacked along K in two calls.
void pack_rows(uint16_t* packed, int total_k, int row_offset, const float* source, int k, int n, size_t stride_n,
               size_t stride_k);

// Packs `count` rows of bfloat16 already converted (row r: rows + r * ld, n elements) as K rows
// [row_offset, row_offset + count) of an operand packed to depth padded_k (padded_depth of its K;
// row_offset even); an odd count's last pair gets a zero second row. What the LSTM's backward
// writes its gate gradients into a step at a time: nothing is left to pack afterwards.
void pack_converted_rows(uint16_t* packed, size_t padded_k, int row_offset, const uint16_t* rows, size_t ld,
                         int count, int n);

// Zeroes K rows [first_row, padded_k) of an operand packed to depth padded_k (first_row even).
void zero_rows(uint16_t* packed, size_t padded_k, int first_row, int n);

// dst (rows, columns, row stride ld_dst) = source (rows, columns, row stride ld_source), rounded to
// bfloat16. Vectorised (to_bf16_bits' bits exactly).
void convert_rows(uint16_t* dst, int ld_dst, const float* source, int ld_source, int rows, int columns);

// The same, and values rounded in place to those bfloat16 numbers (as floats).
void convert_rows_rounding(uint16_t* dst, size_t ld_dst, float* values, size_t ld_values, int rows, int columns);

// dst[0, n) = source[0, n) rounded to the nearest bfloat16, as floats (the reference path's
// operands; dst == source rounds in place). Vectorised.
void round_floats(float* dst, const float* source, size_t n);

// dst (columns, rows, row stride ld_dst) = source (rows, columns, row stride ld_source) transposed.
void transpose(uint16_t* dst, size_t ld_dst, const uint16_t* source, size_t ld_source, int rows, int columns);

// While one is alive on a thread, the AMX kernel keeps its tile configuration from one multiply to
// the next: LDTILECFG at the session's first multiply, TILERELEASE at its end, not both in every
// call (a layer's 400 steps make 800 calls). Other kernels ignore it. Sessions nest.
class TileSession {
 public:
  TileSession();
  ~TileSession();
  TileSession(const TileSession&) = delete;
  TileSession& operator=(const TileSession&) = delete;
};

// A thread's session as the kernels see it: how many are open, and the release of the kernel
// that configured the tiles in them (null: none has).
struct TileSessionState {
  int depth = 0;
  void (*release)() = nullptr;
};
TileSessionState& tile_session();

// C (M x N, row stride ldc) = A (M x K, row stride lda, bfloat16) * packed (K x N), or += when
// accumulate, on the kernel available() names. Fails unless available(). workspace:
// multiply_workspace_size(k) elements (the caller's: a multiply allocates nothing); requests:
// line_requests.h.
void multiply(float* c, int ldc, const uint16_t* a, int lda, const uint16_t* packed, int m, int n, int k,
              bool accumulate, uint16_t* workspace, LineRequests requests = {});

}  // namespace enhanced::bf16_gemm
