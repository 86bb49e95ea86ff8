// The bf16 twin of small_gemm for CPUs with AVX512-BF16: C (M x N) (+)= A (M x K) B (K x N), A
// and B in bfloat16, C in FP32. B is packed once into 32-column panels of K/2 rows of column
// pairs (element (k, n) and (k + 1, n) side by side, as VDPBF16PS reads them); A is row-major
// bfloat16. Each product of two bfloat16 numbers is exact in FP32, so the results differ from the
// reference path (small_gemm on operands rounded to bfloat16) only by the order of FP32 sums.
#pragma once

#include <cstddef>
#include <cstdint>

namespace enhanced::bf16_gemm {

inline constexpr int kPanelWidth = 32;

// multiply's kernel: C (M x N, row stride ldc) (+)= A (M x K, row stride lda) * packed (K x N).
using Kernel = void (*)(float* c, int ldc, const uint16_t* a, int lda, const uint16_t* packed, int m, int n, int k,
                        bool accumulate);

// Whether multiply can run: this CPU has AVX512-BF16 (and the OS keeps the ZMM state), or a test
// has set a model kernel.
bool available();

// For tests: multiply runs `kernel` instead of the instructions, on any CPU, until it is set back
// to nullptr. The tests pass the same kernel source compiled against SIMDe's portable model of
// AVX512-BF16 (tests/bf16_isa_model.h). Not to be changed while a multiply runs.
void set_model_kernel_for_tests(Kernel kernel);

// uint16_t elements needed to pack a K x N operand (K rounded up to even, N to whole panels).
size_t packed_size(int k, int n);

// Packs rows [row_offset, row_offset + k) of a total_k-row operand whose element (k, n) is
// source[n * stride_n + k * stride_k], rounded to bfloat16 (to_bf16_bits), zero-padded; as
// small_gemm::pack_rows, so [A; B] can be stacked along K in two calls.
void pack_rows(uint16_t* packed, int total_k, int row_offset, const float* source, int k, int n, size_t stride_n,
               size_t stride_k);

// dst (rows, columns, row stride ld_dst) = source (rows, columns, row stride ld_source), rounded to
// bfloat16.
void convert_rows(uint16_t* dst, int ld_dst, const float* source, int ld_source, int rows, int columns);

// C (M x N, row stride ldc) = A (M x K, row stride lda, bfloat16) * packed (K x N), or += when
// accumulate: through the model kernel where a test has set one, else the instructions. Fails
// unless available().
void multiply(float* c, int ldc, const uint16_t* a, int lda, const uint16_t* packed, int m, int n, int k,
              bool accumulate);

}  // namespace enhanced::bf16_gemm
