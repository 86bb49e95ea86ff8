// Shared basics: the error type every bad input becomes, and a string builder for messages.
#pragma once

#include <new>
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

// Runs body(), turning a std::bad_alloc, which says nothing of where it came from, into an Error
// "out of memory <what>" (what: "allocating ...", naming the buffer and its size). For the few
// large allocations (model-sized buffers, an engine's, a file read whole); a bad_alloc anywhere
// else is still reported, as a bare "out of memory", by the apps.
template <class Body>
decltype(auto) allocating(const std::string& what, Body&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    fail("out of memory ", what);
  }
}

}  // namespace enhanced
