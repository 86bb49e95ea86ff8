#include "train/run_saves.h"

#include <cmath>
#include <cstdlib>
#include <utility>

#include "enhanced/checkpoint.h"
#include "enhanced/common.h"
#include "enhanced/label_names.h"
#include "train/distributed.h"

namespace enhanced {

RunSaves::RunSaves(std::filesystem::path dir, Communicator& communicator, std::vector<std::string> label_names)
    : dir_(std::move(dir)), comm_(communicator), speaks_(communicator.rank() == 0),
      label_names_(std::move(label_names)) {}

void RunSaves::save(Engine& engine, const ParameterBuffer<float>& params, const OptimizerState& optimizer,
                    const TrainOptions& options, RunPosition& position, int64_t metrics_lines) {
  engine.sync_to_host();
  check_replicas(comm_, params, position.step);
  // Never replace a good checkpoint with a diverged one.
  // (The ranks' weights agree, checked just above: rank 0 alone reports.)
  for (const float value : params.data)
    if (!std::isfinite(value))
      comm_.fail_as(0, cat("weights became non-finite by step ", position.step, "; training stopped without saving. "
                           "The last good checkpoint is ", (dir_ / "last.safetensors").string()));
  position.metrics_lines = metrics_lines;
  saved_at_step_ = position.step;
  if (!speaks_) return;
  write_run_state((dir_ / "optimizer.safetensors").string(), params, optimizer, options, position);
  exit_if_asked();
  save_checkpoint((dir_ / "last.safetensors").string(), params, checkpoint_metadata(position));
  exit_if_asked();
}

void RunSaves::save_best(Engine& engine, const ParameterBuffer<float>& params, const RunPosition& position) {
  if (!speaks_) return;
  engine.sync_to_host();
  save_checkpoint((dir_ / "best.safetensors").string(), params, checkpoint_metadata(position));
  exit_if_asked();
}

// A run killed between the state file and last.safetensors of its final save has nothing left
// to do, but its last.safetensors may be behind (a step, or the epoch of the same step):
// rewritten from the state, always, since that is cheap and never wrong.
void RunSaves::refresh_last(const ParameterBuffer<float>& params, const RunPosition& position) {
  if (speaks_) save_checkpoint((dir_ / "last.safetensors").string(), params, checkpoint_metadata(position));
}

std::map<std::string, std::string> RunSaves::checkpoint_metadata(const RunPosition& position) const {
  return with_label_names({{"step", std::to_string(position.step)}, {"epoch", std::to_string(position.epoch)}},
                          label_names_);
}

// Fault injection for the tests: ENHANCED_TEST_EXIT_AFTER_WRITE=N ends the process abruptly
// (as kill -9 would, no clean-up) right after its N-th file write (state, last or best), so a
// test can stop a run at every point a kill could hit between two writes.
void RunSaves::exit_if_asked() {
  static const char* const after = std::getenv("ENHANCED_TEST_EXIT_AFTER_WRITE");
  if (after && ++writes_ == std::atoll(after)) std::_Exit(137);
}

}  // namespace enhanced
