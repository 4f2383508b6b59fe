// GGUF reader on valid input: every value type, nested arrays, tensor infos, alignment,
// versions 2 and 3, typed look-ups, and the default model when it is present.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/model.h"
#include "src/runtime/gguf.h"
#include "tests/support/default_model.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/status_matchers.h"

namespace hetero {
namespace {

using ::hetero::testing::GgufBuilder;
using ::hetero::testing::StatusIs;
using ::testing::HasSubstr;

std::unique_ptr<GgufFile> ParseOrDie(const std::vector<uint8_t>& bytes) {
  auto file = GgufFile::Parse(bytes, "test.gguf");
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? std::move(*file) : nullptr;
}

TEST(GgufReaderTest, EveryScalarTypeRoundTrips) {
  GgufBuilder b;
  b.AddUint8("u8", 250).AddInt8("i8", -100).AddUint16("u16", 65000).AddInt16("i16", -30000);
  b.AddUint32("u32", 4000000000u).AddInt32("i32", -2000000000).AddUint64("u64", 1ull << 63);
  b.AddInt64("i64", -(1ll << 62)).AddFloat32("f32", 0.15625f).AddFloat64("f64", -1e300);
  b.AddBool("yes", true).AddBool("no", false).AddString("s", "h\xc3\xa9llo");
  const auto bytes = b.Build();
  auto file = ParseOrDie(bytes);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->metadata().size(), 13u);
  EXPECT_EQ(*file->GetUint64("u8"), 250u);
  EXPECT_EQ(*file->FindValue("i8")->ToInt64(), -100);
  EXPECT_EQ(*file->GetUint64("u16"), 65000u);
  EXPECT_EQ(*file->FindValue("i16")->ToInt64(), -30000);
  EXPECT_EQ(*file->GetUint32("u32"), 4000000000u);
  EXPECT_EQ(*file->FindValue("i32")->ToInt64(), -2000000000);
  EXPECT_EQ(*file->GetUint64("u64"), 1ull << 63);
  EXPECT_EQ(*file->FindValue("i64")->ToInt64(), -(1ll << 62));
  EXPECT_EQ(*file->GetDouble("f32"), 0.15625);
  EXPECT_EQ(*file->GetDouble("f64"), -1e300);
  EXPECT_TRUE(*file->GetBool("yes"));
  EXPECT_FALSE(*file->GetBool("no"));
  EXPECT_EQ(*file->GetString("s"), "h\xc3\xa9llo");
  EXPECT_EQ(file->FindValue("f32")->type(), GgufValueType::kFloat32);
  EXPECT_EQ(file->metadata()[0].key, "u8");  // file order is kept
  EXPECT_EQ(file->metadata()[12].key, "s");
}

TEST(GgufReaderTest, ConversionsRejectWhatDoesNotFit) {
  GgufBuilder b;
  b.AddInt32("negative", -1).AddUint64("big", 1ull << 40).AddUint64("huge", ~0ull).AddString("text", "x");
  const auto bytes = b.Build();
  auto file = ParseOrDie(bytes);
  ASSERT_NE(file, nullptr);
  EXPECT_THAT(file->GetUint64("negative"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'negative' is negative")));
  EXPECT_THAT(file->GetUint32("big"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exceeds uint32")));
  EXPECT_THAT(file->FindValue("huge")->ToInt64(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(file->GetString("big"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'big' has type uint64, expected string")));
  EXPECT_THAT(file->GetDouble("text"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected a number")));
  EXPECT_THAT(file->GetBool("text"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(file->GetArray("text"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(file->GetString("absent"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("'absent' is missing")));
  EXPECT_EQ(file->FindValue("absent"), nullptr);
}

TEST(GgufReaderTest, ArraysIncludingNestedOnes) {
  GgufBuilder b;
  b.AddStringArray("strings", {"a", "", "long string \xe2\x82\xac"});
  b.AddInt32Array("ints", {-5, 7, 1 << 30});
  b.AddFloat32Array("floats", {0.5f, -2.25f});
  b.AddInt32Array("empty", {});
  // [[1, 2], [], [3]] as arrays of uint8, written by hand.
  std::vector<uint8_t> nested;
  testing::AppendU32(nested, static_cast<uint32_t>(GgufValueType::kArray));
  testing::AppendU64(nested, 3);
  for (const std::vector<uint8_t>& inner : {std::vector<uint8_t>{1, 2}, std::vector<uint8_t>{}, std::vector<uint8_t>{3}}) {
    testing::AppendU32(nested, static_cast<uint32_t>(GgufValueType::kUint8));
    testing::AppendU64(nested, inner.size());
    nested.insert(nested.end(), inner.begin(), inner.end());
  }
  b.AddRaw("nested", static_cast<uint32_t>(GgufValueType::kArray), nested);
  std::vector<uint8_t> bools;
  testing::AppendU32(bools, static_cast<uint32_t>(GgufValueType::kBool));
  testing::AppendU64(bools, 3);
  bools.insert(bools.end(), {1, 0, 1});
  b.AddRaw("bools", static_cast<uint32_t>(GgufValueType::kArray), bools);

  const auto bytes = b.Build();
  auto file = ParseOrDie(bytes);
  ASSERT_NE(file, nullptr);
  const GgufArray* strings = *file->GetArray("strings");
  ASSERT_EQ(strings->element_type, GgufValueType::kString);
  ASSERT_EQ(strings->size, 3u);
  EXPECT_EQ(strings->strings[0], "a");
  EXPECT_EQ(strings->strings[1], "");
  EXPECT_EQ(strings->strings[2], "long string \xe2\x82\xac");
  const GgufArray* ints = *file->GetArray("ints");
  ASSERT_EQ(ints->size, 3u);
  EXPECT_EQ(ints->Get<int32_t>(0), -5);
  EXPECT_EQ(ints->Get<int32_t>(2), 1 << 30);
  const GgufArray* floats = *file->GetArray("floats");
  EXPECT_EQ(floats->Get<float>(1), -2.25f);
  EXPECT_EQ((*file->GetArray("empty"))->size, 0u);
  const GgufArray* outer = *file->GetArray("nested");
  ASSERT_EQ(outer->element_type, GgufValueType::kArray);
  ASSERT_EQ(outer->arrays.size(), 3u);
  const GgufArray* first = *outer->arrays[0].ToArray();
  ASSERT_EQ(first->size, 2u);
  EXPECT_EQ(first->Get<uint8_t>(1), 2);
  EXPECT_EQ((*outer->arrays[1].ToArray())->size, 0u);
  EXPECT_EQ((*outer->arrays[2].ToArray())->Get<uint8_t>(0), 3);
  const GgufArray* bool_array = *file->GetArray("bools");
  EXPECT_EQ(bool_array->Get<uint8_t>(2), 1);
}

TEST(GgufReaderTest, TensorInfosPointAtTheirData) {
  GgufBuilder b;
  b.AddString("general.architecture", "test");
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  b.AddTensorF32("a", {3, 2}, a);
  std::vector<uint8_t> q(2 * 18);  // two Q4_0 blocks
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(i * 7 + 1);
  b.AddTensor("blk.0.q", {64}, TensorType::kQ4_0, q);
  b.AddTensorF32("scalar", {1}, {42.0f});
  testing::GgufBuilder::Layout layout;
  const auto bytes = b.Build(&layout);
  auto file = ParseOrDie(bytes);
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(file->tensors().size(), 3u);
  EXPECT_EQ(file->alignment(), 32u);
  EXPECT_EQ(file->data_offset(), layout.data_begin);
  EXPECT_EQ(file->data_offset() % 32, 0u);

  const GgufTensorInfo* ta = file->FindTensor("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(ta->type, TensorType::kF32);
  EXPECT_EQ(ta->n_elements, 6u);
  EXPECT_EQ(ta->n_bytes, 24u);
  EXPECT_EQ(ta->file_offset, layout.tensors[0].data);
  EXPECT_EQ(std::memcmp(ta->data.data(), a.data(), 24), 0);

  const GgufTensorInfo* tq = file->FindTensor("blk.0.q");
  ASSERT_NE(tq, nullptr);
  EXPECT_EQ(tq->type, TensorType::kQ4_0);
  EXPECT_EQ(tq->n_bytes, 36u);
  EXPECT_EQ(tq->offset % 32, 0u);
  EXPECT_EQ(std::memcmp(tq->data.data(), q.data(), q.size()), 0);
  EXPECT_EQ(file->FindTensor("missing"), nullptr);
}

TEST(GgufReaderTest, HonoursCustomAlignment) {
  for (uint32_t alignment : {1u, 8u, 64u, 4096u}) {
    GgufBuilder b;
    b.SetAlignment(alignment);
    b.AddTensorF32("x", {3}, {1, 2, 3});
    b.AddTensorF32("y", {5}, {4, 5, 6, 7, 8});
    const auto bytes = b.Build();
    auto file = ParseOrDie(bytes);
    ASSERT_NE(file, nullptr) << alignment;
    EXPECT_EQ(file->alignment(), alignment);
    EXPECT_EQ(file->data_offset() % alignment, 0u);
    float y0;
    std::memcpy(&y0, file->FindTensor("y")->data.data(), 4);
    EXPECT_EQ(y0, 4.0f);
  }
}

TEST(GgufReaderTest, ReadsVersionTwoAndThree) {
  for (uint32_t version : {2u, 3u}) {
    GgufBuilder b(version);
    b.AddString("general.architecture", "llama");
    b.AddTensorF32("t", {2}, {1, 2});
    const auto bytes = b.Build();
    auto file = ParseOrDie(bytes);
    ASSERT_NE(file, nullptr);
    EXPECT_EQ(file->version(), version);
  }
}

TEST(GgufReaderTest, FileWithoutTensorsIsValid) {
  GgufBuilder b;
  b.AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
  const auto bytes = b.Build();
  auto file = ParseOrDie(bytes);
  ASSERT_NE(file, nullptr);
  EXPECT_TRUE(file->tensors().empty());
}

// Dropping a mapped tensor's pages is only a hint: the bytes read back unchanged. On
// caller-owned bytes (heap memory, where MADV_DONTNEED would zero them) it does nothing.
TEST(GgufReaderTest, AdviseUnneededKeepsTheBytes) {
  std::vector<float> values(64 * 1024);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 977) * 0.5f + 1.0f;
  GgufBuilder b;
  b.AddString("general.architecture", "llama");
  b.AddTensorF32("big", {static_cast<int64_t>(values.size())}, values);
  const std::vector<uint8_t> bytes = b.Build();
  const std::string path = testing::WriteTempFile(bytes, "reader_advise.gguf");
  auto mapped = GgufFile::Open(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  const absl::Span<const uint8_t> data = (*mapped)->FindTensor("big")->data;
  const std::vector<uint8_t> before(data.begin(), data.end());
  (*mapped)->AdviseUnneeded(data);
  (*mapped)->AdviseUnneeded(absl::MakeConstSpan(bytes));  // not part of the mapping: ignored
  EXPECT_TRUE(std::equal(data.begin(), data.end(), before.begin()));

  auto parsed = ParseOrDie(bytes);
  ASSERT_NE(parsed, nullptr);
  const absl::Span<const uint8_t> owned = parsed->FindTensor("big")->data;
  parsed->AdviseUnneeded(owned);
  float first;
  std::memcpy(&first, owned.data(), 4);
  EXPECT_EQ(first, 1.0f);
  EXPECT_TRUE(std::equal(owned.begin(), owned.end(), before.begin()));
}

TEST(GgufReaderTest, OpensFilesThroughTheMapping) {
  GgufBuilder b;
  b.AddString("general.architecture", "llama");
  b.AddTensorF32("t", {4}, {1, 2, 3, 4});
  const std::string path = testing::WriteTempFile(b.Build(), "reader_open.gguf");
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->source_name(), path);
  EXPECT_EQ((*file)->FindTensor("t")->n_elements, 4u);

  EXPECT_THAT(GgufFile::Open(path + ".does-not-exist"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("does-not-exist")));
  EXPECT_THAT(GgufFile::Open(::testing::TempDir()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
  const std::string empty = testing::WriteTempFile({}, "reader_empty.gguf");
  EXPECT_THAT(GgufFile::Open(empty), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("file is empty")));
}

TEST(GgufReaderTest, ReadsTheDefaultModel) {
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  auto file = GgufFile::Open(kDefaultModelPath);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.metadata().size(), 33u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ((*f.GetArray("tokenizer.ggml.tokens"))->size, 49152u);
  EXPECT_EQ((*f.GetArray("tokenizer.ggml.merges"))->size, 48900u);
  EXPECT_EQ(f.FindTensor("token_embd.weight")->type, TensorType::kQ8_0);
  EXPECT_EQ(f.FindTensor("blk.0.attn_q.weight")->type, TensorType::kQ4_1);
  uint64_t total = 0;
  for (const GgufTensorInfo& t : f.tensors()) total += t.n_bytes;
  EXPECT_LE(f.data_offset() + total, f.file_size());
}

}  // namespace
}  // namespace hetero
