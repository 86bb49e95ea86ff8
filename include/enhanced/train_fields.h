// Every enhanced-train flag that TrainOptions holds, one row each: its flag, help, rule, record
// key and what a resume may do with it. enhanced-train and Model.fit register their flags from
// the rows (apps/train_flags.cpp), the run records the options and merges them on a resume
// (src/train/run_options.cpp), and check_field_values holds the merged options to the rows'
// rules, so a flag is written once. The engine's flags (--threads, --device, ...) are every
// app's (add_engine_flags, apps/app.h): their rows say only how the run records them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "enhanced/number_rule.h"
#include "enhanced/train_options.h"

namespace enhanced {

// What a flag given with --resume does to a recorded option: `fixed` ones describe the data
// order or the optimizer, and a different value is an error; `model` ones are checked against the
// saved model itself (the recorded option may be 0, "from the data"), by check_model_flags;
// `changeable` ones (the learning rate and its schedule, early stopping, intervals, threads, the
// files' paths) take the new value, which is printed and recorded, so a later resume is still
// exact; `length` (--epochs, --steps) is one choice: either flag replaces both.
enum class OnResume { fixed, model, changeable, length };

// Where a row's value lives in TrainOptions.
template <class Value>
using FieldRef = std::function<Value&(TrainOptions&)>;

// A value TrainOptions holds typed (an enum) and the flag and the record spell by name.
struct NamedField {
  std::function<std::string(const TrainOptions&)> get;
  std::function<void(TrainOptions&, const std::string&)> set;  // Error on a name it does not know
};

using FieldValue =
    std::variant<FieldRef<bool>, FieldRef<int>, FieldRef<int64_t>, FieldRef<uint64_t>, FieldRef<float>,
                 FieldRef<double>, FieldRef<std::string>, FieldRef<std::vector<std::string>>,
                 FieldRef<std::vector<float>>, NamedField>;

struct TrainField {
  std::string flag;  // "--hidden"; "" for a value the run records that no flag sets
  const char* key;   // in the recorded run options; nullptr: not recorded
  std::string help;  // "": the names' list
  FieldValue value;
  OnResume on_resume = OnResume::fixed;
  NumberRule rule{};                              // a number's range (a whole number's type: its own)
  std::vector<std::string> (*names)() = nullptr;  // the names a text or NamedField takes
  bool optional = false;           // runs recorded before it lack the key: the caller's value stands
  bool show_default = true;        // --help shows the default
  bool on_command_line = true;     // false: an engine flag, or a value the run resolves
  bool engine = false;             // an engine flag: add_engine_flags' flags go where the first one is
  bool inverted = false;           // a switch that sets its bool false (--no-shuffle, --quiet)
  bool path = false;               // a file's path, recorded absolute and canonical
  bool required = false;           // the parse fails without it
  bool absent_when_empty = false;  // recorded only when not empty (label names)
  bool checked_after_merge = true; // check_field_values holds it to `rule`

  // Chained modifiers, so that a row reads as one line.
  TrainField& range(NumberRule r) { rule = r; return *this; }
  TrainField& choices(std::vector<std::string> (*n)()) { names = n; return *this; }
  TrainField& older_runs_lack_it() { optional = true; return *this; }
  TrainField& no_default_shown() { show_default = false; return *this; }
  TrainField& not_a_flag() { on_command_line = false; return *this; }
  TrainField& engine_flag() { engine = true; return not_a_flag(); }
};

// The rows, in --help order.
const std::vector<TrainField>& train_fields();

// Refuses a number outside its row's rule as the command line would: "--lr-factor must be in (0,
// 1), got 1.5". A value at its default passes (0 for --lr-step-size: not given). Run on the
// options a resume merged, whose recorded values no parser has seen.
void check_field_values(const TrainOptions& options);

}  // namespace enhanced
