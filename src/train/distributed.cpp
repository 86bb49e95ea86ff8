#include "train/distributed.h"

#include <algorithm>
#include <utility>

#include "enhanced/common.h"
#include "enhanced/cpu.h"
#include "train/run_options.h"
#include "train/run_state.h"

namespace enhanced {
namespace {

using Entries = std::vector<std::pair<std::string, std::string>>;

// What every rank must agree on: its options, then the run it resumes (where and which bytes).
Entries run_entries(const TrainOptions& options, const SafetensorsReader* state) {
  Entries entries = shared_options(options);
  if (!state) return entries;
  const RunPosition at = read_run_position(*state);
  entries.emplace_back("the resumed run's position",
                       cat("step ", at.step, " (epoch ", at.epoch + 1, ", batch ", at.batch_in_epoch, ")"));
  const FileFingerprint print = file_fingerprint(state->path());
  // Named alike on every rank: each reads its own --out, whose path may differ.
  entries.emplace_back("--out's optimizer.safetensors", cat(print.size, " bytes, hash ", std::hex, print.hash));
  return entries;
}

// Each rank's entries, in rank order. The text goes as NUL-separated names and values (no path
// holds a NUL), one int32 a byte, after the lengths (the gather's sizes agree on every rank).
std::vector<Entries> gather_entries(Communicator& communicator, const Entries& mine) {
  std::vector<int32_t> text;
  for (const auto& [name, value] : mine)
    for (const std::string* part : {&name, &value}) {
      for (const char c : *part) text.push_back(static_cast<unsigned char>(c));
      text.push_back(0);
    }
  std::vector<int32_t> all;
  std::vector<int> counts;
  communicator.gather(all, counts, text.data(), static_cast<int>(text.size()));
  std::vector<Entries> out(counts.size());
  size_t at = 0;
  for (size_t rank = 0; rank < counts.size(); ++rank) {
    std::vector<std::string> parts(1);
    for (const size_t end = at + static_cast<size_t>(counts[rank]); at < end; ++at)
      if (all[at] == 0) parts.emplace_back();
      else parts.back().push_back(static_cast<char>(all[at]));
    for (size_t i = 0; i + 1 < parts.size(); i += 2) out[rank].emplace_back(parts[i], parts[i + 1]);
  }
  return out;
}

}  // namespace

void check_same_run(Communicator& communicator, const TrainOptions& options, const SafetensorsReader* state) {
  if (communicator.size() == 1) return;
  const std::vector<Entries> all = gather_entries(communicator, run_entries(options, state));
  const Entries& first = all[0];
  for (size_t rank = 1; rank < all.size(); ++rank) {
    const Entries& theirs = all[rank];
    for (size_t i = 0; i < std::max(theirs.size(), first.size()); ++i) {
      if (i < theirs.size() && i < first.size() && theirs[i] == first[i]) continue;
      // The same build lists the same names in the same order: another name is another build.
      if (i >= theirs.size() || i >= first.size() || theirs[i].first != first[i].first)
        communicator.fail_as(static_cast<int>(rank), "its options are not listed as rank 0's (another build of "
                             "enhanced-train?): every rank must run the same program with the same options");
      // The reporter's own line names its rank and host (enhanced-train's error line).
      communicator.fail_as(static_cast<int>(rank),
                           cat(theirs[i].first, " is ", theirs[i].second, ", rank 0 has ", first[i].second,
                               " (every rank must be started with the same options and resume the same run)"));
    }
  }
}

int threads_for_rank(int requested, const Communicator& communicator) {
  return requested > 0 ? requested : default_cpu_threads(communicator.local_size());
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
