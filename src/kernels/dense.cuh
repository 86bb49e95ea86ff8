// The dense layer (cuBLAS) on the GPU: the CUDA twin of layers/dense.h,
// with the same argument order plus the stream / library handle last (kernels/layers.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "enhanced/model.h"
#include "kernels/cuda_check.h"

namespace enhanced::cuda {

// bf16_scratch: null for FP32 GEMMs (cublasSgemm). Otherwise --precision bf16: device room for
// dense_bf16_scratch_size(B, F, L) bfloat16s, owned by the caller; the GEMMs' operands (in, W,
// dout) are rounded to bfloat16 into it (RNE) and multiplied by cublasGemmEx with CUDA_R_16BF
// operands, FP32 outputs (out, din, dweight) and CUBLAS_COMPUTE_32F accumulation. The bias and
// its gradient stay FP32 sums.
size_t dense_bf16_scratch_size(int batch, int in_features, int out_features);

// out (B, L) = in (B, F) W^T + b, W (L, F).
void dense_forward(float* out, const float* in, const float* weight, const float* bias, int batch, int in_features,
                   int out_features, uint16_t* bf16_scratch, cublasHandle_t handle, cudaStream_t stream);

// din (B, F) =; dweight (L, F) +=; dbias (L) += (column sums in batch order: deterministic).
void dense_backward(float* din, float* dweight, float* dbias, const float* dout, const float* in, const float* weight,
                    int batch, int in_features, int out_features, uint16_t* bf16_scratch, cublasHandle_t handle,
                    cudaStream_t stream);

}  // namespace enhanced::cuda
