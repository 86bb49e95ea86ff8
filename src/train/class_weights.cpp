#include "train/class_weights.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "enhanced/common.h"
#include "io/input_file.h"

namespace enhanced {

std::vector<float> balanced_class_weights(const std::vector<int64_t>& counts) {
  int64_t samples = 0;
  for (const int64_t count : counts) samples += count;
  std::vector<float> weights(counts.size(), 0.0f);
  for (size_t c = 0; c < counts.size(); ++c)
    if (counts[c] > 0)
      weights[c] = static_cast<float>(static_cast<double>(samples) /
                                      (static_cast<double>(counts.size()) * static_cast<double>(counts[c])));
  return weights;
}

namespace {

bool is_separator(char c) { return c == ',' || std::isspace(static_cast<unsigned char>(c)); }

// One number of the file: its text and where it starts (1-based line and column).
struct Token {
  std::string text;
  int line = 1, column = 1;
};

// A class weights file is L numbers, at most one line of kBytesPerWeight each: a larger file is
// refused by its size before it is read, so no file (however large) sets the memory used.
constexpr uint64_t kBytesPerWeight = 64;

std::string weights_text(const std::string& path, int num_labels) {
  InputFile file = open_input_file(path, "the class weights file");
  const uint64_t limit = kBytesPerWeight * static_cast<uint64_t>(num_labels);
  if (file.size > limit)
    fail(path, ": ", file.size, " bytes, longer than the ", limit, " that ", num_labels, " class weights can be (",
         num_labels, " lines of a number, at most ", kBytesPerWeight, " bytes each)");
  std::string text(file.size, '\0');
  file.stream.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (file.stream.bad()) fail(path, ": read failed");
  text.resize(static_cast<size_t>(file.stream.gcount()));
  return text;
}

std::vector<Token> tokens_of(const std::string& text) {
  std::vector<Token> tokens;
  int line = 1, column = 1;
  for (size_t i = 0; i < text.size();) {
    if (is_separator(text[i])) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
      ++i;
      continue;
    }
    Token token{"", line, column};
    while (i < text.size() && !is_separator(text[i])) {
      token.text += text[i++];
      ++column;
    }
    tokens.push_back(std::move(token));
  }
  return tokens;
}

}  // namespace

std::vector<float> read_class_weights(const std::string& path, int num_labels) {
  const std::vector<Token> tokens = tokens_of(weights_text(path, num_labels));
  std::vector<float> weights;
  for (const Token& token : tokens) {
    const std::string where = cat(path, ":", token.line, ":", token.column, ": class weight ", weights.size());
    if (weights.size() == static_cast<size_t>(num_labels))
      fail(where, ": more than ", num_labels, " numbers (the model has ", num_labels, " labels)");
    char* end = nullptr;
    const double value = std::strtod(token.text.c_str(), &end);
    if (end == token.text.c_str() || *end != '\0') fail(where, ": '", token.text, "' is not a number");
    const float weight = static_cast<float>(value);
    if (!std::isfinite(value)) fail(where, ": ", token.text, " is not a finite float");
    if (!std::isfinite(weight))
      fail(where, ": ", token.text, " does not fit a float (at most ", std::numeric_limits<float>::max(), ")");
    if (!(value >= 0)) fail(where, ": ", token.text, " is negative (weights must be >= 0)");
    weights.push_back(weight);
  }
  if (weights.size() != static_cast<size_t>(num_labels))
    fail(path, ": ", weights.size(), " class weights, the model has ", num_labels, " labels");
  return weights;
}

std::vector<float> class_weights_for(const std::string& spec, const Dataset& train, int num_labels) {
  if (spec.empty()) return {};
  if (spec != "balanced") return read_class_weights(spec, num_labels);
  std::vector<int64_t> counts(static_cast<size_t>(num_labels), 0);
  for (int64_t i = 0; i < train.num_samples(); ++i) {
    const int32_t label = train.label(i);
    if (label < 0 || label >= num_labels)
      fail(train.path(), ": sample ", i, " has label ", label, ", the model has ", num_labels, " labels");
    ++counts[static_cast<size_t>(label)];
  }
  return balanced_class_weights(counts);
}

}  // namespace enhanced
