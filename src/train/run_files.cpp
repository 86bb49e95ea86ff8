#include "train/run_files.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <system_error>

#include "enhanced/common.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;

// The files a run writes into --out (and scripts/plot-metrics' picture of them).
const char* const kRunFiles[] = {"optimizer.safetensors", "last.safetensors", "best.safetensors", "metrics.jsonl",
                                 "metrics.png"};

// A run is its checkpoints: a metrics.jsonl alone (a run killed before its first checkpoint)
// is not one, and a new run replaces it.
bool holds_run(const fs::path& dir) {
  for (const char* file : {"optimizer.safetensors", "last.safetensors", "best.safetensors"})
    if (fs::exists(dir / file)) return true;
  return false;
}

}  // namespace

OutputDirectory::OutputDirectory(const fs::path& dir) : dir_(dir) {
  for (fs::path p = fs::absolute(dir); !p.empty() && !fs::exists(p); p = p.parent_path()) {
    created_.push_back(p);
    if (p == p.parent_path()) break;
  }
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) fail(dir.string(), ": cannot create the output directory (", error.message(), ")");
  const fs::path probe = dir / (".write-test." + std::to_string(::getpid()));
  std::ofstream out(probe);
  if (!out) fail(dir.string(), ": output directory is not writable");
  out.close();
  fs::remove(probe, error);
}

OutputDirectory::~OutputDirectory() {
  if (kept_) return;
  std::error_code error;
  const fs::path metrics = dir_ / "metrics.jsonl";
  if (!created_.empty() && fs::exists(metrics, error) && fs::file_size(metrics, error) == 0) fs::remove(metrics, error);
  for (const fs::path& p : created_) fs::remove(p, error);  // only empty directories go
}

void prepare_run_files(const TrainOptions& o) {
  const fs::path dir = o.out_dir;
  if (o.resume || !holds_run(dir)) return;
  if (!o.overwrite)
    fail(o.out_dir, " holds another run (", fs::exists(dir / "optimizer.safetensors") ? "optimizer.safetensors"
                                                                                       : "its files",
         "): pass --resume to continue it, or --overwrite to replace it (its checkpoints and metrics are removed)");
  for (const char* file : kRunFiles) {
    std::error_code error;
    fs::remove(dir / file, error);
    if (error) fail((dir / file).string(), ": cannot remove it for --overwrite (", error.message(), ")");
  }
}

}  // namespace enhanced
