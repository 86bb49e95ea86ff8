#include "train/run_signals.h"

#include <signal.h>

#include <csignal>
#include <cstdlib>

#include "enhanced/atomic_file.h"

namespace enhanced {
namespace {

volatile std::sig_atomic_t requested_stop = 0;

// Async-signal-safe: a store and remove_temp_files_on_signal (sigemptyset and sigaction), which
// makes the next SIGINT or SIGTERM remove the temporary files and take the default action.
extern "C" void request_stop(int signal_number) {
  requested_stop = signal_number;
  remove_temp_files_on_signal();
}

}  // namespace

void stop_at_a_step_boundary_on_signals() {
  struct sigaction action {};
  action.sa_handler = request_stop;
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGINT);  // a second signal waits until the handler is replaced
  sigaddset(&action.sa_mask, SIGTERM);
  action.sa_flags = SA_RESTART;        // the checkpoint being written goes on undisturbed
  for (const int signal_number : {SIGINT, SIGTERM}) {
    // A signal the process was started with ignored (a script's background job, nohup) stays so.
    struct sigaction inherited {};
    if (::sigaction(signal_number, nullptr, &inherited) == 0 && inherited.sa_handler == SIG_IGN) continue;
    ::sigaction(signal_number, &action, nullptr);
  }
}

int stop_signal() { return requested_stop; }

void raise_signals_if_asked(int64_t step) {
  static const char* const asked = std::getenv("ENHANCED_TEST_SIGNAL_AT_STEP");
  if (!asked) return;
  char* end = nullptr;
  if (std::strtoll(asked, &end, 10) != step) return;
  if (*end != ':') ::raise(SIGINT);
  while (*end == ':') ::raise(static_cast<int>(std::strtol(end + 1, &end, 10)));
}

}  // namespace enhanced
