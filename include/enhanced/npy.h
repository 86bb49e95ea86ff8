// NumPy .npy output: the version 1.0 header of a little-endian float32 array in C order, as
// numpy.save writes it, so numpy.load (and np.memmap at offset 64 upward) reads the file as is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace enhanced {

// "\x93NUMPY" 1 0, the header length (u16 LE), then
// "{'descr': '<f4', 'fortran_order': False, 'shape': (N, L), }" padded with spaces and a final
// '\n' to a multiple of 64 bytes in all. The float32 data follows it.
std::string npy_float32_header(const std::vector<int64_t>& shape);

}  // namespace enhanced
