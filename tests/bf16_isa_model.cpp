// bf16_gemm's kernel sources against models of their instructions (bf16_isa_model.h says why):
// the AVX512-BF16 one against SIMDe, whose native aliases map the intrinsics' names
// (_mm512_dpbf16_ps, __m512bh, ...) to its portable definitions; the AMX one against
// amx_model.h. This file has no AVX-512 or AMX target flags: both run on any CPU.
#include "bf16_isa_model.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#ifdef ENHANCED_HAVE_SIMDE
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

namespace enhanced::bf16_gemm::avx512_model {
#define ENHANCED_KERNEL_TARGET
#include "layers/cpu/bf16_gemm_avx512.inc"
#undef ENHANCED_KERNEL_TARGET
}  // namespace enhanced::bf16_gemm::avx512_model
#endif

// After SIMDe, which may include <immintrin.h>: its _tile_* names give way to the model's.
#include "amx_model.h"

namespace enhanced::bf16_gemm::amx_model {
#define ENHANCED_KERNEL_TARGET
#define ENHANCED_TILE_BARRIER() static_cast<void>(0)
#include "layers/cpu/bf16_gemm_amx.inc"
#undef ENHANCED_TILE_BARRIER
#undef ENHANCED_KERNEL_TARGET
}  // namespace enhanced::bf16_gemm::amx_model

namespace enhanced::testing {

bf16_gemm::Kernel bf16_model_kernel(bf16_gemm::Isa isa) {
  if (isa == bf16_gemm::Isa::amx_bf16) return &bf16_gemm::amx_model::multiply_kernel;
#ifdef ENHANCED_HAVE_SIMDE
  return &bf16_gemm::avx512_model::multiply_kernel;
#else
  return nullptr;
#endif
}

}  // namespace enhanced::testing
