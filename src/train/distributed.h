// What the trainer does beyond one process (docs/distributed.md): the checks that the ranks
// read the same data and hold the same weights, their default threads, the closing numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enhanced/communicator.h"
#include "enhanced/model.h"
#include "enhanced/safetensors.h"
#include "enhanced/train_options.h"

namespace enhanced {

// The CPU threads of each rank: `requested`, else default_cpu_threads for this host's ranks.
int threads_for_rank(int requested, const Communicator& communicator);

// Every rank has rank 0's options (shared_options, after a resume merged the recorded ones) and
// resumes rank 0's state (`state`, the state file read; nullptr: a new run), at the same step and
// from the same bytes; otherwise the first rank that differs names the first option that does and
// both values, and the job ends. The first collective of a run: its sizes depend on no option.
void check_same_run(Communicator& communicator, const TrainOptions& options, const SafetensorsReader* state);

// Every rank's files (the same list on each) have rank 0's size and content hash; otherwise the
// first rank that differs reports it, naming its host and the file, and the job ends.
void check_same_files(Communicator& communicator, const std::vector<std::string>& paths);

// The ranks' parameters are bit-identical after `step`; otherwise rank 0 reports the step and
// the ranks that differ from it, and the job ends.
void check_replicas(Communicator& communicator, const ParameterBuffer<float>& params, int64_t step);

// One line: the bytes this rank gave to collectives per step and the share of `seconds` spent in them.
std::string communication_note(const Communicator& communicator, int64_t steps, double seconds);

}  // namespace enhanced
