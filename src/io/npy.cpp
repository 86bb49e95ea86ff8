#include "enhanced/npy.h"

#include "enhanced/common.h"

namespace enhanced {

std::string npy_float32_header(const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t extent : shape) dims += cat(extent, ", ");
  if (shape.size() != 1 && !dims.empty()) dims.resize(dims.size() - 2);  // (N,) keeps its comma
  else if (shape.size() == 1) dims.pop_back();
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  constexpr size_t kPrefix = 10;  // magic (6), version (2), header length (2)
  const size_t total = (kPrefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - kPrefix - dict.size() - 1, ' ');
  dict.push_back('\n');
  if (dict.size() > 0xFFFF) fail("npy header of ", dict.size(), " bytes does not fit version 1.0");
  std::string header = "\x93NUMPY";
  header.push_back('\x01');
  header.push_back('\x00');
  header.push_back(static_cast<char>(dict.size() & 0xFF));
  header.push_back(static_cast<char>(dict.size() >> 8));
  return header + dict;
}

}  // namespace enhanced
