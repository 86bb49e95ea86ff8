// Where the BiLSTM's forward leaves each direction's rows for its backward, (B, T, 8H) gates and
// (B, T, 2H) cells, a row per position b T + t, so a step's rows lie T rows apart (layers/lstm.cpp):
// the walks over them that do not follow a row, each in the order the backward's steps take.
#pragma once

#include <cstddef>
#include <cstdint>

#include "layers/cpu/lstm_steps.h"
#include "layers/cpu/parts.h"

namespace enhanced::lstm_saved_rows {

using lstm_steps::previous_time;
using lstm_steps::step_time;
using parts::Part;

// Cache lines of `rows` rows that the backward's next step reads from memory (next_step_lines), at most.
template <class Real>
size_t next_step_line_count(int rows, int hidden) {
  auto lines = [](size_t bytes) { return bytes / 64 + 2; };  // a row not starting a line spans one more
  return static_cast<size_t>(rows) * (lines(4 * sizeof(Real) * hidden) + lines(sizeof(Real) * hidden));
}

// dbias (4H), its entries `part` += the gate gradients that a direction's steps left in gates, in
// the order the steps' pointwise passes add them to a single slice's sum (T - 1 down to 0, each
// step's rows in order): the same bits, for a direction whose rows ran in several slices. The
// rows lie T rows apart, past the caches: each asks for the one kAhead rows on.
template <class Real>
void sum_bias(Real* dbias, const Real* gates, Part part, int direction, int batch, int seq_len, int hidden) {
  constexpr int kAhead = 4;
  const size_t G4 = 4 * static_cast<size_t>(hidden), G8 = 2 * G4;
  auto row_at = [&](int step, int b) {
    const size_t p = static_cast<size_t>(b) * seq_len + step_time(direction, step, seq_len);
    return gates + p * G8 + direction * G4 + part.first;
  };
  Real* out = dbias + part.first;
  for (int step = seq_len - 1; step >= 0; --step) {
    for (int b = 0; b < batch; ++b) {
      const int ahead = b + kAhead;  // this step's row, or the next step's
      if (ahead < batch || step > 0) {
        const char* lines = reinterpret_cast<const char*>(row_at(ahead < batch ? step : step - 1, ahead % batch));
        for (size_t offset = 0; offset < part.count * sizeof(Real); offset += 64) __builtin_prefetch(lines + offset);
      }
      const Real* row = row_at(step, b);
      for (int j = 0; j < part.count; ++j) out[j] += row[j];
    }
  }
}

// Appends the cache lines of [p, p + bytes) to lines, up to room_end; returns their end.
inline const char** add_lines(const char** lines, const char* const* room_end, const void* p, size_t bytes) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(p), end = start + bytes;
  for (uintptr_t line = start & ~uintptr_t{63}; line < end && lines != room_end; line += 64)
    *lines++ = reinterpret_cast<const char*>(line);
  return lines;
}

// The cache lines that the backward's step `step` - 1 reads from memory for the rows `part`, into
// lines (room for next_step_line_count(part.count)); their count. Per row b: its gates, and the
// cell before its c_prev (its own cell is this step's c_prev, in cache by then). The forward wrote
// these rows long before, past the caches; they lie T rows apart, 64 streams that no hardware
// prefetcher follows, and each row read when its step came waited on memory. This step's product
// asks for them while it computes (line_requests.h).
template <class Real>
int next_step_lines(const char** lines, const Real* gates, const Real* cell, int direction, int step, Part part,
                    int seq_len, int hidden) {
  if (step < 1) return 0;
  const size_t H = hidden;
  const int t_next = previous_time(direction, step_time(direction, step, seq_len));
  const char** end = lines;
  const char* const* room_end = lines + next_step_line_count<Real>(part.count, hidden);  // never reached: a bound
  for (int b = part.first; b < part.first + part.count; ++b) {
    const size_t p = static_cast<size_t>(b) * seq_len + t_next;
    end = add_lines(end, room_end, gates + p * 8 * H + direction * 4 * H, 4 * H * sizeof(Real));
    if (step >= 2) {
      const size_t p_before = static_cast<size_t>(b) * seq_len + previous_time(direction, t_next);
      end = add_lines(end, room_end, cell + p_before * 2 * H + direction * H, H * sizeof(Real));
    }
  }
  return static_cast<int>(end - lines);
}

}  // namespace enhanced::lstm_saved_rows
