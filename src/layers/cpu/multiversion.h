// Hot CPU loops compiled three times (AVX-512, AVX2 + FMA, baseline x86-64) and picked at load
// time, so one binary is fast on new CPUs and still runs on old ones. Plain elsewhere.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ENHANCED_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ENHANCED_MULTIVERSION
#endif

#define ENHANCED_INLINE inline __attribute__((always_inline))
