// SIGINT and SIGTERM during training: the first asks the loop to stop at the next step boundary,
// where it saves as a periodic checkpoint would and exits with 128 + the signal; a second one ends
// the process at once, its temporary files removed (remove_temp_files_on_signal's handler).
#pragma once

#include <cstdint>

namespace enhanced {

// Installs the first signal's handler (a single-process run: see docs/distributed.md), except
// for a signal the process inherited ignored.
void stop_at_a_step_boundary_on_signals();

// The signal that asked the run to stop (0: none yet).
int stop_signal();

// Test hook: ENHANCED_TEST_SIGNAL_AT_STEP=N[:SIGNAL...] raises each SIGNAL (a number, SIGINT when
// none is given) in this process once step N is taken, as a signal from outside would arrive then.
void raise_signals_if_asked(int64_t step);

}  // namespace enhanced
