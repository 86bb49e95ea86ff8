// Temporary files: their names, their removal when an operation gives up (TempFiles), when a
// signal ends the process (a fixed registry the handler reads), and after a SIGKILL (stale
// files of dead processes, removed when the next run starts).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "enhanced/atomic_file.h"
#include "enhanced/common.h"

namespace enhanced {
namespace {

// Paths a signal handler may unlink: fixed storage, no allocation, each slot claimed by one
// compare-exchange. A slot is written while `kWriting` and read by the handler only when `kReady`.
constexpr int kSlots = 64;
constexpr size_t kPathBytes = 4096;
enum SlotState : int { kFree, kWriting, kReady };
std::atomic<int> slot_state[kSlots];
char slot_path[kSlots][kPathBytes];

void register_for_signals(const std::string& path) {
  if (path.size() >= kPathBytes) return;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!slot_state[i].compare_exchange_strong(expected, kWriting)) continue;
    std::memcpy(slot_path[i], path.c_str(), path.size() + 1);
    slot_state[i].store(kReady);
    return;
  }
}

void unregister_for_signals(const std::string& path) {
  for (int i = 0; i < kSlots; ++i) {
    int expected = kReady;
    if (slot_state[i].load() == kReady && std::strcmp(slot_path[i], path.c_str()) == 0 &&
        slot_state[i].compare_exchange_strong(expected, kWriting))
      slot_state[i].store(kFree);
  }
}

extern "C" void remove_temp_files_and_reraise(int signal_number) {
  for (int i = 0; i < kSlots; ++i)
    if (slot_state[i].load() == kReady) ::unlink(slot_path[i]);
  ::raise(signal_number);  // the handler was installed with SA_RESETHAND: this takes the default action
}

// The process id in a temp_name file name ("<target>.tmp.<pid>[.<suffix>]"), or 0 when the name
// is not one of ours.
long temp_file_pid(const std::string& name) {
  for (size_t at = name.rfind(".tmp."); at != std::string::npos && at > 0; at = name.rfind(".tmp.", at - 1)) {
    size_t end = at + 5;
    long pid = 0;
    while (end < name.size() && name[end] >= '0' && name[end] <= '9' && pid < (1L << 31))
      pid = pid * 10 + (name[end++] - '0');
    if (end == at + 5 || pid <= 0 || pid >= (1L << 31)) continue;
    if (end == name.size()) return pid;
    if (name[end] != '.' || end + 1 == name.size()) continue;
    bool suffix_ok = true;
    for (size_t i = end + 1; i < name.size(); ++i) {
      const char c = name[i];
      suffix_ok = suffix_ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
    }
    if (suffix_ok) return pid;
  }
  return 0;
}

// kill(pid, 0) fails with ESRCH only when no such process exists (EPERM: alive, someone else's).
bool process_alive(long pid) {
  return pid == static_cast<long>(::getpid()) || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH;
}

}  // namespace

TempFiles::~TempFiles() { remove_all(); }

std::string TempFiles::add(std::string path) {
  register_for_signals(path);
  paths_.push_back(std::move(path));
  return paths_.back();
}

void TempFiles::remove_all() {
  for (const auto& p : paths_) {
    std::remove(p.c_str());
    unregister_for_signals(p);
  }
  paths_.clear();
}

std::string temp_name(const std::string& path, const std::string& suffix) {
  return cat(path, ".tmp.", static_cast<long>(::getpid()), suffix);
}

std::vector<std::string> remove_stale_temp_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir.empty() ? "." : dir, error)) {
    const long pid = temp_file_pid(entry.path().filename().string());
    if (pid == 0 || !entry.is_regular_file(error) || process_alive(pid)) continue;
    if (std::filesystem::remove(entry.path(), error)) removed.push_back(entry.path().string());
  }
  return removed;
}

std::vector<std::string> remove_stale_temp_files_beside(const std::string& path) {
  return remove_stale_temp_files(std::filesystem::path(path).parent_path().string());
}

void remove_temp_files_on_signal() {
  struct sigaction action {};
  action.sa_handler = remove_temp_files_and_reraise;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  for (int signal_number : {SIGTERM, SIGINT}) ::sigaction(signal_number, &action, nullptr);
}

}  // namespace enhanced
