// An allocator for the big parameter-sized buffers: regions of 4 MiB and more are 2 MiB aligned
// and advised to use transparent huge pages, so the random embedding rows a step touches cost
// fewer TLB misses (the step with lazy updates must not slow down as V grows).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace enhanced {

template <class T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kThreshold = size_t{4} << 20;

  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(size_t count) {
    const size_t bytes = count * sizeof(T);
    if (bytes < kThreshold) return static_cast<T*>(::operator new(bytes));
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* memory = std::aligned_alloc(kHugePage, rounded);
    if (!memory) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    ::madvise(memory, rounded, MADV_HUGEPAGE);  // advice only: failure changes nothing but speed
#endif
    return static_cast<T*>(memory);
  }

  void deallocate(T* memory, size_t count) noexcept {
    if (count * sizeof(T) < kThreshold) ::operator delete(memory);
    else std::free(memory);
  }

  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept { return true; }
};

}  // namespace enhanced
