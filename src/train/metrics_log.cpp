#include "train/metrics_log.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "enhanced/common.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;

int64_t count_lines(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  int64_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

// The "seconds" of the file's last line that has them (0: none does).
double last_seconds(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string last;
  for (std::string line; std::getline(in, line);)
    if (line.find("\"seconds\"") != std::string::npos) last = line;
  if (last.empty()) return 0;
  const nlohmann::json j = nlohmann::json::parse(last, nullptr, false);
  return j.is_object() && j.contains("seconds") && j["seconds"].is_number() ? j["seconds"].get<double>() : 0;
}

// Lines, not bytes: the times in them make the length vary.
void cut_metrics(const fs::path& path, int64_t lines) {
  std::ifstream in(path, std::ios::binary);
  int64_t seen = 0;
  uintmax_t keep = 0;
  for (std::string line; seen < lines && std::getline(in, line); ++seen) keep += line.size() + 1;
  in.close();
  std::error_code error;
  if (seen < lines)
    std::fprintf(stderr, "warning: %s has %lld lines, the run's state recorded %lld; appending to it\n",
                 path.c_str(), static_cast<long long>(seen), static_cast<long long>(lines));
  else if (keep < fs::file_size(path, error))
    fs::resize_file(path, keep, error);
  if (error) fail(path.string(), ": cannot cut it back to the run's state (", error.message(), ")");
}

}  // namespace

void MetricsLog::open(const fs::path& dir, bool resume, bool speaks, RunPosition& position) {
  speaks_ = speaks;
  path_ = dir / "metrics.jsonl";
  if (!speaks_) return;  // rank 0 writes the run's files
  if (resume && fs::exists(path_)) {
    // A state written before the count was recorded: keep every line, count them.
    if (position.metrics_lines < 0) position.metrics_lines = count_lines(path_);
    cut_metrics(path_, position.metrics_lines);
  }
  lines_ = std::max<int64_t>(position.metrics_lines, 0);
  if (resume) earlier_seconds_ = fs::exists(path_) ? last_seconds(path_) : -1;
  file_.open(path_, resume ? std::ios::app : std::ios::trunc);
  if (!file_) fail(path_.string(), ": cannot write");
}

void MetricsLog::write(const nlohmann::json& line) {
  ++lines_;  // counted on every rank: the state file records it
  if (!speaks_) return;
  file_ << line.dump() << '\n' << std::flush;
  if (!file_) fail(path_.string(), ": cannot write (disk full?)");
}

}  // namespace enhanced
