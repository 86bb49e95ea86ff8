// Max-pool on the GPU: the CUDA twin of layers/maxpool.h,
// with the same argument order plus the stream / library handle last (kernels/layers.h).
#pragma once

#include <cstdint>

#include "enhanced/model.h"
#include "kernels/cuda_check.h"

namespace enhanced::cuda {

// pooled (B, F), argmax (B, F); y (B, T, C). Ties go to the first maximum (strict >).
void maxpool_forward(float* pooled, int32_t* argmax, const float* y, int batch, int seq_len, int channels,
                     PoolMode mode, cudaStream_t stream);

// dy (B, T, C) = scatter of dpooled to the argmax elements, zero elsewhere.
void maxpool_backward(float* dy, const int32_t* argmax, const float* dpooled, int batch, int seq_len, int channels,
                      PoolMode mode, cudaStream_t stream);

}  // namespace enhanced::cuda
