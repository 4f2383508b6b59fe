#include "src/cpu/weight_arena.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

namespace hetero::internal {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kBypass = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kBypass = true;
#else
constexpr bool kBypass = false;
#endif
#else
constexpr bool kBypass = false;
#endif

constexpr size_t kHugePage = size_t{2} << 20;
// Large enough that a region's partly used last huge page (at most 2 MiB of memory per
// region) is small beside what the region holds; address space is cheap.
constexpr size_t kRegionBytes = size_t{256} << 20;
constexpr size_t kAlign = 64;

struct Region {
  uintptr_t begin = 0;
  size_t bytes = 0;
  size_t used = 0;
  size_t live = 0;  // allocations not yet freed
};

class Arena {
 public:
  void* Allocate(size_t bytes) {
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    std::lock_guard<std::mutex> lock(mutex_);
    Region* region = current_;
    if (bytes > kRegionBytes / 4) {
      region = NewRegion(bytes);  // its own region; the shared one stays open
    } else if (region == nullptr || region->used + bytes > region->bytes) {
      // Where a full region cannot be had (a tight RLIMIT_AS), one of this copy's size.
      region = NewRegion(kRegionBytes);
      if (region == nullptr) region = NewRegion(bytes);
      current_ = region;
    }
    if (region == nullptr) throw std::bad_alloc();
    const uintptr_t p = region->begin + region->used;
    region->used += bytes;
    ++region->live;
    return reinterpret_cast<void*>(p);
  }

  void Free(void* p, size_t bytes) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mutex_);
    // The region starting at or before p; a region whose last copy was freed is gone, so a
    // second free of it lands here too.
    auto it = regions_.upper_bound(at);
    if (it == regions_.begin() || at >= (--it)->second.begin + it->second.bytes) {
      std::fprintf(stderr, "hetero: weight arena: freeing %p, which it did not allocate\n", p);
      std::abort();
    }
    Region& r = it->second;
    if (--r.live > 0) {
      // The region lives on (another model's copies may share it): give back the whole
      // huge pages the freed copy covered. Partly covered ones stay, so neighbours keep
      // their huge pages.
      const uintptr_t begin = (at + kHugePage - 1) / kHugePage * kHugePage;
      const uintptr_t end = (at + bytes) / kHugePage * kHugePage;
      if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
      return;
    }
    if (&r == current_) current_ = nullptr;
    ::munmap(reinterpret_cast<void*>(r.begin), r.bytes);
    mapped_ -= r.bytes;
    regions_.erase(it);
  }

  size_t mapped() {
    std::lock_guard<std::mutex> lock(mutex_);
    return mapped_;
  }

 private:
  Region* NewRegion(size_t bytes) {
    bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    // Mapped with a huge page to spare, so the region can start on a huge page's boundary
    // (the kernel backs only aligned 2 MiB ranges with huge pages); the ends are given back.
    // MAP_NORESERVE: the region's unused tail commits nothing where overcommit is strict.
    void* raw = ::mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t begin = (start + kHugePage - 1) / kHugePage * kHugePage;
    if (begin > start) ::munmap(raw, begin - start);
    const uintptr_t end = start + bytes + kHugePage;
    if (end > begin + bytes) ::munmap(reinterpret_cast<void*>(begin + bytes), end - (begin + bytes));
    // Advice only: where transparent huge pages are off, the region is plain memory.
    ::madvise(reinterpret_cast<void*>(begin), bytes, MADV_HUGEPAGE);
    mapped_ += bytes;
    Region& r = regions_[begin];
    r.begin = begin;
    r.bytes = bytes;
    return &r;
  }

  std::mutex mutex_;
  std::map<uintptr_t, Region> regions_;  // by start address
  Region* current_ = nullptr;            // where new allocations go
  size_t mapped_ = 0;
};

Arena& TheArena() {
  static Arena* arena = new Arena();  // never destroyed: copies may be freed during exit
  return *arena;
}

}  // namespace

void* AllocateWeights(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if constexpr (kBypass) return ::operator new(bytes, std::align_val_t(kAlign));
  return TheArena().Allocate(bytes);
}

void FreeWeights(void* p, size_t bytes) {
  if (p == nullptr) return;
  if constexpr (kBypass) {
    ::operator delete(p, std::align_val_t(kAlign));
    return;
  }
  TheArena().Free(p, bytes);
}

size_t WeightArenaMappedBytes() { return kBypass ? 0 : TheArena().mapped(); }

bool WeightArenaInUse() { return !kBypass; }

}  // namespace hetero::internal
