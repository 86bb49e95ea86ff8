#include "data/file_util.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "enhanced/common.h"

namespace enhanced::detail {

FileWriter::FileWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) fail(path, ": cannot create: ", std::strerror(errno));
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
}

FileWriter::~FileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void FileWriter::write(const void* data, size_t bytes) {
  if (bytes == 0) return;
  if (std::fwrite(data, 1, bytes, file_) != bytes) fail(path_, ": write failed: ", std::strerror(errno));
  size_ += bytes;
}

void FileWriter::pad_to(uint64_t alignment) {
  static const char zeros[64] = {};
  while (size_ % alignment != 0) write(zeros, static_cast<size_t>(alignment - size_ % alignment));
}

void FileWriter::append_file(const std::string& path) {
  FILE* in = std::fopen(path.c_str(), "rb");
  if (in == nullptr) fail(path, ": cannot open: ", std::strerror(errno));
  std::vector<char> buffer(1 << 20);
  for (;;) {
    size_t got = std::fread(buffer.data(), 1, buffer.size(), in);
    if (got > 0) {
      try {
        write(buffer.data(), got);
      } catch (...) {
        std::fclose(in);
        throw;
      }
    }
    if (got < buffer.size()) {
      bool bad = std::ferror(in) != 0;
      std::fclose(in);
      if (bad) fail(path, ": read failed");
      return;
    }
  }
}

void FileWriter::close() {
  if (file_ == nullptr) return;
  FILE* f = file_;
  file_ = nullptr;
  bool bad = std::fflush(f) != 0;
  bad = (std::fclose(f) != 0) || bad;
  if (bad) fail(path_, ": write failed: ", std::strerror(errno));
}

TempFiles::~TempFiles() { remove_all(); }

std::string TempFiles::add(std::string path) {
  paths_.push_back(std::move(path));
  return paths_.back();
}

void TempFiles::remove_all() {
  for (const auto& p : paths_) std::remove(p.c_str());
  paths_.clear();
}

void rename_file(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    fail(to, ": cannot rename ", from, " to it: ", std::strerror(errno));
}

std::string temp_name(const std::string& path, const std::string& suffix) {
  return cat(path, ".tmp", static_cast<long>(::getpid()), suffix);
}

}  // namespace enhanced::detail
