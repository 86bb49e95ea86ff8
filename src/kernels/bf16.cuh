// bfloat16 <-> FP32 conversions on the GPU for --precision bf16 (enhanced/precision.h): the
// operands cuDNN and cuBLAS read in bfloat16 are converted from the FP32 tensors the rest of the
// step keeps, and their bfloat16 results back. A bfloat16 lives in device memory as its 16 bits
// (uint16_t here, __nv_bfloat16 inside the .cu files), so this header stays host-compilable.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda_check.h"

namespace enhanced::cuda {

// out[i] = in[i] rounded to the nearest bfloat16, ties to even (__float2bfloat16_rn: the
// rounding of to_bf16_bits in enhanced/precision.h). `count` elements, asynchronous on `stream`.
void convert_to_bf16(uint16_t* out, const float* in, size_t count, cudaStream_t stream);

// out[i] = in[i] widened to FP32 (exact).
void convert_from_bf16(float* out, const uint16_t* in, size_t count, cudaStream_t stream);

}  // namespace enhanced::cuda
