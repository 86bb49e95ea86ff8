#include "train/distributed.h"

#include <algorithm>
#include <thread>

#include "enhanced/common.h"

namespace enhanced {

int threads_for_rank(int requested, const Communicator& communicator) {
  if (requested > 0 || communicator.size() == 1) return requested;  // 0 alone: every core (configure_cpu_threads)
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / communicator.local_size());
}

void check_same_files(Communicator& communicator, const std::vector<std::string>& paths) {
  if (communicator.size() == 1) return;
  std::vector<uint64_t> mine;
  for (const std::string& path : paths) {
    const FileFingerprint print = file_fingerprint(path);
    mine.push_back(print.size);
    mine.push_back(print.hash);
  }
  const int count = static_cast<int>(mine.size());
  std::vector<uint64_t> all(mine.size() * static_cast<size_t>(communicator.size()));
  communicator.gather(all.data(), mine.data(), count);
  for (int rank = 1; rank < communicator.size(); ++rank)
    for (size_t file = 0; file < paths.size(); ++file) {
      const uint64_t* theirs = all.data() + static_cast<size_t>(rank) * mine.size() + 2 * file;
      const uint64_t* first = all.data() + 2 * file;
      if (theirs[0] == first[0] && theirs[1] == first[1]) continue;
      // The reporter's own line names its rank and host (enhanced-train's error line).
      communicator.fail_as(rank, cat(paths[file], " is not the file rank 0 reads: ", theirs[0], " bytes, hash ", std::hex,
                                     theirs[1], std::dec, ", against ", first[0], " bytes, hash ", std::hex, first[1],
                                     std::dec, " (every rank must read the same data)"));
    }
}

void check_replicas(Communicator& communicator, const ParameterBuffer<float>& params, int64_t step) {
  if (communicator.size() == 1) return;
  const uint64_t mine = hash_floats(params.data.data(), params.size());
  std::vector<uint64_t> all(static_cast<size_t>(communicator.size()));
  communicator.gather(all.data(), &mine, 1);
  std::string differ;
  for (int rank = 1; rank < communicator.size(); ++rank)
    if (all[static_cast<size_t>(rank)] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(rank);
  if (!differ.empty())
    communicator.fail_as(0, cat("the ranks' parameters differ after step ", step, ": rank(s) ", differ,
                                " hold other weights than rank 0 (", communicator.host(), "); training stopped"));
}

std::string communication_note(const Communicator& communicator, int64_t steps, double seconds) {
  const CommunicationTotals& t = communicator.totals();
  const double per_step = steps > 0 ? static_cast<double>(t.bytes) / static_cast<double>(steps) : 0.0;
  return cat("communication: ", communicator.size(), " ranks; rank 0 gave ", static_cast<int64_t>(per_step),
             " bytes a step to collectives, spent ", t.seconds, " s in them (", seconds > 0 ? 100 * t.seconds / seconds : 0,
             "% of ", seconds, " s)");
}

}  // namespace enhanced
