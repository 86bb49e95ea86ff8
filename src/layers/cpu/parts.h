// Work cut into parts, one a thread, for the layers whose rows are independent (layers/lstm.cpp):
// the parts of a range of rows and a runner for them. A part starts at a multiple of kPartRows
// rows (small_gemm's AVX-512 tile), so only the last part's products end in a partial tile.
#pragma once

#include <algorithm>

namespace enhanced::parts {

constexpr int kPartRows = 8;

struct Part {
  int first, count;  // rows [first, first + count)
};

// Parts of `total` rows for `wanted` threads: at most one per kPartRows rows, at least one.
inline int part_count(int wanted, int total) { return std::max(1, std::min(wanted, total / kPartRows)); }

// Part `index` of `parts` of [0, total), cut at multiples of kPartRows: for parts <=
// part_count(any, total), no part is empty, and each has at least kPartRows rows when parts > 1.
inline Part part_of(int index, int parts, int total) {
  auto cut = [&](int i) {
    return i == parts ? total : static_cast<int>(static_cast<long long>(total) * i / parts) / kPartRows * kPartRows;
  };
  return {cut(index), cut(index + 1) - cut(index)};
}

// prepare(i) for i < prepared, then body(task) for task < tasks, each task taken by the next free
// one of up to `threads` threads (BLAS
// runs single-threaded, configure_cpu_threads, so these are the only ones competing for the
// cores). Every prepare ends before any body starts; a body waits for no other, so a smaller team
// than asked for only takes longer.
template <class Prepare, class Body>
void in_parallel(int threads, int prepared, int tasks, Prepare prepare, Body body) {
  const int team = std::min(threads, std::max(prepared, tasks));
  if (team < 2) {
    for (int i = 0; i < prepared; ++i) prepare(i);
    for (int task = 0; task < tasks; ++task) body(task);
    return;
  }
#pragma omp parallel num_threads(team)
  {
#pragma omp for schedule(static, 1)
    for (int i = 0; i < prepared; ++i) prepare(i);
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) body(task);
  }
}

}  // namespace enhanced::parts
