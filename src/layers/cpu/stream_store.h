// Copies that bypass the caches (non-temporal stores), for rows written once and read back only
// much later: the forward's saved gates and cells, which the backward reads after the 400 steps.
// A plain store to such a row first reads its cache lines from memory (they are new to the
// caches) and then evicts rows the step still uses; non-temporal stores that fill a line write it
// without reading it. SSE2's, which every x86-64 CPU has; a plain copy elsewhere. The values are
// copied, not changed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace enhanced::stream_store {

// dst[0, n) = source[0, n).
inline void copy(float* dst, const float* source, size_t n) {
#if defined(__SSE2__)
  if (reinterpret_cast<uintptr_t>(dst) % 16 == 0 && n % 4 == 0) {
    for (size_t i = 0; i < n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(source + i));
    return;
  }
#endif
  std::memcpy(dst, source, n * sizeof(float));
}

// The double path (the gradient checks): a plain copy.
inline void copy(double* dst, const double* source, size_t n) { std::memcpy(dst, source, n * sizeof(double)); }

// Orders the thread's non-temporal stores before its later stores (what another thread reads
// after a barrier must be in memory).
inline void fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace enhanced::stream_store
