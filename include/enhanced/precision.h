// The arithmetic of a run's matrix products (--precision). FP32 is the default. bf16: every GEMM
// operand (input projections, recurrent products, weight and data gradients, dense) is rounded to
// bfloat16 and the products are accumulated in FP32; the cell state, the pointwise gates, the
// loss, the master weights, the optimizer state and the checkpoints stay FP32.
//
// On the CPU, bf16 needs bfloat16 instructions (AVX512-BF16 or AMX-BF16, detected at run time);
// bf16-emulated is the same arithmetic on any CPU (the FP32 kernels on operands rounded to
// bfloat16, exact since a product of two bfloat16 numbers fits a float): the reference that the
// fast path and the GPU are tested against, and a way to see what bf16 does to a model on a
// machine without it. It is no faster than FP32.
#pragma once

#include <cstdint>
#include <string>

#include "enhanced/enum_names.h"

namespace enhanced {

enum class Precision { fp32, bf16, bf16_emulated };

// Their names (enhanced/enum_names.h): "fp32", "bf16", "bf16-emulated".
const EnumNames<Precision>& precisions();
// Precision from its name (Error "--precision must be ..." otherwise).
Precision parse_precision(const std::string& name);
const char* to_string(Precision precision);
inline bool rounds_to_bf16(Precision precision) { return precision != Precision::fp32; }

// The CPU's bfloat16 instructions, from CPUID and the OS's saved state (XCR0). --precision bf16
// needs AVX512-BF16; where AMX-BF16 is there too, the CPU kernels run on AMX (layers/cpu/bf16_gemm.h).
struct CpuBf16Support {
  bool avx512_bf16 = false;  // VDPBF16PS and VCVTNE2PS2BF16 (Cooper Lake, Sapphire Rapids, Zen 4)
  bool amx_bf16 = false;     // TDPBF16PS (Sapphire Rapids and later)
};
CpuBf16Support cpu_bf16_support();

// "" when --precision can run on this CPU, else one line saying why not (naming the CPU).
std::string cpu_precision_unavailable_reason(Precision precision);

// bfloat16 by round-to-nearest-even (NaN stays a quiet NaN; subnormals kept): the rounding every
// bf16 path uses. (VDPBF16PS itself treats subnormal inputs and results as zero.) Written without
// a branch, so that the loops that call it vectorise.
inline uint16_t to_bf16_bits(float value) {
  uint32_t bits;
  __builtin_memcpy(&bits, &value, sizeof bits);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16, quiet_nan = (bits >> 16) | 0x0040u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}
inline float from_bf16_bits(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  __builtin_memcpy(&value, &wide, sizeof value);
  return value;
}
// value rounded to the nearest bfloat16, as a float (the reference path's operands).
inline float round_to_bf16(float value) { return from_bf16_bits(to_bf16_bits(value)); }
// A double through float first: nearest for doubles that hold floats (the tests' operands), not
// for every double.
inline double round_to_bf16(double value) { return round_to_bf16(static_cast<float>(value)); }

}  // namespace enhanced
