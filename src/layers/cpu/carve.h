// Carving one caller-owned buffer into a layer's parts: each part starts on a boundary of
// `align` elements, in order. The size functions and the users carve with the same sizes.
#pragma once

#include <cstddef>

namespace enhanced {

// Elements the parts take; with base, parts[i] = where part i starts (base null: sizes only).
template <class T, size_t N>
size_t carve_parts(T* base, const size_t (&sizes)[N], size_t align, T* (*parts)[N] = nullptr) {
  size_t offset = 0;
  for (size_t i = 0; i < N; ++i) {
    if (parts) (*parts)[i] = base + offset;
    offset += (sizes[i] + align - 1) / align * align;
  }
  return offset;
}

}  // namespace enhanced
