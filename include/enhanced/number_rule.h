// The numeric flag rules (apps/app.h makes each a CLI11 check), in a header of their own so that
// the engine checks a value it did not parse, a resumed run's recorded one, by the same rule and
// in the same words.
#pragma once

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "enhanced/common.h"

namespace enhanced {

// The numeric flag rules, each written once and used by every app. A rule refuses, as
// "--flag must be ..., got X", anything but a number in its range: words, NaN and infinities
// (which compare false against any bound and so would slip through a plain comparison), and,
// for rules with integer bounds (at_least(1) rather than at_least(0.0)), fractions and values
// beyond the bound's type (at_least(1): an int; at_least(int64_t{1}): an int64_t, so give the
// bound the flag's type). Likewise a float flag's rule (at_least(0.0f)) judges the value as the
// float it becomes: 1e300 does not fit one (it would be inf), and 1e-50 is 0 there. CLI11 runs a
// rule on the text before converting it, so it is parsed here.
struct NumberRule {
  double low = -HUGE_VAL, high = HUGE_VAL;
  bool low_open = false, high_open = false, integer = false;
  long long whole_max = LLONG_MAX;  // the flag's type's largest value, for integer rules
  bool single = false;              // the flag is a float

  static std::string show(double value, bool integer) {
    return integer ? std::to_string(static_cast<long long>(value)) : cat(value);
  }
  std::string range_text() const {
    if (high == HUGE_VAL) return cat(low_open ? "greater than " : "at least ", show(low, integer));
    return cat("in ", low_open ? "(" : "[", show(low, integer), ", ", show(high, integer), high_open ? ")" : "]");
  }
  // "" when `text` obeys the rule, else the rule's sentence without the flag's name.
  std::string check(const std::string& text) const {
    errno = 0;
    char* end = nullptr;
    double value = integer ? static_cast<double>(std::strtoll(text.c_str(), &end, 10)) : std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value))
      return cat("must be ", integer ? "a whole number " : "a finite number ", range_text(), ", got '", text, "'");
    if (integer && (errno == ERANGE || value > static_cast<double>(whole_max))) {
      // A range whose top is below the type's says all already: the type's bound only without one.
      const std::string type_bound = high <= static_cast<double>(whole_max) ? "" : cat(" and at most ", whole_max);
      return cat("must be ", range_text(), type_bound, ", got ", text);
    }
    if (single && std::fabs(value) > static_cast<double>(std::numeric_limits<float>::max()))
      return cat("must be ", range_text(), " and fit a float (at most ", std::numeric_limits<float>::max(), "), got ", text);
    if (single) value = static_cast<double>(static_cast<float>(value));
    return outside(value) ? cat("must be ", range_text(), ", got ", text) : "";
  }
  // The same for a value already parsed (a resumed run's merged options): "" or the sentence.
  std::string check_value(double value) const {
    return !std::isfinite(value) || outside(value) ? cat("must be ", range_text(), ", got ", show(value, integer)) : "";
  }
  // NaN is outside every range: each comparison is written to be false for it.
  bool outside(double value) const {
    return (low_open ? !(value > low) : !(value >= low)) || (high_open ? !(value < high) : !(value <= high));
  }
};

}  // namespace enhanced
