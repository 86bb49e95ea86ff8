// enhanced-bench's roofline: each timed part of the CPU step against this CPU's own ceilings
// (enhanced/cpu.h's measure_cpu_ceilings): the FLOP its arithmetic must do against the peak of
// the instructions it runs on, the bytes it must move against the measured copy bandwidth, the
// bound of the two that is higher, and the time the part would take at it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "enhanced/cpu.h"
#include "enhanced/model.h"
#include "enhanced/precision.h"

namespace enhanced::bench {

// What the cost model reads: the model's shapes, the batch's ids and the step's settings.
struct StepShape {
  ModelConfig config;
  int batch = 0;
  int64_t ids = 0;               // the batch's identifier ids plus its cur-word ids (one a position)
  int64_t parameters = 0;        // all of them (the optimizer's dense update)
  int64_t updated_parameters = 0;  // what the optimizer writes: all, or the touched rows (lazy)
  bool adam = true;
  Precision precision = Precision::fp32;
  bool amx = false;              // the bf16 GEMMs run on AMX tiles (else AVX512-BF16 or FP32)
};

// The least a part must do: the GEMMs' FLOP (pointwise work not counted), and the bytes of its
// inputs read once and outputs written once. Empty (0, 0) for a part the model does not cost.
struct PartWork {
  double gflop = 0;
  double gbytes = 0;
};
PartWork part_work(const std::string& part, const StepShape& s);

// One timed part at its bound: the roofline's row.
struct RooflineRow {
  std::string part;
  double seconds = 0;  // the part's median
  PartWork work;
  double peak_gflops = 0;  // the ceiling of the part's arithmetic (gemm_ceiling, or FP32)
  double compute_seconds = 0, memory_seconds = 0;  // at the ceilings
  bool costed() const { return work.gflop > 0 || work.gbytes > 0; }
  const char* bound() const { return compute_seconds >= memory_seconds ? "compute" : "memory"; }
  double bound_seconds() const { return compute_seconds > memory_seconds ? compute_seconds : memory_seconds; }
};

// The GEMMs' ceiling for the step's arithmetic (FP32 FMA, AVX512-BF16 or AMX), GFLOP/s.
double gemm_ceiling(const CpuCeilings& ceilings, const StepShape& s);

std::vector<RooflineRow> roofline(const std::vector<std::pair<std::string, double>>& part_seconds,
                                  const StepShape& s, const CpuCeilings& ceilings);
void print_roofline(const std::vector<RooflineRow>& rows, const StepShape& s, const CpuCeilings& ceilings,
                    int threads);
nlohmann::json roofline_json(const std::vector<RooflineRow>& rows, const StepShape& s, const CpuCeilings& ceilings);

}  // namespace enhanced::bench
