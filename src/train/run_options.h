// A run's options in its state file: the recorded rows of train_fields() (enhanced/
// train_fields.h) write TrainOptions into the "run_options" metadata and read it back, so no
// option is written in one place and read in another. Floats are stored as hexadecimal text,
// which round-trips exactly.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "enhanced/train_options.h"

namespace enhanced {

// The recorded options as one JSON object (text).
std::string run_options_text(const TrainOptions& options);

// The options every rank of a data-parallel run must share, as (flag, value) pairs: the recorded
// ones but the data files' paths (check_same_files compares their contents; hosts may mount them
// apart) and the thread count (each host's cores), then the few that are not recorded. A flag
// without a value reads "on" when given, "off" when not.
std::vector<std::pair<std::string, std::string>> shared_options(const TrainOptions& options);

// The run to resume: the recorded options, with what the caller may change on resume (the run's
// length when given, the thread count when given, TF32 when asked for, a named LSTM algorithm).
// Errors name `source`.
TrainOptions resumed_options(const TrainOptions& caller, const std::string& recorded, const std::string& source);

// A double as hexadecimal text ("%a"): strtod reads it back exactly.
std::string exact_text(double value);

}  // namespace enhanced
