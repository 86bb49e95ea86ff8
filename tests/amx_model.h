// A scalar model of the AMX tile intrinsics bf16_gemm_amx.inc uses, for the tests: eight tiles of
// up to 16 rows of 64 bytes in each thread, configured by _tile_loadconfig (palette 1), with
// TDPBF16PS as the Intrinsics Guide's pseudocode has it: C[m][n] += sum over K pairs p of
// A[m].pair[p] . B[p].pair[n], each exact product added to C in turn in FP32, the even element
// first. (The current SDM sums the even and the odd products apart, then adds both to C: another
// order of FP32 sums, within the tests' tolerances.) Unlike the instruction, it does not flush
// subnormals, and it checks the operands' shapes, which the instruction leaves to the programmer.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace enhanced::testing::amx_model {

struct Tile {
  int rows = 0, bytes_per_row = 0;
  unsigned char data[16][64] = {};
};

inline thread_local Tile tiles[8];
inline thread_local bool configured = false;

inline float bf16_value(const unsigned char* bytes) {
  uint16_t bits;
  std::memcpy(&bits, bytes, sizeof bits);
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

inline Tile& tile(int index) {
  if (!configured) throw std::logic_error("AMX model: a tile instruction before _tile_loadconfig");
  return tiles[index];
}

inline void load_config(const void* config) {
  const auto* bytes = static_cast<const unsigned char*>(config);
  if (bytes[0] != 1) throw std::logic_error("AMX model: only palette 1");
  for (int t = 0; t < 8; ++t) {
    uint16_t bytes_per_row;
    std::memcpy(&bytes_per_row, bytes + 16 + 2 * t, sizeof bytes_per_row);
    tiles[t].bytes_per_row = bytes_per_row;
    tiles[t].rows = bytes[48 + t];
    if (tiles[t].rows > 16 || tiles[t].bytes_per_row > 64) throw std::logic_error("AMX model: tile over 16 x 64");
    std::memset(tiles[t].data, 0, sizeof tiles[t].data);
  }
  configured = true;
}

inline void release() { configured = false; }

inline void zero(int t) { std::memset(tile(t).data, 0, sizeof tile(t).data); }

inline void load(int t, const void* base, long stride) {
  Tile& target = tile(t);
  for (int r = 0; r < target.rows; ++r)
    std::memcpy(target.data[r], static_cast<const unsigned char*>(base) + r * stride, target.bytes_per_row);
}

inline void store(int t, void* base, long stride) {
  const Tile& source = tile(t);
  for (int r = 0; r < source.rows; ++r)
    std::memcpy(static_cast<unsigned char*>(base) + r * stride, source.data[r], source.bytes_per_row);
}

inline void dpbf16ps(int c_index, int a_index, int b_index) {
  Tile &c = tile(c_index), &a = tile(a_index), &b = tile(b_index);
  const int pairs = a.bytes_per_row / 4, columns = c.bytes_per_row / 4;
  if (b.rows != pairs || b.bytes_per_row != c.bytes_per_row || a.rows != c.rows)
    throw std::logic_error("AMX model: TDPBF16PS operands of mismatched shapes");
  for (int m = 0; m < c.rows; ++m)
    for (int n = 0; n < columns; ++n) {
      float sum;
      std::memcpy(&sum, c.data[m] + 4 * n, sizeof sum);
      for (int p = 0; p < pairs; ++p) {
        sum += bf16_value(a.data[m] + 4 * p) * bf16_value(b.data[p] + 4 * n);
        sum += bf16_value(a.data[m] + 4 * p + 2) * bf16_value(b.data[p] + 4 * n + 2);
      }
      std::memcpy(c.data[m] + 4 * n, &sum, sizeof sum);
    }
}

}  // namespace enhanced::testing::amx_model

#undef _tile_loadconfig
#undef _tile_release
#undef _tile_zero
#undef _tile_loadd
#undef _tile_stored
#undef _tile_dpbf16ps
#define _tile_loadconfig(config) ::enhanced::testing::amx_model::load_config(config)
#define _tile_release() ::enhanced::testing::amx_model::release()
#define _tile_zero(t) ::enhanced::testing::amx_model::zero(t)
#define _tile_loadd(t, base, stride) ::enhanced::testing::amx_model::load(t, base, stride)
#define _tile_stored(t, base, stride) ::enhanced::testing::amx_model::store(t, base, stride)
#define _tile_dpbf16ps(c, a, b) ::enhanced::testing::amx_model::dpbf16ps(c, a, b)
