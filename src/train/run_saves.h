// The checkpoints of a run in its --out directory: the state file (optimizer.safetensors) and
// last.safetensors at every save, best.safetensors when a validation is the best yet, each written
// atomically, and none of them with non-finite weights. Rank 0 writes; every rank checks that the
// replicas agree. Apart from the step loop (training_run.h) so that the loop stays the loop.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "enhanced/communicator.h"
#include "enhanced/engine.h"
#include "train/run_state.h"

namespace enhanced {

class RunSaves {
 public:
  // label_names (empty: none): kept in the metadata of last/best (enhanced/label_names.h).
  RunSaves(std::filesystem::path dir, Communicator& communicator, std::vector<std::string> label_names);

  // The state file, then last.safetensors: a crash between the two writes leaves a mismatch that
  // resume detects by step, never a silently inconsistent pair. Records metrics_lines in position.
  void save(Engine& engine, const ParameterBuffer<float>& params, const OptimizerState& optimizer,
            const TrainOptions& options, RunPosition& position, int64_t metrics_lines);
  // best.safetensors (rank 0; the engine's weights are synced to params first).
  void save_best(Engine& engine, const ParameterBuffer<float>& params, const RunPosition& position);
  // last.safetensors from the host weights (rank 0), for a resume that had nothing left to do.
  void refresh_last(const ParameterBuffer<float>& params, const RunPosition& position);

  int64_t saved_at_step() const { return saved_at_step_; }  // the step of the last save (-1: none)
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::map<std::string, std::string> checkpoint_metadata(const RunPosition& position) const;
  void exit_if_asked();

  std::filesystem::path dir_;
  Communicator& comm_;
  bool speaks_;                 // rank 0
  int64_t writes_ = 0;          // files written by this process
  int64_t saved_at_step_ = -1;
  std::vector<std::string> label_names_;
};

}  // namespace enhanced
