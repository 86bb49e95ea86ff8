// Dense layer through cuBLAS. cuBLAS is column-major; a row-major (r, c) matrix is the
// column-major (c, r) matrix with leading dimension c, so each row-major product is computed
// as its transpose:
//   forward   out (B, L) = in (B, F) W^T       <=>  out^T (L, B)  = W (op T of W^T (F, L)) in^T (F, B)
//   dweight   dW (L, F) += dout^T (L, B) in     <=>  dW^T (F, L)  += in^T (F, B) (op T of dout^T (L, B))
//   din       din (B, F) = dout (B, L) W (L, F) <=>  din^T (F, B) = W^T (F, L) dout^T (L, B)
#include "kernels/dense.cuh"

namespace enhanced::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void broadcast_bias_kernel(float* __restrict__ out, const float* __restrict__ bias, int64_t count,
                                      int out_features) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < count) out[index] = bias[index % out_features];
}

// dbias[l] += sum over b of dout[b, l], b in order: one writer per l, deterministic.
__global__ void bias_gradient_kernel(float* __restrict__ dbias, const float* __restrict__ dout, int batch,
                                     int out_features) {
  const int l = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (l >= out_features) return;
  float sum = dbias[l];
  for (int b = 0; b < batch; ++b) sum += dout[static_cast<int64_t>(b) * out_features + l];
  dbias[l] = sum;
}

}  // namespace

void dense_forward(float* out, const float* in, const float* weight, const float* bias, int batch, int in_features,
                   int out_features, cublasHandle_t handle, cudaStream_t stream) {
  if (batch == 0) return;
  const int64_t count = static_cast<int64_t>(batch) * out_features;
  broadcast_bias_kernel<<<static_cast<unsigned>((count + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      out, bias, count, out_features);
  ENHANCED_CUDA_CHECK_LAUNCH();
  const float one = 1.0f;
  ENHANCED_CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, out_features, batch, in_features, &one, weight,
                                    in_features, in, in_features, &one, out, out_features));
}

void dense_backward(float* din, float* dweight, float* dbias, const float* dout, const float* in, const float* weight,
                    int batch, int in_features, int out_features, cublasHandle_t handle, cudaStream_t stream) {
  if (batch == 0) return;
  const float one = 1.0f, zero = 0.0f;
  ENHANCED_CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, in_features, out_features, batch, &one, in,
                                    in_features, dout, out_features, &one, dweight, in_features));
  bias_gradient_kernel<<<static_cast<unsigned>((out_features + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      dbias, dout, batch, out_features);
  ENHANCED_CUDA_CHECK_LAUNCH();
  ENHANCED_CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, in_features, batch, out_features, &one, weight,
                                    in_features, dout, out_features, &zero, din, in_features));
}

}  // namespace enhanced::cuda
