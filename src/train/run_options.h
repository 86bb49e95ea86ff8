// A run's options in its state file: one table of fields serialises TrainOptions into the
// "run_options" metadata and reads it back, so no option is written in one place and read in
// another. Floats are stored as hexadecimal text, which round-trips exactly.
#pragma once

#include <string>

#include "enhanced/trainer.h"

namespace enhanced {

// The recorded options as one JSON object (text).
std::string run_options_text(const TrainOptions& options);

// The run to resume: the recorded options, with what the caller may change on resume (the run's
// length when given, the thread count when given, TF32 when asked for, a named LSTM algorithm).
// Errors name `source`.
TrainOptions resumed_options(const TrainOptions& caller, const std::string& recorded, const std::string& source);

// A double as hexadecimal text ("%a"): strtod reads it back exactly.
std::string exact_text(double value);

}  // namespace enhanced
