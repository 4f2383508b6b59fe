// GGUF reader on truncated, corrupt and hostile input: every case must give an
// InvalidArgument status naming the problem and its byte offset, quickly, without a crash
// or a large allocation (run under ASan in the sanitizer build).
#include <chrono>
#include <functional>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/runtime/gguf.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/status_matchers.h"

namespace hetero {
namespace {

using ::hetero::testing::AppendString;
using ::hetero::testing::AppendU32;
using ::hetero::testing::AppendU64;
using ::hetero::testing::GgufBuilder;
using ::hetero::testing::PutU32;
using ::hetero::testing::PutU64;
using ::hetero::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint32_t kString = static_cast<uint32_t>(GgufValueType::kString);
constexpr uint32_t kArray = static_cast<uint32_t>(GgufValueType::kArray);
constexpr uint32_t kUint8 = static_cast<uint32_t>(GgufValueType::kUint8);
constexpr uint32_t kBool = static_cast<uint32_t>(GgufValueType::kBool);

// A small valid file with metadata and three tensors; cases corrupt it.
GgufBuilder ValidBuilder() {
  GgufBuilder b;
  b.AddString("general.architecture", "llama");
  b.AddUint32("llama.block_count", 1);
  b.AddStringArray("tokenizer.ggml.tokens", {"<s>", "a", "b"});
  b.AddTensorF32("first", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  b.AddTensor("second", {32}, TensorType::kQ8_0, std::vector<uint8_t>(34, 3));
  b.AddTensorF32("third", {3}, {1, 2, 3});
  return b;
}

std::vector<uint8_t> Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
  AppendU32(out, version);
  AppendU64(out, n_tensors);
  AppendU64(out, n_kv);
  return out;
}

// A header with one metadata key of the given type id and payload.
std::vector<uint8_t> OneKey(const std::string& key, uint32_t type, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out = Header(3, 0, 1);
  AppendString(out, key);
  AppendU32(out, type);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

struct CorruptCase {
  std::string name;
  std::function<std::vector<uint8_t>()> make;
  std::string expected;  // substring of the error message
};

std::vector<uint8_t> Mutated(const std::function<void(std::vector<uint8_t>&, const GgufBuilder::Layout&)>& mutate,
                             GgufBuilder builder = ValidBuilder()) {
  GgufBuilder::Layout layout;
  std::vector<uint8_t> bytes = builder.Build(&layout);
  mutate(bytes, layout);
  return bytes;
}

std::vector<CorruptCase> Cases() {
  std::vector<CorruptCase> c;
  // -- header
  c.push_back({"Empty", [] { return std::vector<uint8_t>{}; }, "file is empty"});
  c.push_back({"ShorterThanMagic", [] { return std::vector<uint8_t>{'G', 'G', 'U'}; }, "too short for the magic"});
  c.push_back({"BadMagic", [] { auto b = Header(3, 0, 0); b[0] = 'X'; return b; }, "bad magic \"XGUF\""});
  c.push_back({"BinaryMagicIsEscaped", [] { auto b = Header(3, 0, 0); b[1] = 0; return b; }, "bad magic \"G\\x00UF\""});
  c.push_back({"LegacyGgjt", [] { auto b = Header(3, 0, 0); b[0] = 't'; b[1] = 'j'; b[2] = 'g'; b[3] = 'g'; return b; }, "legacy GGML/GGJT"});
  c.push_back({"VersionOne", [] { return Header(1, 0, 0); }, "version 1 is not supported"});
  c.push_back({"VersionZero", [] { return Header(0, 0, 0); }, "unsupported GGUF version 0"});
  c.push_back({"VersionFromTheFuture", [] { return Header(4, 0, 0); }, "unsupported GGUF version 4"});
  c.push_back({"BigEndian", [] { return Header(0x03000000u, 0, 0); }, "big-endian"});
  c.push_back({"TruncatedVersion", [] { auto b = Header(3, 0, 0); b.resize(6); return b; }, "reading version needs 4 bytes"});
  c.push_back({"TruncatedTensorCount", [] { auto b = Header(3, 0, 0); b.resize(10); return b; }, "reading tensor count"});
  c.push_back({"TruncatedMetadataCount", [] { auto b = Header(3, 0, 0); b.resize(20); return b; }, "reading metadata count"});
  c.push_back({"HugeTensorCount", [] { return Header(3, uint64_t{1} << 60, 0); }, "tensor count 1152921504606846976 cannot fit"});
  c.push_back({"HugeMetadataCount", [] { return Header(3, 0, ~uint64_t{0}); }, "metadata count 18446744073709551615 cannot fit"});
  // -- metadata
  c.push_back({"KeyLengthAbsurd", [] {
    auto b = Header(3, 0, 1); AppendU64(b, uint64_t{1} << 62); b.resize(b.size() + 16, 'k'); return b; },
    "metadata key claims 4611686018427387904 bytes"});
  c.push_back({"KeyEmpty", [] { return OneKey("", static_cast<uint32_t>(GgufValueType::kUint32), {1, 0, 0, 0}); }, "metadata key 0 is empty"});
  c.push_back({"ValueTypeUnknown", [] { return OneKey("k", 13, {0, 0, 0, 0}); }, "unknown metadata value type 13"});
  c.push_back({"ValueTypeHuge", [] { return OneKey("k", 0xFFFFFFFFu, {0, 0, 0, 0}); }, "unknown metadata value type 4294967295"});
  c.push_back({"ValueTruncated", [] { return OneKey("k", static_cast<uint32_t>(GgufValueType::kUint64), {1, 2, 3}); }, "reading uint64 value needs 8 bytes"});
  c.push_back({"StringLengthAbsurd", [] {
    std::vector<uint8_t> p; AppendU64(p, ~uint64_t{0} - 3); p.resize(p.size() + 8, 's'); return OneKey("k", kString, p); },
    "string value claims 18446744073709551612 bytes"});
  c.push_back({"StringLengthOneTooMany", [] {
    std::vector<uint8_t> p; AppendU64(p, 5); p.insert(p.end(), {'a', 'b', 'c', 'd'}); return OneKey("k", kString, p); },
    "string value claims 5 bytes but only 4 remain"});
  c.push_back({"ArrayCountAbsurd", [] {
    std::vector<uint8_t> p; AppendU32(p, kUint8); AppendU64(p, uint64_t{1} << 61); p.resize(p.size() + 4); return OneKey("k", kArray, p); },
    "claims 2305843009213693952 elements of type uint8"});
  c.push_back({"StringArrayCountAbsurd", [] {
    std::vector<uint8_t> p; AppendU32(p, kString); AppendU64(p, 1000); AppendString(p, "only one"); return OneKey("k", kArray, p); },
    "claims 1000 elements of type string"});
  c.push_back({"StringInArrayTooLong", [] {
    std::vector<uint8_t> p; AppendU32(p, kString); AppendU64(p, 2); AppendString(p, "ok"); AppendU64(p, 1u << 20); p.resize(p.size() + 8); return OneKey("k", kArray, p); },
    "array string claims 1048576 bytes"});
  c.push_back({"ArrayElementTypeUnknown", [] {
    std::vector<uint8_t> p; AppendU32(p, 99); AppendU64(p, 1); p.push_back(0); return OneKey("k", kArray, p); },
    "unknown array element type 99"});
  c.push_back({"ArraysNestedTooDeep", [] {
    std::vector<uint8_t> p;
    for (int i = 0; i < 40; ++i) { AppendU32(p, kArray); AppendU64(p, 1); }
    AppendU32(p, kUint8); AppendU64(p, 0);
    return OneKey("deep", kArray, p); },
    "arrays in 'deep' nest deeper than 16 levels"});
  c.push_back({"BoolValueNotZeroOrOne", [] { return OneKey("flag", kBool, {2}); }, "bool value of 'flag' is 2"});
  c.push_back({"BoolArrayElementNotZeroOrOne", [] {
    std::vector<uint8_t> p; AppendU32(p, kBool); AppendU64(p, 3); p.insert(p.end(), {1, 0, 7}); return OneKey("flags", kArray, p); },
    "bool element 2 of 'flags' is 7"});
  c.push_back({"DuplicateKey", [] {
    GgufBuilder b; b.AddUint32("dup", 1).AddString("dup", "again"); return b.Build(); },
    "duplicate metadata key 'dup'"});
  c.push_back({"AlignmentZero", [] { GgufBuilder b; b.AddUint32("general.alignment", 0); return b.Build(); }, "general.alignment is 0"});
  c.push_back({"AlignmentNotPowerOfTwo", [] { GgufBuilder b; b.AddUint32("general.alignment", 48); return b.Build(); }, "general.alignment is 48, expected a power of two"});
  c.push_back({"AlignmentWrongType", [] { GgufBuilder b; b.AddString("general.alignment", "32"); return b.Build(); }, "general.alignment has type string"});
  c.push_back({"AlignmentNegative", [] { GgufBuilder b; b.AddInt32("general.alignment", -32); return b.Build(); }, "general.alignment is negative"});
  // -- tensor infos
  c.push_back({"TensorCountLargerThanFile", [] {
    return Mutated([](auto& b, const auto& l) { PutU64(b, l.tensor_count_field, 40); }); },
    "tensor count 40 cannot fit"});
  c.push_back({"TensorNameEmpty", [] {
    GgufBuilder b; b.AddTensorF32("", {1}, {1}); return b.Build(); }, "tensor 0 has an empty name"});
  c.push_back({"TensorNameLengthAbsurd", [] {
    return Mutated([](auto& b, const auto& l) { PutU64(b, l.tensors[1].begin, uint64_t{1} << 40); }); },
    "tensor name claims 1099511627776 bytes"});
  c.push_back({"TensorTooManyDims", [] {
    return Mutated([](auto& b, const auto& l) { PutU32(b, l.tensors[0].n_dims_field, 5); }); },
    "tensor 'first' has 5 dimensions, at most 4"});
  c.push_back({"TensorDimsCountHuge", [] {
    return Mutated([](auto& b, const auto& l) { PutU32(b, l.tensors[0].n_dims_field, 0xFFFFFFFFu); }); },
    "has 4294967295 dimensions"});
  c.push_back({"TensorDimBeyondInt64", [] {
    return Mutated([](auto& b, const auto& l) { PutU64(b, l.tensors[0].dims_field, uint64_t{1} << 63); }); },
    "dimension 0 is 9223372036854775808, beyond the int64 range"});
  c.push_back({"TensorElementCountOverflows", [] {
    return Mutated([](auto& b, const auto& l) {
      PutU64(b, l.tensors[0].dims_field, uint64_t{1} << 40);
      PutU64(b, l.tensors[0].dims_field + 8, uint64_t{1} << 40); }); },
    "'first' element count overflows at dimension 1"});
  c.push_back({"TensorByteSizeOverflows", [] {
    GgufBuilder b; b.AddTensor("wide", {int64_t{1} << 62}, TensorType::kF64, {}); return b.Build(); },
    "'wide' byte size overflows"});
  c.push_back({"TensorTypeRemovedId", [] {
    return Mutated([](auto& b, const auto& l) { PutU32(b, l.tensors[1].type_field, 4); }); },
    "tensor 'second' has unknown type id 4"});
  c.push_back({"TensorTypeUnknownId", [] {
    return Mutated([](auto& b, const auto& l) { PutU32(b, l.tensors[2].type_field, 1000); }); },
    "tensor 'third' has unknown type id 1000"});
  c.push_back({"TensorRowNotWholeBlocks", [] {
    return Mutated([](auto& b, const auto& l) { PutU64(b, l.tensors[1].dims_field, 33); }); },
    "row of 33 elements, not a multiple of the block size 32"});
  c.push_back({"TensorOffsetMisaligned", [] {
    return Mutated([](auto& b, const auto& l) { PutU64(b, l.tensors[2].offset_field, 65); }); },
    "data offset 65 is not a multiple of the alignment 32"});
  c.push_back({"DuplicateTensorName", [] {
    GgufBuilder b; b.AddTensorF32("same", {1}, {1}).AddTensorF32("same", {1}, {2}); return b.Build(); },
    "duplicate tensor name 'same'"});
  c.push_back({"TruncatedInTensorInfo", [] {
    return Mutated([](auto& b, const auto& l) { b.resize(l.tensors[2].type_field + 2); }); },
    "reading tensor type needs 4 bytes"});
  // -- tensor data
  c.push_back({"TensorOffsetPastEnd", [] {
    return Mutated([](auto& b, const auto& l) { PutU64(b, l.tensors[2].offset_field, uint64_t{1} << 30); }); },
    "tensor 'third' spans data bytes [1073741824"});
  c.push_back({"TensorOffsetPlusSizeOverflows", [] {
    return Mutated([](auto& b, const auto& l) { PutU64(b, l.tensors[0].offset_field, ~uint64_t{0} - 31); }); },
    "beyond the"});
  c.push_back({"TensorsOverlap", [] {
    return Mutated([](auto& b, const auto& l) { PutU64(b, l.tensors[2].offset_field, 0); }); },
    "overlaps tensor"});
  c.push_back({"OverlapHiddenBehindAnEmptyTensor", [] {
    // A spans [0, 128), the empty Z sits at 32, B at 64 overlaps A although its sorted
    // neighbour is Z.
    GgufBuilder b;
    b.AddTensorF32("A", {32}, std::vector<float>(32, 1.0f));
    b.AddTensorF32("Z", {0}, {});
    b.AddTensorF32("B", {16}, std::vector<float>(16, 2.0f));
    return Mutated([](auto& bytes, const auto& l) {
      PutU64(bytes, l.tensors[1].offset_field, 32);
      PutU64(bytes, l.tensors[2].offset_field, 64);
    }, b); },
    "tensor 'B' overlaps tensor 'A'"});
  c.push_back({"ZeroDimensionHidesHugeOnes", [] {
    GgufBuilder b; b.AddTensorF32("z", {0, int64_t{1} << 62, int64_t{1} << 62}, {}); return b.Build(); },
    "'z' element count overflows at dimension 2"});
  c.push_back({"TooManyNestedArrays", [] {
    std::vector<uint8_t> p; AppendU32(p, kArray); AppendU64(p, 70000);
    for (int i = 0; i < 70000; ++i) { AppendU32(p, kUint8); AppendU64(p, 0); }
    return OneKey("many", kArray, p); },
    "nested arrays past 65536"});
  c.push_back({"ControlBytesInNamesAreEscaped", [] {
    return OneKey("evil\x1b[2J", kBool, {9}); },
    "bool value of 'evil\\x1b[2J' is 9"});
  // -- text that is not UTF-8 (the offset is the bad byte's: header 24 + length 8)
  c.push_back({"KeyNotUtf8", [] { return OneKey("\xff\xfe", kBool, {1}); },
    "metadata key is not valid UTF-8: byte 0xff at position 0 of the string ('\\xff\\xfe') (at byte offset 32)"});
  c.push_back({"KeyOverlongEncoding", [] { return OneKey("a\xc0\xaf", kBool, {1}); },
    "metadata key is not valid UTF-8: byte 0xc0 at position 1"});
  c.push_back({"KeySurrogate", [] { return OneKey("x\xed\xa0\x80", kBool, {1}); },
    "byte 0xed at position 1"});
  c.push_back({"KeyPastU10FFFF", [] { return OneKey("\xf4\x90\x80\x80", kBool, {1}); },
    "byte 0xf4 at position 0"});
  c.push_back({"StringValueCutMidSequence", [] {
    std::vector<uint8_t> p; AppendString(p, "price \xe2\x82"); return OneKey("k", kString, p); },
    "string value is not valid UTF-8: byte 0xe2 at position 6"});
  c.push_back({"StringValueStrayContinuation", [] {
    std::vector<uint8_t> p; AppendString(p, "ok\x80"); return OneKey("k", kString, p); },
    "byte 0x80 at position 2"});
  c.push_back({"TensorNameNotUtf8", [] {
    GgufBuilder b; b.AddTensorF32("blk.\xfe", {1}, {1}); return b.Build(); },
    "tensor name is not valid UTF-8: byte 0xfe at position 4"});
  c.push_back({"DataSectionMissing", [] {
    return Mutated([](auto& b, const auto& l) { b.resize(l.tensor_infos_end); }); },
    "truncated"});
  c.push_back({"DataTruncatedInLastTensor", [] {
    return Mutated([](auto& b, const auto& l) { b.resize(b.size() - 1); }); },
    "tensor 'third' spans data bytes"});
  return c;
}

// Test names in CTest's output: the case name, not the bytes of the struct.
void PrintTo(const CorruptCase& c, std::ostream* os) { *os << c.name; }

class GgufCorruptTest : public ::testing::TestWithParam<CorruptCase> {};

TEST_P(GgufCorruptTest, FailsWithAClearError) {
  const CorruptCase& c = GetParam();
  const std::vector<uint8_t> bytes = c.make();
  auto file = GgufFile::Parse(bytes, "corrupt.gguf");
  EXPECT_THAT(file, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.expected)));
  if (!file.ok()) {
    EXPECT_THAT(std::string(file.status().message()), HasSubstr("GGUF 'corrupt.gguf'"));
    EXPECT_THAT(std::string(file.status().message()), HasSubstr("at byte offset"));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GgufCorruptTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<CorruptCase>& info) { return info.param.name; });

TEST(GgufCorruptTest, Utf8TextOfEveryLengthParses) {
  // 2-, 3- and 4-byte sequences at the edges of their ranges, in keys, values and names.
  GgufBuilder b;
  b.AddString("general.name", "\xc2\x80 \xdf\xbf \xe0\xa0\x80 \xed\x9f\xbf \xef\xbf\xbf \xf0\x90\x80\x80 \xf4\x8f\xbf\xbf");
  b.AddString("\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", "\xf0\x9f\x98\x80");
  b.AddStringArray("tokenizer.ggml.tokens", {"\xe2\x96\x81" "a", "\xff"});  // vocabulary bytes pass through
  b.AddTensorF32("\xc3\xa9", {1}, {1});
  const std::vector<uint8_t> bytes = b.Build();  // the file's strings are views into these
  auto file = GgufFile::Parse(bytes, "utf8.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*(*file)->GetString("\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87"), "\xf0\x9f\x98\x80");
}

TEST(GgufCorruptTest, AtLeastThirtyCases) { EXPECT_GE(Cases().size(), 30u); }

TEST(GgufCorruptTest, ValidBaseFileParses) {
  const auto bytes = ValidBuilder().Build();
  auto file = GgufFile::Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 3u);
}

// Every strict prefix of a valid file is a truncated file: it must be rejected, whichever
// section the cut falls in.
TEST(GgufCorruptTest, EveryTruncationIsRejected) {
  const std::vector<uint8_t> bytes = ValidBuilder().Build();
  for (size_t length = 0; length < bytes.size(); ++length) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + length);
    auto file = GgufFile::Parse(prefix);
    EXPECT_THAT(file, StatusIs(absl::StatusCode::kInvalidArgument)) << "prefix length " << length;
  }
}

