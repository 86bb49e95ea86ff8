#include "layers/cpu/packing_clock.h"

namespace enhanced::packing_clock {
namespace {
std::atomic<bool> measuring_on{false};
std::atomic<int64_t> total_nanoseconds{0};
}  // namespace

void set_measuring(bool on) { measuring_on.store(on, std::memory_order_relaxed); }
bool measuring() { return measuring_on.load(std::memory_order_relaxed); }
double seconds() { return static_cast<double>(total_nanoseconds.load()) * 1e-9; }
void reset() { total_nanoseconds.store(0); }
void add_nanoseconds(int64_t nanoseconds) { total_nanoseconds.fetch_add(nanoseconds, std::memory_order_relaxed); }

}  // namespace enhanced::packing_clock
