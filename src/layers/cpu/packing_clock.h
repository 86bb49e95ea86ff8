// Time the CPU layers spend packing and converting GEMM operands (panels, bfloat16 rounding and
// conversion, gathers), summed over threads, while measuring is on: what enhanced-bench reports
// as its own part on every CPU, since the packing is plain code. Off (the default) it costs one
// relaxed load a call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace enhanced::packing_clock {

void set_measuring(bool on);
bool measuring();
// Seconds measured since the last reset, over all threads.
double seconds();
void reset();
void add_nanoseconds(int64_t nanoseconds);

// Adds its lifetime to the clock when measuring.
class Scope {
 public:
  Scope() : on_(measuring()) {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (on_) add_nanoseconds(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool on_;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace enhanced::packing_clock
