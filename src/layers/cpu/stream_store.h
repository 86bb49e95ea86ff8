// Copies that bypass the caches (non-temporal stores), for rows written once and read back only
// much later: the forward's saved gates and cells, which the backward reads after the 400 steps.
// A plain store to such a row first reads its cache lines from memory (they are new to the
// caches) and then evicts rows the step still uses; non-temporal stores that fill a line write it
// without reading it. AVX-512's whole-line stores where the CPU has them (four of SSE2's, which
// every x86-64 CPU has, leave the write-combining buffers fuller: 0.8 ms of a direction's forward on
// Zen 4); a plain copy elsewhere. The values are copied, not changed.
#pragma once

#include <cstddef>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace enhanced::stream_store {

// dst[0, n) = source[0, n): by non-temporal stores where dst is 16-byte aligned and n a multiple
// of 4 (a line a store with AVX-512 where dst starts a line and n fills lines, as the saved rows
// do where H is a multiple of 16), a plain copy otherwise.
void copy(float* dst, const float* source, size_t n);

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
