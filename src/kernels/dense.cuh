// The dense layer (cuBLAS) on the GPU: the CUDA twin of layers/dense.h,
// with the same argument order plus the stream / library handle last (kernels/layers.h).
#pragma once

#include <cstdint>

#include "enhanced/model.h"
#include "kernels/cuda_check.h"

namespace enhanced::cuda {

// out (B, L) = in (B, F) W^T + b, W (L, F).
void dense_forward(float* out, const float* in, const float* weight, const float* bias, int batch, int in_features,
                   int out_features, cublasHandle_t handle, cudaStream_t stream);

// din (B, F) =; dweight (L, F) +=; dbias (L) += (column sums in batch order: deterministic).
void dense_backward(float* din, float* dweight, float* dbias, const float* dout, const float* in, const float* weight,
                    int batch, int in_features, int out_features, cublasHandle_t handle, cudaStream_t stream);

}  // namespace enhanced::cuda
