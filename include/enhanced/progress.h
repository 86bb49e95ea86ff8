// One progress line on stderr for long work (training, conversion): redrawn in place on a
// terminal, one line per update otherwise (logs), with the elapsed time for rates and ETAs.
#pragma once

#include <chrono>
#include <string>

namespace enhanced {

class ProgressLine {
 public:
  // Disabled: prints nothing. min_interval_s: updates closer together than this are dropped
  // (show's `now` forces one).
  explicit ProgressLine(bool enabled, double min_interval_s = 0.0);

  void show(const std::string& text, bool now = false);
  // Ends the line on a terminal, so what follows starts on its own line.
  void finish();
  // Prints a line of its own (a validation result) without garbling the progress line.
  void note(const std::string& text);
  // Seconds since construction or restart().
  double elapsed_seconds() const;
  void restart();
  bool enabled() const { return enabled_; }

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_;
  bool tty_;
  bool drawn_ = false;
  double min_interval_s_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_ = start_;
};

// "42s", "3m05s", "2h07m"; "?" for a negative or non-finite time.
std::string duration_text(double seconds);

}  // namespace enhanced
