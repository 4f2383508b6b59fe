// MappedFile: a read-in copy gives back the pages of repacked matrices without changing what
// reads of them see, and does nothing when the file has changed since it was read.
#include "src/runtime/mapped_file.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/gguf_builder.h"

namespace hetero {
namespace {

std::vector<uint8_t> RandomBytes(size_t n) {
  std::mt19937 rng(1234);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// The path of the mapping that holds `address` in /proc/self/maps ("" for anonymous memory).
std::string MappingAt(const void* address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto at = reinterpret_cast<uintptr_t>(address);
  while (std::getline(maps, line)) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &begin, &end) != 2 || at < begin || at >= end) continue;
    const size_t slash = line.find('/');
    return slash == std::string::npos ? "" : line.substr(slash);
  }
  return "(unmapped)";
}

TEST(MappedFileTest, ACopyGivesBackPagesAndReadsStillSeeTheFile) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const std::vector<uint8_t> bytes = RandomBytes(64 * page + 123);
  const std::string path = testing::WriteTempFile(bytes, "mapped_file_copy.bin");
  auto file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_FALSE((*file)->mapped());
  const uint8_t* data = (*file)->bytes().data();
  EXPECT_EQ(MappingAt(data + 20 * page), "");  // anonymous: the copy
  // Pages 10..49 plus parts of their neighbours: only the whole pages are given back.
  (*file)->AdviseUnneeded((*file)->bytes().subspan(10 * page - 7, 40 * page + 14));
  EXPECT_EQ(MappingAt(data + 20 * page), path) << "the whole pages should now map the file";
  EXPECT_EQ(MappingAt(data + 9 * page), "") << "a partly covered page stays in the copy";
  EXPECT_EQ(MappingAt(data + 50 * page), "");
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), data)) << "every byte reads as in the file";
}

TEST(MappedFileTest, ACopyKeepsItsPagesOnceTheFileHasChanged) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const std::vector<uint8_t> bytes = RandomBytes(16 * page);
  const std::string path = testing::WriteTempFile(bytes, "mapped_file_changed.bin");
  auto file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(4 * page)), 0);
  (*file)->AdviseUnneeded((*file)->bytes());
  const uint8_t* data = (*file)->bytes().data();
  EXPECT_EQ(MappingAt(data + 8 * page), "") << "a truncated file must not back the copy";
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), data));
}

TEST(MappedFileTest, OutsideRangesAreIgnored) {
  const std::vector<uint8_t> bytes = RandomBytes(8192);
  auto file = MappedFile::Open(testing::WriteTempFile(bytes, "mapped_file_outside.bin"));
  ASSERT_TRUE(file.ok()) << file.status();
  (*file)->AdviseUnneeded(absl::MakeConstSpan(bytes));  // not the file's memory
  (*file)->AdviseUnneeded({});
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), (*file)->bytes().data()));
}

}  // namespace
}  // namespace hetero
