// Which device a run uses. The CPU always works; CUDA needs a build with the backend and a
// usable GPU, and says plainly why not otherwise.
#pragma once

#include <string>

namespace enhanced {

enum class Device { cpu, cuda };

// "" when a CUDA device can be used, else the reason (no backend built, no driver, no device).
std::string cuda_unavailable_reason();

// Resolves --device auto|cpu|cuda. `cuda` without a usable GPU is an Error; `auto` falls back to
// the CPU. Prints one line to stderr saying which device was picked (and why) when verbose.
Device resolve_device(const std::string& flag, bool verbose = true);

}  // namespace enhanced
