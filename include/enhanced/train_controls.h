// The training controls (docs/cli.md "Training controls": the learning-rate schedule and what
// the validations decide), one row each. enhanced-train registers its flags from the rows
// (apps/train_flags.cpp), the run records them and lets a resume change them
// (src/train/run_options.cpp), and check_training_controls (src/train/run_checks.cpp) checks the
// values a resume merged by the rows' rules, so a flag's name, rule and key are written once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enhanced/number_rule.h"
#include "enhanced/train_options.h"

namespace enhanced {

struct TrainControl {
  const char* key;   // in the recorded run options ("lr_factor")
  const char* flag;  // on the command line ("--lr-factor")
  const char* help;
  // The TrainOptions field it sets: exactly one of the three (the default is its initialiser).
  int64_t TrainOptions::*whole = nullptr;
  double TrainOptions::*real = nullptr;
  std::string TrainOptions::*choice = nullptr;
  NumberRule rule{};                          // a number's range (whole, real)
  std::vector<std::string> (*names)() = nullptr;  // a choice's values
  bool show_default = true;                   // --help shows the default
};

// The rows, in --help and record order. Every one was added after runs were first recorded:
// a run without its key keeps the caller's value (the default).
const std::vector<TrainControl>& train_controls();

// Refuses a number outside its row's rule as the command line would: "--lr-factor must be in (0,
// 1), got 1.5". A value at its default passes (0 for --lr-step-size: not given).
void check_control_values(const TrainOptions& options);

}  // namespace enhanced
