// The packed weights' arena (src/cpu/weight_arena.h): allocations aligned, disjoint and
// intact; regions given back when their last allocation is freed; safe across threads.
#include "src/cpu/weight_arena.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace hetero::internal {
namespace {

struct Block {
  uint8_t* p;
  size_t bytes;
  uint8_t fill;
};

constexpr size_t kHugePage = size_t{2} << 20;

// Random sizes from 0 bytes to 1 MiB, and one of 80 MiB + 4099 bytes at index 5 (past a
// region's quarter, so it gets a region of its own), each block filled with its own byte.
std::vector<Block> AllocateRandom(std::mt19937& rng, int count) {
  std::vector<Block> blocks;
  for (int i = 0; i < count; ++i) {
    size_t bytes = std::uniform_int_distribution<size_t>(0, 1 << 20)(rng);
    if (i == 5) bytes = (size_t{80} << 20) + 4099;
    auto* p = static_cast<uint8_t*>(AllocateWeights(bytes));
    const auto fill = static_cast<uint8_t>(1 + i % 251);
    std::memset(p, fill, bytes);
    blocks.push_back({p, bytes, fill});
  }
  return blocks;
}

bool Intact(const Block& b) {
  return std::all_of(b.p, b.p + b.bytes, [&](uint8_t v) { return v == b.fill; });
}

TEST(WeightArenaTest, AllocationsAreAlignedDisjointAndKeepTheirBytes) {
  std::mt19937 rng(7);
  std::vector<Block> blocks = AllocateRandom(rng, 60);
  for (const Block& b : blocks) EXPECT_EQ(reinterpret_cast<uintptr_t>(b.p) % 64, 0u) << b.bytes;
  std::vector<Block> sorted = blocks;
  std::sort(sorted.begin(), sorted.end(), [](const Block& a, const Block& b) { return a.p < b.p; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    EXPECT_LE(sorted[i - 1].p + sorted[i - 1].bytes, sorted[i].p) << "blocks overlap";
  }
  // Freeing every other block leaves the rest untouched.
  for (size_t i = 0; i < blocks.size(); i += 2) FreeWeights(blocks[i].p, blocks[i].bytes);
  for (size_t i = 1; i < blocks.size(); i += 2) EXPECT_TRUE(Intact(blocks[i])) << "block " << i;
  for (size_t i = 1; i < blocks.size(); i += 2) FreeWeights(blocks[i].p, blocks[i].bytes);
}

TEST(WeightArenaTest, RegionsAreGivenBackWhenTheirLastAllocationIsFreed) {
  if (!WeightArenaInUse()) GTEST_SKIP() << "the arena is bypassed under AddressSanitizer (plain operator new)";
  const size_t before = WeightArenaMappedBytes();
  std::mt19937 rng(11);
  std::vector<Block> blocks = AllocateRandom(rng, 200);  // ~180 MiB, one block in its own region
  size_t total = 0;
  for (const Block& b : blocks) total += b.bytes;
  EXPECT_GE(WeightArenaMappedBytes(), before + total);
  // The small blocks share regions: one mapping each would take 2 MiB apiece (400 MiB).
  EXPECT_LE(WeightArenaMappedBytes(), before + (size_t{256} << 20) * 2 + blocks[5].bytes + kHugePage);
  // A region starts on a huge page's boundary: the block with a region of its own does.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks[5].p) % kHugePage, 0u);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (const Block& b : blocks) {
    EXPECT_TRUE(Intact(b));
    FreeWeights(b.p, b.bytes);
  }
  EXPECT_EQ(WeightArenaMappedBytes(), before);
}

// A copy freed while its region lives on (another model's copies beside it) gives back
// the whole huge pages it covered.
TEST(WeightArenaTest, AFreedCopyInALiveRegionLeavesNoPagesResident) {
  if (!WeightArenaInUse()) GTEST_SKIP() << "the arena is bypassed under AddressSanitizer (plain operator new)";
  const size_t big = size_t{7} << 20;
  auto* freed = static_cast<uint8_t*>(AllocateWeights(big));
  auto* kept = static_cast<uint8_t*>(AllocateWeights(4096));
  std::memset(freed, 1, big);
  std::memset(kept, 2, 4096);
  FreeWeights(freed, big);
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(freed) + kHugePage - 1) / kHugePage * kHugePage;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(freed) + big) / kHugePage * kHugePage;
  ASSERT_GT(end, begin);
  std::vector<unsigned char> resident((end - begin) / 4096);
  ASSERT_EQ(mincore(reinterpret_cast<void*>(begin), end - begin, resident.data()), 0);
  size_t pages = 0;
  for (unsigned char r : resident) pages += r & 1;
  EXPECT_EQ(pages, 0u) << "of " << resident.size() << " pages still resident";
  EXPECT_EQ(kept[0], 2);
  EXPECT_EQ(kept[4095], 2);
  FreeWeights(kept, 4096);
}

TEST(WeightArenaTest, ThreadsAllocateAndFreeAtOnce) {
  const size_t before = WeightArenaMappedBytes();
  std::vector<std::thread> threads;
  std::vector<int> broken(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &broken] {
      std::mt19937 rng(100 + t);
      for (int round = 0; round < 20; ++round) {
        std::vector<Block> blocks;
        for (int i = 0; i < 30; ++i) {
          const size_t bytes = std::uniform_int_distribution<size_t>(1, 64 << 10)(rng);
          auto* p = static_cast<uint8_t*>(AllocateWeights(bytes));
          const auto fill = static_cast<uint8_t>(1 + (t * 31 + i) % 251);
          std::memset(p, fill, bytes);
          blocks.push_back({p, bytes, fill});
        }
        for (const Block& b : blocks) {
          broken[t] += !Intact(b);
          FreeWeights(b.p, b.bytes);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(broken[t], 0) << "thread " << t;
  EXPECT_EQ(WeightArenaMappedBytes(), before);
}

}  // namespace
}  // namespace hetero::internal
