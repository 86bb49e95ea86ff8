#include "layers/cpu/stream_store.h"
#include "layers/cpu/multiversion.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ENHANCED_STREAM_X86 1
#endif

namespace enhanced::stream_store {
namespace {

#if defined(ENHANCED_STREAM_X86)
// A whole line a store with AVX-512; four stores of SSE2's 16 bytes otherwise.
__attribute__((target("avx512f"))) void copy_lines_avx512(float* dst, const float* source, size_t n) {
  for (size_t i = 0; i < n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(source + i));
}

void copy_sse2(float* dst, const float* source, size_t n) {
  for (size_t i = 0; i < n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(source + i));
}
#endif

}  // namespace

void copy(float* dst, const float* source, size_t n) {
#if defined(ENHANCED_STREAM_X86)
  const uintptr_t at = reinterpret_cast<uintptr_t>(dst);
  if (at % 64 == 0 && n % 16 == 0 && cpu_has_avx512f()) return copy_lines_avx512(dst, source, n);
  if (at % 16 == 0 && n % 4 == 0) return copy_sse2(dst, source, n);
#endif
  std::memcpy(dst, source, n * sizeof(float));
}

}  // namespace enhanced::stream_store
