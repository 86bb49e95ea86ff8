// Hot CPU loops compiled three times (AVX-512, AVX2 + FMA, baseline x86-64) and picked at load
// time, so one binary is fast on new CPUs and still runs on old ones. Plain elsewhere.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ENHANCED_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ENHANCED_MULTIVERSION
#endif

#define ENHANCED_INLINE inline __attribute__((always_inline))

// Whether this CPU runs AVX-512 (F), asked once: for code that picks its tile shape or its stores
// at run time (small_gemm, stream_store).
inline bool cpu_has_avx512f() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512f = __builtin_cpu_supports("avx512f");
  return avx512f;
#else
  return false;
#endif
}
