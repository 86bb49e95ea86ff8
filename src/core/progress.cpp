#include "enhanced/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace enhanced {

ProgressLine::ProgressLine(bool enabled, double min_interval_s)
    : enabled_(enabled), tty_(::isatty(2) != 0), min_interval_s_(min_interval_s) {}

void ProgressLine::show(const std::string& text, bool now) {
  if (!enabled_) return;
  const Clock::time_point time = Clock::now();
  if (!now && std::chrono::duration<double>(time - last_).count() < min_interval_s_) return;
  last_ = time;
  std::fprintf(stderr, "%s%s%s", tty_ ? "\r" : "", text.c_str(), tty_ ? "   " : "\n");
  std::fflush(stderr);
  drawn_ = tty_;
}

void ProgressLine::finish() {
  if (enabled_ && drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

void ProgressLine::note(const std::string& text) {
  if (!enabled_) return;
  finish();
  std::fprintf(stderr, "%s\n", text.c_str());
}

void ProgressLine::restart() { start_ = last_ = Clock::now(); }

double ProgressLine::elapsed_seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<long long>(seconds + 0.5);
  char text[32];
  if (total >= 3600) std::snprintf(text, sizeof text, "%lldh%02lldm", total / 3600, total / 60 % 60);
  else if (total >= 60) std::snprintf(text, sizeof text, "%lldm%02llds", total / 60, total % 60);
  else std::snprintf(text, sizeof text, "%llds", total);
  return text;
}

}  // namespace enhanced
