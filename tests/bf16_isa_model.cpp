// bf16_gemm_kernel.inc against SIMDe (bf16_isa_model.h says why). SIMDe's native aliases map
// the intrinsics' names (_mm512_dpbf16_ps, __m512bh, ...) to its portable definitions, which
// this file is compiled to use whatever the CPU: it has no AVX-512 target flags.
#include "bf16_isa_model.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#ifdef ENHANCED_HAVE_SIMDE
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

namespace enhanced::bf16_gemm::isa_model {
using bf16_gemm::kPanelWidth;
#define ENHANCED_BF16_TARGET
#include "layers/cpu/bf16_gemm_kernel.inc"
#undef ENHANCED_BF16_TARGET
}  // namespace enhanced::bf16_gemm::isa_model
#endif

namespace enhanced::testing {

bf16_gemm::Kernel bf16_isa_model_kernel() {
#ifdef ENHANCED_HAVE_SIMDE
  return &bf16_gemm::isa_model::multiply_kernel;
#else
  return nullptr;
#endif
}

}  // namespace enhanced::testing
