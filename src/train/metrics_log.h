// A run's DIR/metrics.jsonl: one JSON line a log interval, validation and epoch end, written by
// rank 0 (every rank counts the lines: the state file records the count). On a resume the file
// is cut back to the lines the state recorded, so the resumed run's lines replace those of a run
// killed after that state, and the file equals the uninterrupted run's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "train/run_state.h"

namespace enhanced {

class MetricsLog {
 public:
  // Opens DIR/metrics.jsonl (a resume appends to it, cut back to position.metrics_lines, which a
  // state written before the count was recorded gets here). speaks: this rank writes it.
  void open(const std::filesystem::path& dir, bool resume, bool speaks, RunPosition& position);
  void write(const nlohmann::json& line);
  int64_t lines() const { return lines_; }
  // The run's training time before this process (the file's last "seconds"; -1: not known).
  double earlier_seconds() const { return earlier_seconds_; }

 private:
  std::filesystem::path path_;
  std::ofstream file_;
  bool speaks_ = false;
  int64_t lines_ = 0;
  double earlier_seconds_ = 0;
};

}  // namespace enhanced
