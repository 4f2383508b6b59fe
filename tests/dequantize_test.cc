// Dequantization of every supported weight type, bit-exact against vectors produced by an
// independent implementation (the gguf Python package, see tests/data/README.md), plus
// exhaustive half-precision conversion checks against a float64 reference.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/model.h"
#include "src/runtime/dequantize.h"
#include "src/runtime/fp16.h"
#include "tests/support/default_model.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/status_matchers.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;
using ::testing::HasSubstr;

struct VectorRecord {
  TensorType type;
  uint32_t n_elements;
  std::vector<uint8_t> bytes;
  std::vector<float> expected;
};

std::vector<VectorRecord> LoadVectors() {
  const std::string path = std::string(HETERO_TEST_DATA_DIR) + "/dequant_vectors.hdqv";
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  auto read_u32 = [&in] {
    uint32_t v = 0;
    in.read(reinterpret_cast<char*>(&v), 4);
    return v;
  };
  char magic[4] = {};
  in.read(magic, 4);
  EXPECT_EQ(std::string(magic, 4), "HDQV");
  EXPECT_EQ(read_u32(), 1u);
  const uint32_t count = read_u32();
  std::vector<VectorRecord> records;
  for (uint32_t i = 0; i < count && in.good(); ++i) {
    VectorRecord r;
    r.type = static_cast<TensorType>(read_u32());
    r.n_elements = read_u32();
    r.bytes.resize(read_u32());
    in.read(reinterpret_cast<char*>(r.bytes.data()), static_cast<std::streamsize>(r.bytes.size()));
    r.expected.resize(r.n_elements);
    in.read(reinterpret_cast<char*>(r.expected.data()), static_cast<std::streamsize>(4 * r.n_elements));
    records.push_back(std::move(r));
  }
  EXPECT_TRUE(in.good()) << "truncated vector file " << path;
  return records;
}

TEST(DequantizeTest, MatchesTheIndependentReferenceBitForBit) {
  const std::vector<VectorRecord> records = LoadVectors();
  std::set<TensorType> covered;
  for (const VectorRecord& r : records) {
    SCOPED_TRACE(TensorTypeName(r.type));
    std::vector<float> out(r.n_elements, std::nanf(""));
    ASSERT_TRUE(Dequantize(r.type, r.bytes, absl::MakeSpan(out)).ok());
    int mismatches = 0;
    for (uint32_t i = 0; i < r.n_elements; ++i) {
      if (FloatToBits(out[i]) != FloatToBits(r.expected[i]) && ++mismatches <= 5) {
        ADD_FAILURE() << "element " << i << ": got " << out[i] << ", reference " << r.expected[i];
      }
    }
    EXPECT_EQ(mismatches, 0);
    covered.insert(r.type);
  }
  // Every type hetero claims to dequantize has vectors.
  for (uint32_t id = 0; id < 64; ++id) {
    const TensorTypeTraits* t = FindTensorTypeTraits(id);
    if (t != nullptr && t->dequantizable) {
      EXPECT_TRUE(covered.contains(t->type)) << "no reference vectors for " << t->name;
    }
  }
}

// Independent float64 definition of binary16.
double Fp16Reference(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  if (exponent == 0x1F) return mantissa ? std::nan("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

TEST(HalfPrecisionTest, EveryFp16ValueConvertsExactly) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float got = Fp16ToFp32(static_cast<uint16_t>(h));
    const double want = Fp16Reference(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
      // Quiet, with the payload kept (as F16C and ggml give).
      EXPECT_EQ(FloatToBits(got) & 0x7FFFFFFFu, 0x7FC00000u | ((h & 0x3FFu) << 13)) << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << "h=" << h;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << "h=" << h;
      ASSERT_EQ(Fp32ToFp16(got), h) << "round trip h=" << h;
    }
  }
}

// Fp32ToFp16 must pick the nearest binary16 (ties to even), checked against float64
// distances to the neighbours.
TEST(HalfPrecisionTest, Fp32ToFp16RoundsToNearestEven) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> exponent(-27, 17);
  for (int i = 0; i < 200000; ++i) {
    const float x = static_cast<float>((rng() & 1 ? -1 : 1) * std::exp2(exponent(rng)));
    const uint16_t h = Fp32ToFp16(x);
    const double value = Fp16Reference(h);
    if (std::isinf(value)) {
      EXPECT_GE(std::fabs(x), 65520.0) << x;
      continue;
    }
    const double err = std::fabs(value - x);
    for (int delta : {-1, 1}) {
      const uint16_t neighbour = static_cast<uint16_t>((h & 0x7FFF) + delta) | (h & 0x8000);
      if ((h & 0x7FFF) == 0 && delta < 0) continue;
      const double other = Fp16Reference(neighbour);
      if (std::isinf(other) || std::isnan(other)) continue;
      const double other_err = std::fabs(other - x);
      ASSERT_LE(err, other_err) << "x=" << x << " h=" << h;
      if (err == other_err) {
        ASSERT_EQ(h & 1, 0) << "tie not to even, x=" << x;
      }
    }
  }
}

