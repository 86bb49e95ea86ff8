// Small file helpers for the data layer: a checked buffered writer and a scope guard that
// removes temporary files unless the operation completes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace enhanced::detail {

// Buffered binary/text writer over FILE*; every failure throws Error naming the file.
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

// Removes the listed files when destroyed, unless release() was called.
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

// Renames `from` to `to`, throwing Error on failure.
void rename_file(const std::string& from, const std::string& to);

// A temporary name beside `path` that includes the process id.
std::string temp_name(const std::string& path, const std::string& suffix);

}  // namespace enhanced::detail
