#include "enhanced/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "enhanced/common.h"

namespace enhanced {

namespace {

// The file a temp_name stands for (its name up to this process's first ".tmp.<pid>"), or `path`:
// what an error names, the file the user asked for.
std::string temp_target(const std::string& path) {
  const size_t at = path.find(cat(".tmp.", static_cast<long>(::getpid())));
  return at == std::string::npos ? path : path.substr(0, at);
}

}  // namespace

void check_output_directory(const std::string& path) {
  const std::filesystem::path directory = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!directory.empty() && !std::filesystem::is_directory(directory, error))
    fail(path, ": cannot create: directory ", directory.string(), " does not exist");
  // A directory where the file would go: renaming over it fails only after all the work.
  if (std::filesystem::is_directory(path, error)) fail(path, ": cannot create: it is a directory");
}

FileWriter::FileWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) {
    const int error = errno;
    check_output_directory(temp_target(path));
    fail(temp_target(path), ": cannot create: ", std::strerror(error));
  }
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
}

FileWriter::~FileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void FileWriter::write(const void* data, size_t bytes) {
  if (bytes == 0) return;
  if (std::fwrite(data, 1, bytes, file_) != bytes) fail(temp_target(path_), ": write failed: ", std::strerror(errno));
  size_ += bytes;
}

void FileWriter::pad_to(uint64_t alignment) {
  static const char zeros[64] = {};
  while (size_ % alignment != 0) write(zeros, static_cast<size_t>(alignment - size_ % alignment));
}

void FileWriter::append_file(const std::string& path) {
  FILE* in = std::fopen(path.c_str(), "rb");  // a section this process wrote: errors name the output
  if (in == nullptr) fail(temp_target(path_), ": cannot read back a section: ", std::strerror(errno));
  constexpr size_t kChunk = 1 << 20;
  const auto buffer = std::make_unique_for_overwrite<char[]>(kChunk);  // not zero-filled: a small file touches a page
  for (;;) {
    size_t got = std::fread(buffer.get(), 1, kChunk, in);
    if (got > 0) {
      try {
        write(buffer.get(), got);
      } catch (...) {
        std::fclose(in);
        throw;
      }
    }
    if (got < kChunk) {
      bool bad = std::ferror(in) != 0;
      std::fclose(in);
      if (bad) fail(temp_target(path_), ": cannot read back a section: read failed");
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
  if (bad) fail(temp_target(path_), ": write failed: ", std::strerror(errno));
}

namespace {

// Renames a temporary file that is already on disk over `path`, then flushes the directory so
// that the rename reaches the disk too (best effort).
void rename_into_place(const std::string& temporary, const std::string& path) {
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail(path, ": rename failed (", std::strerror(error), "); the previous file, if any, is intact");
  }
  const std::string directory = std::filesystem::path(path).parent_path().string();
  const int directory_fd = ::open(directory.empty() ? "." : directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directory_fd >= 0) {
    ::fsync(directory_fd);
    ::close(directory_fd);
  }
}

}  // namespace

void commit_file(const std::string& temporary, const std::string& path) {
  const int fd = ::open(temporary.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int error = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(temporary.c_str());
    fail(path, ": fsync failed (", std::strerror(error), "); the previous file, if any, is intact");
  }
  ::close(fd);
  rename_into_place(temporary, path);
}

void write_file_atomically(const std::string& path, const std::vector<std::pair<const void*, size_t>>& pieces) {
  // Registered before it exists: a second Ctrl-C that ends the process mid-write removes it.
  TempFiles guard;
  const std::string temporary = guard.add(temp_name(path));
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int error = errno;
    check_output_directory(path);
    fail(path, ": cannot write (", std::strerror(error), ")");
  }
  auto give_up = [&](const char* what) {
    const int error = errno;
    ::close(fd);
    ::unlink(temporary.c_str());
    fail(path, ": ", what, " failed (", std::strerror(error), "); the previous file, if any, is intact");
  };
  for (const auto& [data, size] : pieces) {
    const char* bytes = static_cast<const char*>(data);
    size_t done = 0;
    while (done < size) {
      const ssize_t written = ::write(fd, bytes + done, size - done);
      if (written < 0) {
        if (errno == EINTR) continue;
        give_up("write");
      }
      done += static_cast<size_t>(written);
    }
  }
  if (::fsync(fd) != 0) give_up("fsync");
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail(path, ": close failed (", std::strerror(error), ")");
  }
  rename_into_place(temporary, path);
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code error, error_a, error_b;
  if (a == b || std::filesystem::equivalent(a, b, error)) return true;
  // Files not there yet: the same normalised absolute path ("o.csv", "./o.csv", "$PWD/o.csv";
  // weakly_canonical leaves a relative path with no existing prefix relative).
  const std::filesystem::path canonical_a = std::filesystem::weakly_canonical(std::filesystem::absolute(a, error_a), error_a);
  const std::filesystem::path canonical_b = std::filesystem::weakly_canonical(std::filesystem::absolute(b, error_b), error_b);
  return !error_a && !error_b && canonical_a == canonical_b;
}

void check_outputs_spare_inputs(const std::vector<NamedFile>& outputs, const std::vector<NamedFile>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedFile& out = outputs[i];
    if (out.path.empty()) continue;
    for (const NamedFile& in : inputs)
      if (!in.path.empty() && same_file(out.path, in.path))
        fail(out.path, ": ", out.flag, " would overwrite ", in.flag, " (the same file)");
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() && same_file(out.path, outputs[j].path))
        fail(out.path, ": ", outputs[j].flag, " and ", out.flag, " name the same file");
  }
}

}  // namespace enhanced