TEST(HalfPrecisionTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(Fp32ToBf16(BitsToFloat(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(Fp32ToBf16(BitsToFloat(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(Fp32ToBf16(BitsToFloat(0x3F808001u)), 0x3F81);
  EXPECT_TRUE(std::isnan(Bf16ToFp32(Fp32ToBf16(std::nanf("")))));
  std::mt19937 rng(9);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t bits = rng() & 0xBFFFFFFFu;  // finite, moderate magnitudes
    const float x = BitsToFloat(bits);
    const float back = Bf16ToFp32(Fp32ToBf16(x));
    // Half an ulp: 2^-8 relative for normals, 2^-134 absolute for bf16 subnormals.
    const double bound = std::max<double>(std::ldexp(std::fabs(x), -8), std::ldexp(1.0, -134));
    ASSERT_LE(std::fabs(static_cast<double>(back) - x), bound) << x;
  }
}

TEST(DequantizeTest, RejectsUnsupportedTypesByName) {
  std::vector<uint8_t> block(66);
  std::vector<float> out(256);
  EXPECT_THAT(Dequantize(TensorType::kIQ2_XXS, block, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("weight type IQ2_XXS is not supported")));
  EXPECT_THAT(Dequantize(TensorType::kTQ2_0, block, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("TQ2_0")));
  EXPECT_THAT(Dequantize(static_cast<TensorType>(4), block, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown tensor type id 4")));
}

TEST(DequantizeTest, RejectsMismatchedSizes) {
  std::vector<uint8_t> bytes(18);
  std::vector<float> out(33);
  EXPECT_THAT(Dequantize(TensorType::kQ4_0, bytes, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a multiple of Q4_0's block size 32")));
  out.resize(64);
  EXPECT_THAT(Dequantize(TensorType::kQ4_0, bytes, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("need 36 bytes, got 18")));
}

TEST(DequantizeTest, TensorErrorsNameTheTensor) {
  testing::GgufBuilder b;
  b.AddTensor("blk.3.ffn_up.weight", {256}, TensorType::kIQ3_S, std::vector<uint8_t>(110, 1));
  const auto bytes = b.Build();
  auto file = GgufFile::Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<float> out(256);
  EXPECT_THAT(DequantizeTensor((*file)->tensors()[0], absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("tensor 'blk.3.ffn_up.weight': weight type IQ3_S is not supported")));
  std::vector<float> small(8);
  EXPECT_THAT(DequantizeTensor((*file)->tensors()[0], absl::MakeSpan(small)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'blk.3.ffn_up.weight' has 256 elements")));
}

// The default model's Q8_0 embedding and Q4_1 matrices, checked against a float64
// evaluation of the block formula written here.
TEST(DequantizeTest, DefaultModelTensorsMatchFloat64Formula) {
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  auto file = GgufFile::Open(kDefaultModelPath);
  ASSERT_TRUE(file.ok()) << file.status();
  for (const char* name : {"token_embd.weight", "blk.7.ffn_down.weight"}) {
    const GgufTensorInfo* t = (*file)->FindTensor(name);
    ASSERT_NE(t, nullptr);
    std::vector<float> out(t->n_elements);
    ASSERT_TRUE(DequantizeTensor(*t, absl::MakeSpan(out)).ok());
    const TensorTypeTraits& traits = GetTensorTypeTraits(t->type);
    double max_err = 0;
    for (uint64_t blk = 0; blk < t->n_elements / traits.block_size; blk += 97) {
      const uint8_t* b = t->data.data() + blk * traits.type_size;
      uint16_t d_bits, m_bits;
      std::memcpy(&d_bits, b, 2);
      std::memcpy(&m_bits, b + 2, 2);
      const double d = Fp16Reference(d_bits);
      const double m = t->type == TensorType::kQ8_0 ? 0.0 : Fp16Reference(m_bits);
      // Error relative to the block's magnitude, so values that cancel to ~0 do not
      // inflate it.
      const double scale = std::fabs(d) * 128 + std::fabs(m) + 1e-30;
      for (int j = 0; j < 32; ++j) {
        double want;
        if (t->type == TensorType::kQ8_0) {
          want = d * static_cast<int8_t>(b[2 + j]);
        } else {
          const uint8_t byte = b[4 + (j % 16)];
          want = d * (j < 16 ? (byte & 0xF) : (byte >> 4)) + m;
        }
        max_err = std::max(max_err, std::fabs(want - out[blk * 32 + j]) / scale);
      }
    }
    // float32 rounding of one multiply and one add, relative to the block's scale.
    EXPECT_LT(max_err, 1e-6) << name;
  }
}

}  // namespace
}  // namespace hetero
