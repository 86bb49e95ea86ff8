// The files of a run's --out directory: which ones make a run, the directory's life (created
// for the run, removed again on failure where the run created it and left nothing), and
// --overwrite's removal of another run's files. Used by the run's set-up (trainer.cpp), not by
// the step loop (training_run.cpp).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "enhanced/train_options.h"

namespace enhanced {

// The output directory of a run: created if need be, checked writable and locked for the run
// (flock on DIR/.lock, which holds the holder's pid: a second enhanced-train on it is refused at
// once, and the kernel releases the lock when the process ends, however it ends). On
// destruction, unless kept, removed again where the run created it and left nothing in it (an
// empty metrics.jsonl and the lock file count as nothing).
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
  int lock_ = -1;                               // the locked DIR/.lock
  bool kept_ = false;
};

// --out must not hold another run unless it is resumed or replaced: --overwrite removes that
// run's files (only those), so no stale best.safetensors survives beside a new last.safetensors.
// A run is its state file (optimizer.safetensors): the files of a run stopped before its first
// state (best.safetensors, metrics.jsonl) are no run, and a new one replaces them, with a note.
void prepare_run_files(const TrainOptions& options);

// Why --resume finds no run in `dir` (it has no optimizer.safetensors), for the error line.
std::string no_run_to_resume(const std::filesystem::path& dir);

}  // namespace enhanced
