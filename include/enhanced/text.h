// Text a message quotes from outside the program (a file's content, a name, an argument): kept
// short and made valid UTF-8 without control characters, so an error line is always one line of
// text whatever the input held.
#pragma once

#include <cstddef>
#include <string>

namespace enhanced {

// The length of the well-formed UTF-8 sequence at text[at] (no overlong forms, no surrogates,
// nothing past U+10FFFF), or 0 (at the end too).
size_t utf8_sequence(const std::string& text, size_t at);

// `text` as a message quotes it: each byte that is not part of well-formed UTF-8, and each
// control character (a tab and a line end included), as \xNN; at most `limit` bytes of `text`
// (cut at a character's start), then "...". A hostile file's 60 KB value stays off the error
// line, and its raw bytes out of the terminal.
std::string excerpt(const std::string& text, size_t limit = 60);

}  // namespace enhanced
