// An enum's names written once: a table of (value, name) rows, kept in the source that owns the
// enum (blend_modes() in src/core/model.cpp, precisions() in src/core/precision.cpp, ...). Its
// parse, to_string, the error text's list and the apps' CLI11 choices all come from the table,
// so a new value is its enumerator and its row.
#pragma once

#include <string>
#include <vector>

#include "enhanced/common.h"

namespace enhanced {

template <class Enum>
struct EnumName {
  Enum value;
  const char* name;
};

template <class Enum>
using EnumNames = std::vector<EnumName<Enum>>;

// The table's names in its order (CLI11's IsMember list, Python's tuples).
template <class Enum>
std::vector<std::string> names_of(const EnumNames<Enum>& table) {
  std::vector<std::string> names;
  for (const EnumName<Enum>& row : table) names.emplace_back(row.name);
  return names;
}

// "a", "a or b", "a, b or c": the list an error text or a flag's help gives.
inline std::string names_text(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return text;
}

template <class Enum>
std::string names_text(const EnumNames<Enum>& table) {
  return names_text(names_of(table));
}

// The name of `value`, "?" for a value without a row.
template <class Enum>
const char* name_of(const EnumNames<Enum>& table, Enum value) {
  for (const EnumName<Enum>& row : table)
    if (row.value == value) return row.name;
  return "?";
}

// The row named `text`, or nullptr: the caller's error names its flag or file.
template <class Enum>
const EnumName<Enum>* find_name(const EnumNames<Enum>& table, const std::string& text) {
  for (const EnumName<Enum>& row : table)
    if (text == row.name) return &row;
  return nullptr;
}

// The value a flag's `text` names, or Error "FLAG must be a, b or c, got 'text'".
template <class Enum>
Enum parse_flag_value(const EnumNames<Enum>& table, const std::string& text, const char* flag) {
  if (const EnumName<Enum>* row = find_name(table, text)) return row->value;
  fail(flag, " must be ", names_text(table), ", got '", text, "'");
}

}  // namespace enhanced
