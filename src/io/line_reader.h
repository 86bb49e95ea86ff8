// A text input read line by line in bounded memory: every line is refused past a limit the
// caller derives from its format, so no input (a file of zeros with no newline) can make a
// reader hold more than that limit. The file is opened by the one input rule (input_file.h).
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "enhanced/common.h"
#include "io/input_file.h"

namespace enhanced {

class LineReader {
 public:
  // Lines of at most `limit` bytes; `why` says where the bound comes from.
  LineReader(const std::string& path, size_t limit, std::string why)
      : path_(path), buffer_(std::make_unique_for_overwrite<char[]>(kBuffer)) {
    set_limit(limit, std::move(why));
    uint64_t size = 0;
    fd_ = open_input_descriptor(path, size);
  }
  ~LineReader() { ::close(fd_); }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  void set_limit(size_t limit, std::string why) {
    limit_ = limit;
    why_ = std::move(why);
  }

  // The next line, without its '\n' or a "\r\n"'s '\r'; false at the end of the file. A line
  // longer than the limit fails "PATH: line N is longer than LIMIT bytes (WHY)", having read no
  // more than the limit of it.
  bool next(std::string& line) {
    line.clear();
    for (;;) {
      if (begin_ == end_ && !refill()) {
        if (line.empty()) return false;
        break;
      }
      const char* start = buffer_.get() + begin_;
      const auto* newline = static_cast<const char*>(std::memchr(start, '\n', end_ - begin_));
      const size_t take = newline ? static_cast<size_t>(newline - start) : end_ - begin_;
      if (line.size() + take > limit_ + 1) too_long(line_number_ + 1);  // + 1: room for a '\r' before the '\n'
      line.append(start, take);
      begin_ += take + (newline ? 1 : 0);
      if (newline) break;
    }
    ++line_number_;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.size() > limit_) too_long(line_number_);
    return true;
  }
  int64_t line_number() const { return line_number_; }

 private:
  static constexpr size_t kBuffer = 1 << 20;  // not zero-filled: a small input touches one page of it

  [[noreturn]] void too_long(int64_t line_number) const {
    fail(path_, ": line ", line_number, " is longer than ", limit_, " bytes (", why_, ")");
  }

  bool refill() {
    ssize_t got;
    do got = ::read(fd_, buffer_.get(), kBuffer);
    while (got < 0 && errno == EINTR);
    if (got < 0) fail(path_, ": read failed after line ", line_number_, ": ", std::strerror(errno));
    begin_ = 0;
    end_ = static_cast<size_t>(got);
    return got > 0;
  }

  std::string path_;
  int fd_ = -1;
  std::unique_ptr<char[]> buffer_;
  size_t begin_ = 0, end_ = 0;
  size_t limit_ = 0;
  std::string why_;
  int64_t line_number_ = 0;
};

}  // namespace enhanced
