// Comparing two runs' state files (DIR/optimizer.safetensors).
#pragma once

#include <filesystem>

#include "enhanced/safetensors.h"

namespace enhanced::testing {

// Two state files hold the same tensors and metadata, metrics.jsonl's line count aside: a run
// that ended early logged its last step, so once it is extended its metrics file has that line
// more than the run that never stopped (a killed run, cut back to its state, has not: see
// tests/test_train_controls.cpp).
inline bool same_state_apart_from_metrics(const std::filesystem::path& a, const std::filesystem::path& b) {
  const SafetensorsReader x(a.string()), y(b.string());
  auto metadata_x = x.metadata(), metadata_y = y.metadata();
  metadata_x.erase("metrics_lines");
  metadata_y.erase("metrics_lines");
  if (metadata_x != metadata_y || x.tensors().size() != y.tensors().size()) return false;
  for (const auto& [name, tensor] : x.tensors()) {
    if (!y.has(name)) return false;
    if (tensor.dtype == "F32" ? x.floats(name, tensor.shape) != y.floats(name, tensor.shape)
                              : x.uint64s(name) != y.uint64s(name))
      return false;
  }
  return true;
}

}  // namespace enhanced::testing
