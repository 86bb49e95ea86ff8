// Dense layer through cuBLAS. cuBLAS is column-major; a row-major (r, c) matrix is the
// column-major (c, r) matrix with leading dimension c, so each row-major product is computed
// as its transpose:
//   forward   out (B, L) = in (B, F) W^T       <=>  out^T (L, B)  = W (op T of W^T (F, L)) in^T (F, B)
//   dweight   dW (L, F) += dout^T (L, B) in     <=>  dW^T (F, L)  += in^T (F, B) (op T of dout^T (L, B))
//   din       din (B, F) = dout (B, L) W (L, F) <=>  din^T (F, B) = W^T (F, L) dout^T (L, B)
//
// --precision bf16: the same three products through cublasGemmEx, A and B in CUDA_R_16BF (the
// operands rounded into the caller's scratch first), C in CUDA_R_32F, CUBLAS_COMPUTE_32F.
#include "kernels/dense.cuh"

#include "enhanced/carve.h"
#include "kernels/bf16.cuh"

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

// The bfloat16 copies of in (B, F), W (L, F) and dout (B, L), carved from the caller's scratch.
struct Bf16Operands {
  uint16_t *in, *weight, *dout;
};

CarvedPieces<3> bf16_pieces(int batch, int in_features, int out_features) {
  return carve_pieces<3>({static_cast<size_t>(batch) * in_features, static_cast<size_t>(out_features) * in_features,
                          static_cast<size_t>(batch) * out_features},
                         sizeof(uint16_t));
}

Bf16Operands carve_bf16(uint16_t* scratch, int batch, int in_features, int out_features) {
  const CarvedPieces<3> pieces = bf16_pieces(batch, in_features, out_features);
  return Bf16Operands{scratch + pieces.offsets[0], scratch + pieces.offsets[1], scratch + pieces.offsets[2]};
}

// C (m, n) = alpha op(A) op(B) + beta C, column-major, as cublasSgemm; A and B bfloat16, C FP32.
void gemm(cublasHandle_t handle, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
          const float* alpha, const void* a, int lda, const void* b, int ldb, const float* beta, float* c, int ldc,
          bool bf16) {
  if (!bf16) {
    ENHANCED_CUBLAS_CHECK(cublasSgemm(handle, op_a, op_b, m, n, k, alpha, static_cast<const float*>(a), lda,
                                      static_cast<const float*>(b), ldb, beta, c, ldc));
    return;
  }
  ENHANCED_CUBLAS_CHECK(cublasGemmEx(handle, op_a, op_b, m, n, k, alpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb,
                                     beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

size_t dense_bf16_scratch_size(int batch, int in_features, int out_features) {
  return bf16_pieces(batch, in_features, out_features).total;
}

void dense_forward(float* out, const float* in, const float* weight, const float* bias, int batch, int in_features,
                   int out_features, uint16_t* bf16_scratch, cublasHandle_t handle, cudaStream_t stream) {
  if (batch == 0) return;
  const int64_t count = static_cast<int64_t>(batch) * out_features;
  broadcast_bias_kernel<<<static_cast<unsigned>((count + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      out, bias, count, out_features);
  ENHANCED_CUDA_CHECK_LAUNCH();
  const void* a = weight;
  const void* b = in;
  if (bf16_scratch) {
    const Bf16Operands ops = carve_bf16(bf16_scratch, batch, in_features, out_features);
    convert_to_bf16(ops.weight, weight, static_cast<size_t>(out_features) * in_features, stream);
    convert_to_bf16(ops.in, in, static_cast<size_t>(batch) * in_features, stream);
    a = ops.weight;
    b = ops.in;
  }
  const float one = 1.0f;
  gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, out_features, batch, in_features, &one, a, in_features, b, in_features, &one,
       out, out_features, bf16_scratch != nullptr);
}

// With bf16_scratch, all three operands are converted again here: backward does not rely on what
// a forward left in the scratch.
void dense_backward(float* din, float* dweight, float* dbias, const float* dout, const float* in, const float* weight,
                    int batch, int in_features, int out_features, uint16_t* bf16_scratch, cublasHandle_t handle,
                    cudaStream_t stream) {
  if (batch == 0) return;
  const void *in_op = in, *dout_op = dout, *weight_op = weight;
  if (bf16_scratch) {
    const Bf16Operands ops = carve_bf16(bf16_scratch, batch, in_features, out_features);
    convert_to_bf16(ops.in, in, static_cast<size_t>(batch) * in_features, stream);
    convert_to_bf16(ops.weight, weight, static_cast<size_t>(out_features) * in_features, stream);
    convert_to_bf16(ops.dout, dout, static_cast<size_t>(batch) * out_features, stream);
    in_op = ops.in;
    dout_op = ops.dout;
    weight_op = ops.weight;
  }
  const bool bf16 = bf16_scratch != nullptr;
  const float one = 1.0f, zero = 0.0f;
  gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, in_features, out_features, batch, &one, in_op, in_features, dout_op,
       out_features, &one, dweight, in_features, bf16);
  bias_gradient_kernel<<<static_cast<unsigned>((out_features + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      dbias, dout, batch, out_features);
  ENHANCED_CUDA_CHECK_LAUNCH();
  gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, in_features, batch, out_features, &one, weight_op, in_features, dout_op,
       out_features, &zero, din, in_features, bf16);
}

}  // namespace enhanced::cuda