// A 24-byte file claiming 2^60 tensors, and a 10-byte one, fail in microseconds.
TEST(GgufCorruptTest, HugeCountsFailFast) {
  const std::vector<uint8_t> claims = Header(3, uint64_t{1} << 60, uint64_t{1} << 60);
  const std::vector<uint8_t> ten_bytes(claims.begin(), claims.begin() + 10);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) {
    EXPECT_FALSE(GgufFile::Parse(claims).ok());
    EXPECT_FALSE(GgufFile::Parse(ten_bytes).ok());
  }
  const double us_per_parse =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / 2000;
  // Generous bound for a loaded CI machine; typically well under a microsecond.
  EXPECT_LT(us_per_parse, 100.0);
  std::printf("hostile header rejected in %.3f us per parse\n", us_per_parse);
}

// Random byte corruptions of a valid file: each parse returns OK or InvalidArgument.
TEST(GgufCorruptTest, RandomCorruptionsNeverCrash) {
  const std::vector<uint8_t> bytes = ValidBuilder().Build();
  std::mt19937 rng(1234);
  int rejected = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::vector<uint8_t> mutated = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t at = rng() % mutated.size();
      mutated[at] = (rng() % 3 == 0) ? 0xFF : static_cast<uint8_t>(rng());
    }
    auto file = GgufFile::Parse(mutated);
    if (!file.ok()) {
      ++rejected;
      EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
    }
  }
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace hetero
