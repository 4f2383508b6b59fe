// The CUDA module's block decoders (what every GPU GEMV and expert kernel reads weights
// through), run on the host, against the CPU's reference dequantizer (itself bit-exact to
// ggml's definitions): every format the module reads, random blocks with random fp16 scales,
// every sixteen-weight unit of rows of several blocks. Runs without a GPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "src/cpu/quant_blocks.h"
#include "src/runtime/dequantize.h"
#include "src/runtime/fp16.h"
#include "src/runtime/tensor_type.h"
#include "tests/support/cuda_block_decoders_host.h"

namespace hetero {
namespace {

// Random bytes, every fp16 field a random finite value of either sign (random bytes there
// would be NaN or infinite too often to compare).
std::vector<uint8_t> RandomWeights(TensorType type, int rows, int k, std::mt19937& rng) {
  const TensorTypeTraits& t = GetTensorTypeTraits(type);
  std::uniform_real_distribution<float> magnitude(0.0005f, 0.05f);
  std::bernoulli_distribution negative(0.4);
  const auto random_half = [&] { return Fp32ToFp16(magnitude(rng) * (negative(rng) ? -1.0f : 1.0f)); };
  std::vector<uint8_t> data(static_cast<size_t>(rows) * (k / t.block_size) * t.type_size);
  if (type == TensorType::kF16) {
    for (size_t i = 0; i < data.size(); i += 2) {
      const uint16_t h = random_half();
      std::memcpy(data.data() + i, &h, 2);
    }
    return data;
  }
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  for (size_t off = 0; off < data.size(); off += t.type_size) {
    for (int field : internal::Fp16FieldOffsets(type)) {
      const uint16_t h = random_half();
      std::memcpy(data.data() + off + field, &h, 2);
    }
  }
  return data;
}

TEST(CudaBlockDecodersTest, TheModuleReadsTheFormatsTheBackendSendsAsBlocks) {
  // src/gpu/cuda_backend.cc's ModuleFormat sends these natively (ggml type ids; 1 is F16).
  const std::vector<int> expected = {1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 20, 23};
  EXPECT_EQ(testing::CudaGemvFormats(), expected);
  float w[16];
  const uint8_t block[256] = {};
  EXPECT_FALSE(testing::CudaDecodeUnit(9, block, 0, 32, 0, w));  // Q8_1: not a weight format here
  EXPECT_EQ(testing::CudaGemvBlock(9).bytes, 0);
}

TEST(CudaBlockDecodersTest, EveryUnitOfEveryFormatDecodesAsTheReferenceDequantizer) {
  std::mt19937 rng(20261205);
  for (int format : testing::CudaGemvFormats()) {
    const auto type = static_cast<TensorType>(format);
    const TensorTypeTraits& t = GetTensorTypeTraits(type);
    SCOPED_TRACE(TensorTypeName(type));
    const testing::CudaBlockGeometry g = testing::CudaGemvBlock(format);
    ASSERT_EQ(g.elements, t.block_size);
    ASSERT_EQ(g.bytes, static_cast<int>(t.type_size));
    // Three blocks of a 256-element format, five of a 32-element one, 80 float16 columns.
    const int k = t.block_size == 256 ? 768 : t.block_size == 32 ? 160 : 80;
    const int rows = 3;
    for (int trial = 0; trial < 4; ++trial) {
      const std::vector<uint8_t> data = RandomWeights(type, rows, k, rng);
      std::vector<float> reference(static_cast<size_t>(rows) * k);
      ASSERT_TRUE(Dequantize(type, data, absl::MakeSpan(reference)).ok());
      for (int row = 0; row < rows; ++row) {
        const float* ref = reference.data() + static_cast<size_t>(row) * k;
        float largest = 0;
        for (int i = 0; i < k; ++i) largest = std::max(largest, std::fabs(ref[i]));
        // Each weight is one multiply (and add) of the same operands; the compiler may fuse
        // them (one rounding less), so the bound is a few ulps of the row's largest weight.
        const float tolerance = 4e-7f * largest;
        for (int unit = 0; unit < k / 16; ++unit) {
          float w[16];
          ASSERT_TRUE(testing::CudaDecodeUnit(format, data.data(), row, k, unit, w));
          for (int i = 0; i < 16; ++i) {
            ASSERT_NEAR(w[i], ref[16 * unit + i], tolerance)
                << "row " << row << ", element " << 16 * unit + i << " (trial " << trial << ")";
          }
        }
      }
    }
  }
}

// Each weight of a matrix decoded and rounded to float16 by the prompt path's dequantize
// body sits at its row-major place and is the reference weight rounded to nearest: within
// half a float16 ulp of it, plus the decoders' few float ulps of the row's largest weight.
TEST(CudaBlockDecodersTest, PromptDequantizationToHalfMatchesTheReferenceAtEveryPlace) {
  std::mt19937 rng(20261206);
  for (int format : testing::CudaGemvFormats()) {
    const auto type = static_cast<TensorType>(format);
    const TensorTypeTraits& t = GetTensorTypeTraits(type);
    SCOPED_TRACE(TensorTypeName(type));
    const int k = t.block_size == 256 ? 512 : t.block_size == 32 ? 224 : 96;
    const int rows = 5;
    const std::vector<uint8_t> data = RandomWeights(type, rows, k, rng);
    std::vector<float> reference(static_cast<size_t>(rows) * k);
    ASSERT_TRUE(Dequantize(type, data, absl::MakeSpan(reference)).ok());
    std::vector<uint16_t> half(reference.size(), 0x7E00);  // NaN where nothing was written
    ASSERT_TRUE(testing::CudaDequantizeToHalf(format, data.data(), rows, k, half.data()));
    for (int row = 0; row < rows; ++row) {
      float largest = 0;
      for (int i = 0; i < k; ++i) largest = std::max(largest, std::fabs(reference[static_cast<size_t>(row) * k + i]));
      for (int i = 0; i < k; ++i) {
        const size_t at = static_cast<size_t>(row) * k + i;
        const float ref = reference[at];
        const float tolerance = std::ldexp(std::fabs(ref), -11) + std::ldexp(1.0f, -25) + 4e-7f * largest;
        ASSERT_NEAR(Fp16ToFp32(half[at]), ref, tolerance) << "row " << row << ", column " << i;
      }
    }
    // Rows 2..4 alone, from the byte offset the module's staging of an output chunk uses.
    const testing::CudaBlockGeometry g = testing::CudaGemvBlock(format);
    const size_t row_bytes = static_cast<size_t>(k / g.elements) * g.bytes;
    std::vector<uint16_t> tail(static_cast<size_t>(3) * k);
    ASSERT_TRUE(testing::CudaDequantizeToHalf(format, data.data() + 2 * row_bytes, 3, k, tail.data()));
    EXPECT_TRUE(std::equal(tail.begin(), tail.end(), half.begin() + 2 * k));
  }
  uint16_t out[32];
  const uint8_t block[64] = {};
  EXPECT_FALSE(testing::CudaDequantizeToHalf(9, block, 1, 32, out));
}

// The embedding body reads token rows of a table in every format, scaled.
TEST(CudaBlockDecodersTest, EmbeddingRowsOfEveryFormatAreTheScaledReferenceRows) {
  std::mt19937 rng(20261207);
  const float scale = 25.298221f;  // sqrt(640), Gemma's
  for (int format : testing::CudaGemvFormats()) {
    const auto type = static_cast<TensorType>(format);
    const TensorTypeTraits& t = GetTensorTypeTraits(type);
    SCOPED_TRACE(TensorTypeName(type));
    const int n_embd = t.block_size == 256 ? 768 : 160, vocab = 7;
    const std::vector<uint8_t> data = RandomWeights(type, vocab, n_embd, rng);
    std::vector<float> reference(static_cast<size_t>(vocab) * n_embd);
    ASSERT_TRUE(Dequantize(type, data, absl::MakeSpan(reference)).ok());
    for (int token : {0, 3, 6}) {
      std::vector<float> row(n_embd, std::nanf(""));
      ASSERT_TRUE(testing::CudaEmbedRow(format, data.data(), n_embd, token, scale, row.data()));
      const float* ref = reference.data() + static_cast<size_t>(token) * n_embd;
      float largest = 0;
      for (int i = 0; i < n_embd; ++i) largest = std::max(largest, std::fabs(ref[i]));
      for (int i = 0; i < n_embd; ++i) {
        ASSERT_NEAR(row[i], scale * ref[i], scale * 6e-7f * largest) << "token " << token << ", element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace hetero
