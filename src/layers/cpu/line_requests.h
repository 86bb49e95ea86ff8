// Cache lines for a product to request while it runs (small_gemm and bf16_gemm take them), a few
// at each of its turns (every 16 of its steps along K; an AMX tile's 32): memory the caller reads
// next, such as the LSTM backward's next step's rows. Requested in one burst, most would be
// dropped, since a core holds only a few dozen misses at a time; spread over the product, they
// arrive while it computes. They change nothing in what the product computes.
#pragma once

namespace enhanced {

// The `count` addresses at `lines`, in order.
struct LineRequests {
  const char* const* lines = nullptr;
  int count = 0;
};

// A product's way through its requests: per_turn of them at each turn, the rest at its end (none
// is dropped here).
struct RequestCursor {
  const char* const* next;
  const char* const* end;
  int per_turn;
  inline __attribute__((always_inline)) void turn() {
    for (int i = 0; i < per_turn && next != end; ++i) __builtin_prefetch(*next++);
  }
  void finish() {
    while (next != end) __builtin_prefetch(*next++);
  }
};

// The requests spread evenly over a product's `turns` turns.
inline RequestCursor spread(LineRequests requests, long turns) {
  const int per_turn = turns > 0 ? static_cast<int>((requests.count + turns - 1) / turns) : 0;
  return {requests.lines, requests.lines + requests.count, per_turn};
}

}  // namespace enhanced
