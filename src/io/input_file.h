// Opening a user's input file, the same way for every reader (.ebin, JSON Lines, class weights,
// embedding tables, safetensors): check_input_file is the one rule, and the two openers below
// call it before they open anything.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "enhanced/common.h"

namespace enhanced {

// What a file that is not a regular one is, for "not a regular file (a FIFO)".
inline const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

// Fails "PATH: not a regular file (a FIFO)" (a directory, a device, a socket), or "PATH: cannot
// open[ WHAT]: REASON" for a file that is not there, before anything opens it: opening a FIFO
// would wait for a writer, forever, and reading /dev/zero would never end. stat opens nothing.
// `what` (optional) says what the file is for ("the class weights file"). Returns st_size.
inline uint64_t check_input_file(const std::string& path, const char* what = nullptr) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, ": cannot open", what ? " " : "", what ? what : "", ": ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, ": not a regular file (", file_kind(st.st_mode), ")");
  return static_cast<uint64_t>(st.st_size);
}

struct InputFile {
  std::ifstream stream;
  size_t size = 0;
};

// The file as a binary stream at its start, its size known.
inline InputFile open_input_file(const std::string& path, const char* what = nullptr) {
  InputFile file;
  file.size = static_cast<size_t>(check_input_file(path, what));
  file.stream.open(path, std::ios::binary);
  if (!file.stream) fail(path, ": cannot open", what ? " " : "", what ? what : "", ": ", std::strerror(errno));
  return file;
}

// The file as a read-only descriptor (for mmap), its size in `size`. O_NONBLOCK and a second
// check on the open descriptor: a FIFO put in the file's place after the stat cannot block either.
inline int open_input_descriptor(const std::string& path, uint64_t& size) {
  check_input_file(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(error));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file (", file_kind(st.st_mode), ")");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  size = static_cast<uint64_t>(st.st_size);
  return fd;
}

}  // namespace enhanced
