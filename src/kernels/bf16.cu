// bfloat16 <-> FP32 conversion kernels (kernels/bf16.cuh): grid-stride loops, one element per
// thread per iteration.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/bf16.cuh"

namespace enhanced::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;

__global__ void to_bf16_kernel(__nv_bfloat16* __restrict__ out, const float* __restrict__ in, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void from_bf16_kernel(float* __restrict__ out, const __nv_bfloat16* __restrict__ in, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

unsigned blocks_for(size_t count) {
  return static_cast<unsigned>(std::clamp<int64_t>((static_cast<int64_t>(count) + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

}  // namespace

void convert_to_bf16(uint16_t* out, const float* in, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  to_bf16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(reinterpret_cast<__nv_bfloat16*>(out), in,
                                                             static_cast<int64_t>(count));
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void convert_from_bf16(float* out, const uint16_t* in, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  from_bf16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(out, reinterpret_cast<const __nv_bfloat16*>(in),
                                                               static_cast<int64_t>(count));
  ENHANCED_CUDA_CHECK_LAUNCH();
}

}  // namespace enhanced::cuda
