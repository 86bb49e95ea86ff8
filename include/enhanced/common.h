// Shared basics: the error type every bad input becomes, and a string builder for messages.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace enhanced {

// One error type for everything a user can get wrong (files, flags, data). Apps catch it and
// print "error: <what>" on one line with a non-zero exit. Messages name the file, then the
// sample/line and the position.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(cat(parts...));
}

}  // namespace enhanced
