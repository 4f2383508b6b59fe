// Host memory for KV caches in flight between devices (the transfer layer's pool).
//
// A sequence parked while its task waits on a tool, or prefilled on the CPU and handed to
// the GPU, lives for a while in host memory. Copies between that memory and the GPU run
// asynchronously, at full bus speed, only from page-locked ("pinned") memory, which is
// slow to allocate: so buffers come from a pool that keeps them, in power-of-two size
// classes, for reuse. Where the CUDA module or a GPU is missing the same pool hands out
// ordinary aligned memory, and everything else works unchanged.
#ifndef HETERO_TRANSFER_H_
#define HETERO_TRANSFER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "hetero/export.h"

namespace hetero {

class HostMemoryPool;

// A buffer of floats from a pool, returned to it (for reuse) when destroyed. Move-only.
class HETERO_EXPORT HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return floats_; }  // floats asked for (the block may be larger)
  bool empty() const { return floats_ == 0; }
  bool pinned() const { return pinned_; }

 private:
  friend class HostMemoryPool;
  std::shared_ptr<HostMemoryPool> pool_;
  float* data_ = nullptr;
  size_t floats_ = 0;
  size_t class_bytes_ = 0;
  bool pinned_ = false;
};

struct HostPoolStats {
  bool pinned = false;            // whether this pool hands out page-locked memory
  uint64_t bytes_in_use = 0;      // held by live buffers (size-class bytes)
  uint64_t bytes_cached = 0;      // freed buffers kept for reuse
  uint64_t high_water_bytes = 0;  // most ever in use + cached at once
  uint64_t allocations = 0;       // blocks obtained from the system
  uint64_t reuses = 0;            // requests served from the cache
  uint64_t releases = 0;          // blocks given back to the system
};

// Where a pool gets its memory: allocate(bytes) returns null on failure; `pinned` says
// whether that memory is page-locked.
struct HostAllocator {
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void* p, size_t bytes)> release;
  bool pinned = false;
};

class HETERO_EXPORT HostMemoryPool : public std::enable_shared_from_this<HostMemoryPool> {
 public:
  // Smallest size class; larger requests round up to the next power of two.
  static constexpr size_t kMinClassBytes = size_t{64} << 10;

  // Pinned memory through the CUDA module where a GPU is usable, aligned host memory
  // otherwise. Freed buffers are kept while the cache holds under `cache_limit_bytes`.
  static std::shared_ptr<HostMemoryPool> Create(uint64_t cache_limit_bytes = uint64_t{1} << 30);
  // With an explicit allocator (tests, or a caller's own memory).
  static std::shared_ptr<HostMemoryPool> CreateWith(HostAllocator allocator, uint64_t cache_limit_bytes);
  // The process-wide pool the backends use.
  static std::shared_ptr<HostMemoryPool> Default();

  ~HostMemoryPool();

  // A buffer of `floats` floats (contents undefined). ResourceExhausted when the
  // allocator fails even after the cache is released; a pinned allocator that fails falls
  // back to plain memory for that buffer (its pinned() says which it got).
  absl::StatusOr<HostBuffer> Allocate(size_t floats);
  HostPoolStats stats() const;
  // Gives every cached block back to the system.
  void Trim();

  static size_t SizeClassBytes(size_t bytes);

 private:
  friend class HostBuffer;
  struct State;
  HostMemoryPool(HostAllocator allocator, uint64_t cache_limit_bytes);
  void Return(float* data, size_t class_bytes, bool pinned);

  std::unique_ptr<State> state_;
};

}  // namespace hetero

#endif  // HETERO_TRANSFER_H_
