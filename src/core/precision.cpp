// --precision's names and what this CPU can run (enhanced/precision.h).
#include "enhanced/precision.h"

#include <cpuid.h>

#include <fstream>

#include "enhanced/common.h"

namespace enhanced {

const EnumNames<Precision>& precisions() {
  static const EnumNames<Precision> table{
      {Precision::fp32, "fp32"}, {Precision::bf16, "bf16"}, {Precision::bf16_emulated, "bf16-emulated"}};
  return table;
}

Precision parse_precision(const std::string& name) {
  return parse_flag_value(precisions(), name, "--precision");
}

const char* to_string(Precision precision) { return name_of(precisions(), precision); }

namespace {

// XCR0: the register state the OS saves on a context switch (an instruction set the OS does not
// save is unusable even when CPUID lists it).
uint64_t os_saved_state() {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return 0;  // OSXSAVE
  uint32_t low = 0, high = 0;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (static_cast<uint64_t>(high) << 32) | low;
}

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "this CPU";
}

}  // namespace

CpuBf16Support cpu_bf16_support() {
  CpuBf16Support support;
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return support;
  const uint32_t max_subleaf = eax;
  // AVX512BW too: GCC's avx512bf16 target implies it, so the kernel's code may use it.
  const bool avx512f = ebx & (1u << 16), avx512bw = ebx & (1u << 30);
  const bool amx_bf16 = edx & (1u << 22), amx_tile = edx & (1u << 24);
  const uint64_t saved = os_saved_state();
  const uint64_t avx512_state = 0xe6;            // SSE, AVX, opmask, ZMM upper halves, ZMM16-31
  const uint64_t amx_state = (1ull << 17) | (1ull << 18);  // TILECFG, TILEDATA
  const bool zmm_saved = (saved & avx512_state) == avx512_state;
  if (max_subleaf >= 1 && avx512f && avx512bw && zmm_saved && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx))
    support.avx512_bf16 = eax & (1u << 5);
  support.amx_bf16 = amx_bf16 && amx_tile && (saved & amx_state) == amx_state;
  return support;
}

std::string cpu_precision_unavailable_reason(Precision precision) {
  if (precision != Precision::bf16) return "";
  const CpuBf16Support support = cpu_bf16_support();
  if (support.avx512_bf16) return "";
  return cat("--precision bf16 needs a CPU with bfloat16 instructions (AVX512-BF16), and this one (", cpu_model_name(),
             ") has none; --precision bf16-emulated computes the same arithmetic at FP32 speed");
}

}  // namespace enhanced
