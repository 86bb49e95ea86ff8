// The files of a run's --out directory: which ones make a run, the directory's life (created
// for the run, removed again on failure where the run created it and left nothing), and
// --overwrite's removal of another run's files. Apart from trainer.cpp so that the loop stays the
// loop.
#pragma once

#include <filesystem>
#include <vector>

#include "enhanced/trainer.h"

namespace enhanced {

// The output directory of a run: created if need be and checked writable; on destruction, unless
// kept, removed again where the run created it and left nothing in it (an empty metrics.jsonl
// counts as nothing).
class OutputDirectory {
 public:
  explicit OutputDirectory(const std::filesystem::path& dir);
  OutputDirectory(const OutputDirectory&) = delete;
  OutputDirectory& operator=(const OutputDirectory&) = delete;
  ~OutputDirectory();
  void keep() { kept_ = true; }

 private:
  std::filesystem::path dir_;
  std::vector<std::filesystem::path> created_;  // deepest first
  bool kept_ = false;
};

// --out must not hold another run unless it is resumed or replaced: --overwrite removes that
// run's files (only those), so no stale best.safetensors survives beside a new last.safetensors.
void prepare_run_files(const TrainOptions& options);

}  // namespace enhanced
