// Files that appear whole or not at all: every output (checkpoints, state files, .ebin, CSV) is
// written under a temporary name beside its path, flushed to disk and renamed over it, so a
// crash or a full disk leaves the previous file intact. Also a checked buffered writer, a scope
// guard that removes temporary files unless the operation completes (or a signal ends it), and
// the removal of those a killed process left (src/io/temp_files.cpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace enhanced {

// Buffered binary/text writer over FILE*; every failure throws Error naming the file: for a
// temp_name file, the output it stands for (the user's path, not the temporary).
class FileWriter {
 public:
  FileWriter() = default;
  explicit FileWriter(const std::string& path);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t bytes);
  template <class T>
  void put(const T& value) {
    write(&value, sizeof(T));
  }
  // Writes zero bytes until the size is a multiple of `alignment`.
  void pad_to(uint64_t alignment);
  // Appends the whole content of `path` (read back in chunks).
  void append_file(const std::string& path);
  uint64_t size() const { return size_; }
  void close();  // flushes and closes; throws on error
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  FILE* file_ = nullptr;
  uint64_t size_ = 0;
};

// Removes the listed files when destroyed (a file already renamed away is not there to remove).
// While listed, each is also in a fixed, async-signal-safe registry (the first 64 at once), which
// remove_temp_files_on_signal's handler empties when SIGTERM or SIGINT arrives.
class TempFiles {
 public:
  TempFiles() = default;
  ~TempFiles();
  TempFiles(const TempFiles&) = delete;
  TempFiles& operator=(const TempFiles&) = delete;
  std::string add(std::string path);
  void remove_all();  // removes now (never throws)

 private:
  std::vector<std::string> paths_;
};

// A temporary name beside `path`: path.tmp.<process id><suffix>, the suffix empty or "." and
// letters, digits or '_'.
std::string temp_name(const std::string& path, const std::string& suffix = "");

// Removes from `dir` (not its subfolders) the regular files named by temp_name whose process is
// no longer alive: what a process killed with SIGKILL, or by a crash, left behind. A live
// process's temporaries (another run writing beside this one) are kept; "alive" is judged in this
// PID namespace, so do not share an output directory with a run in another container. Returns
// the paths removed.
// Call it where a run or a conversion starts writing into `dir`.
std::vector<std::string> remove_stale_temp_files(const std::string& dir);
// The same in the folder that the output `path` goes to: every writer (convert, split, predict's
// outputs, eval's predictions) calls it once, before it makes its own temporaries there (not
// write_file_atomically: a run's checkpoints would scan their folder at every save).
std::vector<std::string> remove_stale_temp_files_beside(const std::string& path);

// Installs a SIGTERM and SIGINT handler that removes every file TempFiles has registered, then
// re-raises the signal with its default action (the exit status still names the signal).
void remove_temp_files_on_signal();

// Fails "<path>: cannot create: directory <dir> does not exist" when the folder `path` would be
// written into is missing, so that the error names the user's file, not a temporary. Writers call
// it before any work; FileWriter and write_file_atomically call it when a create fails.
void check_output_directory(const std::string& path);

// Makes the closed file `temporary` the file `path`: flushes it to disk, renames it over `path`
// and flushes the directory. Throws Error naming `path`; `temporary` is removed on failure.
void commit_file(const std::string& temporary, const std::string& path);

// The same file under two names (relative and absolute paths, links, or, for files not there
// yet, the same normalised path), not only the same string: an output that would overwrite its
// input, or another output, is refused with it.
bool same_file(const std::string& a, const std::string& b);

// A file an app reads or writes, with the flag that named it.
struct NamedFile {
  const char* flag;
  std::string path;  // "" when the flag was not given
};

// Refuses, before any work, an output that names one of the app's inputs or another output by
// any path to the same file (same_file: device and inode where the file exists): "<output>:
// --predictions would overwrite --data (the same file)". No app writes over what it reads.
void check_outputs_spare_inputs(const std::vector<NamedFile>& outputs, const std::vector<NamedFile>& inputs);

// Writes the pieces to a temporary file (0644), flushes it to disk and renames it over `path`.
// Errors name the file.
void write_file_atomically(const std::string& path, const std::vector<std::pair<const void*, size_t>>& pieces);

}  // namespace enhanced
