// The parts of a CPU training step that the bench times alone (Engine::parts), one name each:
// the CPU engine names its parts by them (src/engine/cpu_model.cpp, cpu_engine.cpp) and the
// bench's roofline looks its cost model up by them (apps/bench_roofline.cpp), so each name,
// which the bench's JSON and docs/benchmarks.md show, is spelled once.
#pragma once

namespace enhanced::step_part {

inline constexpr char blend[] = "blend fwd+bwd";
inline constexpr char bilstm_forward[] = "bilstm fwd";
inline constexpr char bilstm[] = "bilstm fwd+bwd";  // forward and backward: holds bilstm_forward
inline constexpr char head[] = "head fwd+bwd";
inline constexpr char packing[] = "packing in f+b";  // a share of the others' time, not costed
inline constexpr char optimizer[] = "optimizer";

}  // namespace enhanced::step_part
