// Code shared by a CUDA kernel and its host-side test: ENHANCED_HOST_DEVICE, and float
// arithmetic rounded to nearest and never contracted into a fused multiply-add (intrinsics on
// the device; plain operators on the host, whose users are compiled with -ffp-contract=off).
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define ENHANCED_HOST_DEVICE __host__ __device__
#else
#define ENHANCED_HOST_DEVICE
#endif

namespace enhanced::steps {

ENHANCED_HOST_DEVICE inline float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
ENHANCED_HOST_DEVICE inline float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
ENHANCED_HOST_DEVICE inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
ENHANCED_HOST_DEVICE inline float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
ENHANCED_HOST_DEVICE inline float sqrt_rn(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

ENHANCED_HOST_DEVICE inline bool is_finite(double x) {
#ifdef __CUDA_ARCH__
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}

}  // namespace enhanced::steps
