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

// A product's way through its requests, spread evenly over its `turns` turns: each turn earns
// count credits and a request costs `turns` of them (so fewer requests than turns go out every
// turns / count turns, not all in the first ones); finish() makes what is left (none is dropped).
struct RequestCursor {
  const char* const* next;
  const char* const* end;
  long count, turns, credit = 0;
  inline __attribute__((always_inline)) void turn() {
    for (credit += count; credit >= turns && next != end; credit -= turns) __builtin_prefetch(*next++);
  }
  void finish() {
    while (next != end) __builtin_prefetch(*next++);
  }
};

inline RequestCursor spread(LineRequests requests, long turns) {
  return {requests.lines, requests.lines + requests.count, requests.count, turns > 0 ? turns : 1};
}

}  // namespace enhanced
