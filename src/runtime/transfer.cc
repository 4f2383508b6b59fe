#include "hetero/transfer.h"

#include <cstdlib>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/runtime/pinned_host_memory.h"
#include "src/runtime/sync.h"

namespace hetero {
namespace {

constexpr size_t kAlignment = 4096;  // page alignment: DMA-friendly, and no false sharing

HostAllocator AlignedAllocator() {
  HostAllocator a;
  a.allocate = [](size_t bytes) -> void* { return std::aligned_alloc(kAlignment, bytes); };
  a.release = [](void* p, size_t) { std::free(p); };
  a.pinned = false;
  return a;
}

}  // namespace

struct HostMemoryPool::State {
  HostAllocator allocator;
  HostAllocator fallback = AlignedAllocator();
  uint64_t cache_limit = 0;
  mutable Mutex mu;
  // Cached blocks by size class, with whether each is pinned.
  std::multimap<size_t, std::pair<void*, bool>> cache ABSL_GUARDED_BY(mu);
  HostPoolStats stats ABSL_GUARDED_BY(mu);

  void Release(void* p, size_t bytes, bool pinned) {
    (pinned == allocator.pinned ? allocator : fallback).release(p, bytes);
  }
};

HostBuffer::HostBuffer(HostBuffer&& other) noexcept { *this = std::move(other); }

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    if (pool_ != nullptr && data_ != nullptr) pool_->Return(data_, class_bytes_, pinned_);
    pool_ = std::move(other.pool_);
    data_ = other.data_;
    floats_ = other.floats_;
    class_bytes_ = other.class_bytes_;
    pinned_ = other.pinned_;
    other.data_ = nullptr;
    other.floats_ = 0;
    other.class_bytes_ = 0;
  }
  return *this;
}

HostBuffer::~HostBuffer() {
  if (pool_ != nullptr && data_ != nullptr) pool_->Return(data_, class_bytes_, pinned_);
}

HostMemoryPool::HostMemoryPool(HostAllocator allocator, uint64_t cache_limit_bytes) : state_(std::make_unique<State>()) {
  state_->allocator = std::move(allocator);
  state_->cache_limit = cache_limit_bytes;
  MutexLock lock(&state_->mu);
  state_->stats.pinned = state_->allocator.pinned;
}

HostMemoryPool::~HostMemoryPool() { Trim(); }

std::shared_ptr<HostMemoryPool> HostMemoryPool::Create(uint64_t cache_limit_bytes) {
  HostAllocator pinned;
  return CreateWith(FindPinnedHostAllocator(&pinned) ? pinned : AlignedAllocator(), cache_limit_bytes);
}

std::shared_ptr<HostMemoryPool> HostMemoryPool::CreateWith(HostAllocator allocator, uint64_t cache_limit_bytes) {
  if (!allocator.allocate || !allocator.release) allocator = AlignedAllocator();
  return std::shared_ptr<HostMemoryPool>(new HostMemoryPool(std::move(allocator), cache_limit_bytes));
}

std::shared_ptr<HostMemoryPool> HostMemoryPool::Default() {
  static const std::shared_ptr<HostMemoryPool> pool = Create();
  return pool;
}

size_t HostMemoryPool::SizeClassBytes(size_t bytes) {
  size_t c = kMinClassBytes;
  while (c < bytes) c <<= 1;
  return c;
}

absl::StatusOr<HostBuffer> HostMemoryPool::Allocate(size_t floats) {
  HostBuffer b;
  if (floats == 0) return b;
  if (floats > (size_t{1} << 60) / sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat("host buffer of ", floats, " floats is too large"));
  }
  const size_t bytes = SizeClassBytes(floats * sizeof(float));
  State& s = *state_;
  void* p = nullptr;
  bool pinned = false;
  {
    MutexLock lock(&s.mu);
    if (auto it = s.cache.find(bytes); it != s.cache.end()) {
      p = it->second.first;
      pinned = it->second.second;
      s.cache.erase(it);
      s.stats.bytes_cached -= bytes;
      s.stats.bytes_in_use += bytes;
      ++s.stats.reuses;
    }
  }
  if (p == nullptr) {
    p = s.allocator.allocate(bytes);
    pinned = s.allocator.pinned;
    if (p == nullptr) {
      Trim();  // cached blocks of other sizes may be what is missing
      p = s.allocator.allocate(bytes);
    }
    if (p == nullptr && s.allocator.pinned) {
      p = s.fallback.allocate(bytes);  // page-locking can fail where plain memory does not
      pinned = false;
    }
    if (p == nullptr) return absl::ResourceExhaustedError(absl::StrCat("host memory: cannot allocate ", bytes, " bytes"));
    MutexLock lock(&s.mu);
    ++s.stats.allocations;
    s.stats.bytes_in_use += bytes;
    s.stats.high_water_bytes = std::max(s.stats.high_water_bytes, s.stats.bytes_in_use + s.stats.bytes_cached);
  }
  b.pool_ = shared_from_this();
  b.data_ = static_cast<float*>(p);
  b.floats_ = floats;
  b.class_bytes_ = bytes;
  b.pinned_ = pinned;
  return b;
}

void HostMemoryPool::Return(float* data, size_t class_bytes, bool pinned) {
  State& s = *state_;
  {
    MutexLock lock(&s.mu);
    s.stats.bytes_in_use -= class_bytes;
    if (s.stats.bytes_cached + class_bytes <= s.cache_limit) {
      s.cache.emplace(class_bytes, std::make_pair(static_cast<void*>(data), pinned));
      s.stats.bytes_cached += class_bytes;
      return;
    }
    ++s.stats.releases;
  }
  s.Release(data, class_bytes, pinned);
}

HostPoolStats HostMemoryPool::stats() const {
  MutexLock lock(&state_->mu);
  return state_->stats;
}

void HostMemoryPool::Trim() {
  State& s = *state_;
  std::multimap<size_t, std::pair<void*, bool>> cache;
  {
    MutexLock lock(&s.mu);
    cache.swap(s.cache);
    s.stats.bytes_cached = 0;
    s.stats.releases += cache.size();
  }
  for (const auto& [bytes, block] : cache) s.Release(block.first, bytes, block.second);
}

}  // namespace hetero
