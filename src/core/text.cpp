#include "enhanced/text.h"

namespace enhanced {

size_t utf8_sequence(const std::string& text, size_t at) {
  const auto byte = [&](size_t i) { return i < text.size() ? static_cast<unsigned char>(text[i]) : 0u; };
  if (at >= text.size()) return 0;
  const unsigned lead = byte(at);
  if (lead < 0x80) return 1;
  size_t length;
  unsigned low = 0x80, high = 0xBF;  // the second byte's range
  if (lead >= 0xC2 && lead <= 0xDF) length = 2;
  else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (byte(at + 1) < low || byte(at + 1) > high) return 0;
  for (size_t i = 2; i < length; ++i)
    if ((byte(at + i) & 0xC0) != 0x80) return 0;
  return length;
}

std::string excerpt(const std::string& text, size_t limit) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  size_t at = 0;
  while (at < text.size() && at < limit) {
    const size_t length = utf8_sequence(text, at);
    const unsigned char c = static_cast<unsigned char>(text[at]);
    if (length > 1) {
      if (at + length > limit) break;  // never half a character
      out.append(text, at, length);
      at += length;
      continue;
    }
    if (length == 1 && c >= 0x20 && c != 0x7F) out += static_cast<char>(c);
    else out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    ++at;
  }
  return at < text.size() ? out + "..." : out;
}

}  // namespace enhanced
