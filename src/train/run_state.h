// The training state file (DIR/optimizer.safetensors): the weights, the optimizer's moments and
// step count, the run's options and where it stands (position, the open interval's and epoch's
// totals, every validation, the lines of metrics.jsonl), written atomically in one file, so
// that --resume continues bit for bit and no crash can leave half of one step and half of another.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enhanced/model.h"
#include "enhanced/optimizer_config.h"
#include "enhanced/safetensors.h"
#include "enhanced/train_totals.h"
#include "enhanced/train_options.h"
#include "train/schedule.h"

namespace enhanced {

// Running totals of loss, accuracy and samples (an interval's or an epoch's).
struct RunningTotals {
  double loss = 0;
  int64_t correct = 0, samples = 0;

  void add(const TrainTotals& t);
  double mean_loss() const;
  double accuracy() const;
};

// Where the run stands.
struct RunPosition {
  int64_t epoch = 0;           // epochs completed
  int64_t batch_in_epoch = 0;  // batches of the current epoch done (== batches an epoch: its end is still to do)
  int64_t step = 0;            // optimizer steps done
  RunningTotals interval, epoch_totals;  // since the last metrics line, and in the current epoch
  std::vector<Validation> validations;   // every validation so far, in order
  int64_t metrics_lines = -1;            // metrics.jsonl's lines when the state was written (-1: not recorded)
};

void write_run_state(const std::string& path, const ParameterBuffer<float>& params, const OptimizerState& optimizer,
                     const TrainOptions& options, const RunPosition& position);

// Reading back, each checked against the file (errors name it and the field or tensor).
std::string recorded_options(const SafetensorsReader& state);
RunPosition read_run_position(const SafetensorsReader& state);
// Moments and steps into `optimizer` (made for the recorded options): finite, Adam's second
// moments non-negative.
void read_optimizer_state(OptimizerState& optimizer, const SafetensorsReader& state);

}  // namespace enhanced
