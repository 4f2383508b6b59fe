// The transfer layer's host pool: size classes, reuse, the cache limit, statistics, the
// fallback from pinned to plain memory, and concurrent use. Runs without a GPU (an
// injected allocator stands in for cudaHostAlloc).
#include "hetero/transfer.h"

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "hetero/devices.h"

namespace hetero {
namespace {

// Counts what the pool asks of its allocator; optionally fails.
struct CountingAllocator {
  std::atomic<int> allocations{0}, releases{0};
  std::atomic<bool> fail{false};
  HostAllocator Make(bool pinned) {
    HostAllocator a;
    a.pinned = pinned;
    a.allocate = [this](size_t bytes) -> void* {
      if (fail) return nullptr;
      ++allocations;
      return std::aligned_alloc(4096, bytes);
    };
    a.release = [this](void* p, size_t) {
      ++releases;
      std::free(p);
    };
    return a;
  }
};

TEST(HostMemoryPoolTest, SizeClassesArePowersOfTwoFrom64KiB) {
  EXPECT_EQ(HostMemoryPool::SizeClassBytes(1), 65536u);
  EXPECT_EQ(HostMemoryPool::SizeClassBytes(65536), 65536u);
  EXPECT_EQ(HostMemoryPool::SizeClassBytes(65537), 131072u);
  EXPECT_EQ(HostMemoryPool::SizeClassBytes(737281), 1048576u);
}

TEST(HostMemoryPoolTest, FreedBuffersAreReusedAndAccountingReturnsToZero) {
  CountingAllocator counter;
  auto pool = HostMemoryPool::CreateWith(counter.Make(false), uint64_t{64} << 20);
  {
    auto a = pool->Allocate(184320);  // one KV block of the default model
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->size(), 184320u);
    std::memset(a->data(), 0x5A, a->size() * sizeof(float));  // the whole request is usable
    EXPECT_EQ(pool->stats().bytes_in_use, 1048576u);
  }
  EXPECT_EQ(pool->stats().bytes_in_use, 0u);
  EXPECT_EQ(pool->stats().bytes_cached, 1048576u);
  auto b = pool->Allocate(200000);  // same class
  ASSERT_TRUE(b.ok());
  const HostPoolStats s = pool->stats();
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(s.reuses, 1u);
  EXPECT_EQ(s.high_water_bytes, 1048576u);
  EXPECT_EQ(counter.allocations, 1);
  *b = HostBuffer();  // returned by assignment too
  EXPECT_EQ(pool->stats().bytes_in_use, 0u);
  pool->Trim();
  EXPECT_EQ(pool->stats().bytes_cached, 0u);
  EXPECT_EQ(counter.releases, 1);
}

TEST(HostMemoryPoolTest, CacheLimitSendsSurplusBackToTheSystem) {
  CountingAllocator counter;
  auto pool = HostMemoryPool::CreateWith(counter.Make(false), 65536);
  {
    auto a = pool->Allocate(100);
    auto b = pool->Allocate(100);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NE(a->data(), b->data());
  }
  EXPECT_EQ(pool->stats().bytes_cached, 65536u);
  EXPECT_EQ(pool->stats().releases, 1u);
  EXPECT_EQ(counter.releases, 1);
}

TEST(HostMemoryPoolTest, FailedPinnedAllocationFallsBackToPlainMemory) {
  CountingAllocator counter;
  counter.fail = true;
  auto pool = HostMemoryPool::CreateWith(counter.Make(true), 1 << 20);
  EXPECT_TRUE(pool->stats().pinned);
  auto a = pool->Allocate(1000);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->pinned());
  a->data()[999] = 1.0f;
}

TEST(HostMemoryPoolTest, FailedPlainAllocationIsResourceExhausted) {
  CountingAllocator counter;
  counter.fail = true;
  auto pool = HostMemoryPool::CreateWith(counter.Make(false), 1 << 20);
  auto a = pool->Allocate(1000);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(a.status().message().find("65536 bytes"), std::string::npos) << a.status();
}

TEST(HostMemoryPoolTest, EmptyAndAbsurdRequests) {
  auto pool = HostMemoryPool::CreateWith(HostAllocator{}, 1 << 20);  // empty allocator: aligned memory
  auto empty = pool->Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(pool->Allocate(size_t{1} << 62).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HostMemoryPoolTest, MovedBuffersReturnOnce) {
  CountingAllocator counter;
  auto pool = HostMemoryPool::CreateWith(counter.Make(false), 0);  // no cache: every return releases
  {
    auto a = pool->Allocate(10);
    ASSERT_TRUE(a.ok());
    HostBuffer moved = std::move(*a);
    EXPECT_TRUE(a->empty());
    EXPECT_EQ(a->data(), nullptr);
    HostBuffer again(std::move(moved));
    EXPECT_EQ(again.size(), 10u);
  }
  EXPECT_EQ(counter.releases, 1);
  EXPECT_EQ(pool->stats().bytes_in_use, 0u);
}

TEST(HostMemoryPoolTest, ConcurrentUseKeepsTheBooks) {
  CountingAllocator counter;
  auto pool = HostMemoryPool::CreateWith(counter.Make(false), uint64_t{8} << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 300; ++i) {
        auto b = pool->Allocate(1000 * (1 + (i + t) % 5));
        ASSERT_TRUE(b.ok());
        b->data()[0] = static_cast<float>(i);
      }
    });
  }
  for (auto& th : threads) th.join();
  const HostPoolStats s = pool->stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.allocations + s.reuses, 1200u);
  EXPECT_LE(s.allocations, 12u);  // at most 4 threads x 3 classes ever in flight
}

TEST(HostMemoryPoolTest, DefaultPoolIsPinnedOnlyWithAGpu) {
  EXPECT_EQ(HostMemoryPool::Default()->stats().pinned, QueryDevices().cuda.available);
}

}  // namespace
}  // namespace hetero
