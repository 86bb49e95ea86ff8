// Row-major GEMM for float and double through cblas (OpenBLAS), so every layer is written once
// as a template and checked in double precision.
#pragma once

#include <cblas.h>

namespace enhanced {

// C (M, N) = alpha * op(A) op(B) + beta * C, row-major, with leading dimensions.
inline void gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

inline void gemm(bool transpose_a, bool transpose_b, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace enhanced
