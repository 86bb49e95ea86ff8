#include "train/run_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <system_error>

#include "enhanced/atomic_file.h"
#include "enhanced/common.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;

// The files a run writes into --out (and scripts/plot-metrics' picture of them).
const char* const kRunFiles[] = {"optimizer.safetensors", "last.safetensors", "best.safetensors", "metrics.jsonl",
                                 "metrics.png"};
const char* const kLockFile = ".lock";

// A run is its state file: every write before the first one (best.safetensors at a validation,
// metrics lines) belongs to a run that --resume cannot continue, so it is not one.
bool holds_run(const fs::path& dir) { return fs::exists(dir / "optimizer.safetensors"); }

// The files a run stopped before its first state file left (empty when none).
std::string files_of_an_unsaved_run(const fs::path& dir) {
  std::string files;
  for (const char* file : {"last.safetensors", "best.safetensors"})
    if (fs::exists(dir / file)) files += (files.empty() ? "" : ", ") + std::string(file);
  return files;
}

// The pid a lock's holder wrote into the lock file, "" when unreadable (not written yet).
std::string holder_pid(int fd) {
  char text[32] = {};
  const ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
  std::string pid(text, got > 0 ? static_cast<size_t>(got) : 0);
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.find_first_not_of("0123456789") == std::string::npos ? pid : "";
}

// Locks DIR/.lock for this process and writes its pid there; refuses a directory another process
// holds. A failed run that created the directory removes the lock file again (while holding it):
// a lock taken on a file that was meanwhile unlinked is retaken on the path's new file.
int lock_directory(const fs::path& dir) {
  const fs::path path = dir / kLockFile;
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) fail(path.string(), ": cannot open the run's lock file (", std::strerror(errno), ")");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      const std::string pid = holder_pid(fd);
      ::close(fd);
      if (error == EWOULDBLOCK)
        fail(dir.string(), ": another enhanced-train", pid.empty() ? "" : " (pid " + pid + ")",
             " is using this directory");
      fail(path.string(), ": cannot lock it (", std::strerror(error), ")");
    }
    struct stat locked {}, named {};
    if (::fstat(fd, &locked) == 0 && ::stat(path.c_str(), &named) == 0 && locked.st_ino == named.st_ino &&
        locked.st_dev == named.st_dev) {
      const std::string pid = std::to_string(static_cast<long>(::getpid())) + "\n";
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
        std::fprintf(stderr, "warning: %s: cannot write this process's id into it\n", path.c_str());
      return fd;
    }
    ::close(fd);
  }
}

// A file the run would remove that is one of its inputs (--init-from DIR/best.safetensors...).
void check_not_an_input(const TrainOptions& o, const fs::path& file) {
  for (const auto& [flag, input] : {std::pair<const char*, const std::string&>{"--init-from", o.init_from},
                                    {"--pretrained", o.pretrained_path}, {"--data", o.data_path},
                                    {"--valid", o.valid_path}})
    if (!input.empty() && same_file(file.string(), input))
      fail(file.string(), ": is the run's ", flag, ", and a new run in ", o.out_dir, " would replace it: copy it "
           "elsewhere or give another --out");
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
  lock_ = lock_directory(dir);
}

OutputDirectory::~OutputDirectory() {
  std::error_code error;
  if (!kept_ && !created_.empty()) {
    const fs::path metrics = dir_ / "metrics.jsonl";
    if (fs::exists(metrics, error) && fs::file_size(metrics, error) == 0) fs::remove(metrics, error);
    fs::remove(dir_ / kLockFile, error);  // still held: see lock_directory
  }
  ::close(lock_);
  if (kept_) return;
  for (const fs::path& p : created_) fs::remove(p, error);  // only empty directories go
}

void prepare_run_files(const TrainOptions& o) {
  const fs::path dir = o.out_dir;
  if (o.resume) return;
  const std::string unsaved = files_of_an_unsaved_run(dir);
  if (holds_run(dir) && !o.overwrite)
    fail(o.out_dir, " holds another run (optimizer.safetensors): pass --resume to continue it, or --overwrite to "
         "replace it (its checkpoints and metrics are removed)");
  for (const char* file : kRunFiles) check_not_an_input(o, dir / file);
  if (!holds_run(dir) && !unsaved.empty() && o.narrate)
    std::fprintf(stderr, "note: %s holds %s but no optimizer.safetensors: a run stopped before its first checkpoint, "
                 "which --resume cannot continue; replacing its files\n", o.out_dir.c_str(), unsaved.c_str());
  for (const char* file : kRunFiles) {
    std::error_code error;
    fs::remove(dir / file, error);
    if (error) fail((dir / file).string(), ": cannot remove it to start a new run (", error.message(), ")");
  }
}

std::string no_run_to_resume(const fs::path& dir) {
  const std::string state = (dir / "optimizer.safetensors").string();
  const std::string unsaved = fs::is_directory(dir) ? files_of_an_unsaved_run(dir) : "";
  return cat(dir.string(), ": no run to resume (", state, " does not exist", unsaved.empty() ? ")" :
             cat("; its ", unsaved, " come from a run stopped before its first checkpoint: start it again without "
                 "--resume)"));
}

}  // namespace enhanced
