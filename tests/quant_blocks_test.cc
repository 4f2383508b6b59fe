// The block formats' native kernels (Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_XS): their decoding against the reference dequantizer bit for bit, and the matrix
// product (AVX-512 VNNI packed units where the CPU has them, the portable kernel always)
// against a float64 product of the dequantized weights with the unquantized activations,
// on random blocks of awkward sizes (odd super-block counts, rows past the last group of
// 16, batches that are not multiples of 8).
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/cpu/quant_blocks.h"
#include "src/cpu/quant_matmul.h"
#include "src/cpu/thread_pool.h"
#include "src/runtime/dequantize.h"
#include "src/runtime/fp16.h"
#include "tests/support/quant_reference.h"

namespace hetero {
namespace {

std::vector<uint8_t> RandomBlocks(TensorType type, int n, int k, std::mt19937& rng) {
  const TensorTypeTraits& t = GetTensorTypeTraits(type);
  std::vector<uint8_t> data(static_cast<size_t>(n) * (k / t.block_size) * t.type_size);
  std::uniform_real_distribution<float> magnitude(0.0005f, 0.05f);
  std::bernoulli_distribution negative(0.3);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  for (size_t off = 0; off < data.size(); off += t.type_size) {
    for (int field : internal::Fp16FieldOffsets(type)) {
      const float v = magnitude(rng) * (negative(rng) ? -1.0f : 1.0f);
      const uint16_t h = Fp32ToFp16(v);
      std::memcpy(data.data() + off + field, &h, 2);
    }
  }
  return data;
}

const TensorType kFormats[] = {TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kIQ4_NL,
                               TensorType::kQ2_K, TensorType::kQ3_K, TensorType::kQ4_K,
                               TensorType::kQ5_K, TensorType::kQ6_K, TensorType::kIQ4_XS};

TEST(QuantBlocksTest, CodesAndScalesRebuildTheReferenceDequantizationExactly) {
  for (TensorType type : kFormats) {
    SCOPED_TRACE(std::string(TensorTypeName(type)));
    ASSERT_TRUE(internal::IsBlockFormat(type));
    ASSERT_TRUE(QuantizedWeights::Supports(type));
    std::mt19937 rng(static_cast<uint32_t>(type) * 7919);
    const int k = 3 * 256;  // three super-blocks, 24 blocks of 32
    const std::vector<uint8_t> row = RandomBlocks(type, 1, k, rng);
    std::vector<float> reference(k);
    ASSERT_TRUE(Dequantize(type, row, absl::MakeSpan(reference)).ok());
    uint8_t codes[32];
    for (int run = 0; run < k / 32; ++run) {
      internal::ExtractCodes(type, row.data(), run, codes);
      for (int i = 0; i < 32; ++i) {
        ASSERT_LT(codes[i], 1 << internal::CodeBits(type));
        float scale, offset;
        internal::ExtractScaleOffset(type, row.data(), 2 * run + i / 16, &scale, &offset);
        const float rebuilt = scale * static_cast<float>(internal::CodeValue(type, codes[i])) + offset;
        ASSERT_EQ(rebuilt, reference[32 * run + i]) << "weight " << 32 * run + i;
      }
    }
  }
}

struct Shape {
  TensorType type;
  int n, k, m;
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << TensorTypeName(s.type) << " " << s.n << "x" << s.k << " m" << s.m;
}

class BlockMatmulTest : public ::testing::TestWithParam<Shape> {};

using ::hetero::testing::ReferenceDot;

TEST_P(BlockMatmulTest, MatchesFloat64Reference) {
  const Shape s = GetParam();
  std::mt19937 rng(s.n * 131 + s.k * 7 + s.m + static_cast<int>(s.type) * 1009);
  const std::vector<uint8_t> blocks = RandomBlocks(s.type, s.n, s.k, rng);
  const QuantizedWeights w = QuantizedWeights::FromBlocks(s.type, s.n, s.k, blocks.data());
  // Packed units (AVX-512 VNNI, or AVX2 for all but the IQ4 formats) wherever the native
  // kernels are the CPU backend's choice; the portable kernel otherwise.
  if (QuantMatmulIsFast(s.type) && s.n >= QuantizedWeights::kGroupRows) {
    EXPECT_FALSE(w.packed.empty()) << "the SIMD path should have packed units";
    EXPECT_EQ(w.packed_rows, s.n / 16 * 16);
    // Packed at about the file's size (no float copy): within 12% including line padding;
    // Q3_K and Q2_K hold their 3 and 2 code bits in 4.
    const double bound = s.type == TensorType::kQ3_K ? 1.35 : s.type == TensorType::kQ2_K ? 1.77 : 1.12;
    EXPECT_LE(w.packed.size() * sizeof(CacheLine), bound * w.packed_rows * w.row_bytes);
  }
  std::vector<float> x(static_cast<size_t>(s.m) * s.k);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  std::vector<float> wf(static_cast<size_t>(s.n) * s.k);
  ASSERT_TRUE(Dequantize(s.type, blocks, absl::MakeSpan(wf)).ok());

  QuantizedActivations a;
  a.Quantize(x.data(), s.m, s.k, s.k);
  std::vector<float> y(static_cast<size_t>(s.m) * s.n, std::nanf(""));
  QuantMatmul(w, a, y.data(), s.n);
  double max_kernel_diff = 0, max_ref_err = 0;
  for (int m = 0; m < s.m; ++m) {
    for (int j = 0; j < s.n; ++j) {
      const auto [ref, magnitude] = ReferenceDot(wf, x, s.k, j, m);
      ASSERT_GT(magnitude, 0.0);
      const float got = y[static_cast<size_t>(m) * s.n + j];
      const float port = internal::QuantDotPortable(w, j, a, m);
      max_kernel_diff = std::max(max_kernel_diff, std::fabs(got - port) / magnitude);
      // Activations keep ~7 bits per 32-value block: the error is a small fraction of the
      // sum of |w x|.
      max_ref_err = std::max(max_ref_err, std::fabs(got - ref) / magnitude);
    }
  }
  EXPECT_LT(max_kernel_diff, 1e-5) << "packed SIMD vs portable (float summation order only)";
  EXPECT_LT(max_ref_err, 2e-2) << "vs float64";

  // Exactly what the kernels compute, in float64: the dequantized weights against the
  // activations as quantized (d * q). Only float rounding may separate the two, so any
  // mistake in codes, scales or offsets shows here far above the tolerance.
  double max_exact_err = 0;
  for (int m = 0; m < s.m; ++m) {
    for (int j = 0; j < s.n; ++j) {
      double exact = 0, magnitude = 0;
      for (int i = 0; i < s.k; ++i) {
        const size_t at = static_cast<size_t>(m) * s.k + i;
        const double xq = static_cast<double>(a.d[at / 32]) * a.q[at];
        const double p = static_cast<double>(wf[static_cast<size_t>(j) * s.k + i]) * xq;
        exact += p;
        magnitude += std::fabs(p);
      }
      if (magnitude == 0) continue;
      max_exact_err = std::max(max_exact_err, std::fabs(y[static_cast<size_t>(m) * s.n + j] - exact) / magnitude);
    }
  }
  EXPECT_LT(max_exact_err, 1e-5) << "vs float64 of the quantized activations";
}

// A row's outputs do not depend on which other rows share its batch.
TEST_P(BlockMatmulTest, BatchedRowsEqualRowsAlone) {
  Shape s = GetParam();
  s.m += 1;  // at least two rows
  std::mt19937 rng(s.n + s.k + s.m * 3);
  const std::vector<uint8_t> blocks = RandomBlocks(s.type, s.n, s.k, rng);
  const QuantizedWeights w = QuantizedWeights::FromBlocks(s.type, s.n, s.k, blocks.data());
  ::hetero::testing::ExpectBatchedRowsEqualRowsAlone(w, s.m, rng);
}

// Decode's two int8 passes: near the float64 product of x itself, and a sequence's outputs
// still independent of the other sequences in its step.
TEST_P(BlockMatmulTest, RemainderPassNearFloat64) {
  const Shape s = GetParam();
  std::mt19937 rng(s.n * 13 + s.k * 3 + s.m + static_cast<int>(s.type) * 7);
  const std::vector<uint8_t> blocks = RandomBlocks(s.type, s.n, s.k, rng);
  const QuantizedWeights w = QuantizedWeights::FromBlocks(s.type, s.n, s.k, blocks.data());
  ::hetero::testing::ExpectRemainderPassHolds(w, blocks, s.m, rng);
}

// The bf16 copy the GEMM path multiplies (CPUs without VNNI, or --bf16-min-rows):
// within one bf16 rounding of the exact values.
TEST_P(BlockMatmulTest, Bf16CopyMatchesDequantization) {
  const Shape s = GetParam();
  std::mt19937 rng(s.n * 3 + s.k);
  const std::vector<uint8_t> blocks = RandomBlocks(s.type, s.n, s.k, rng);
  const QuantizedWeights w = QuantizedWeights::FromBlocks(s.type, s.n, s.k, blocks.data());
  std::vector<float> wf(static_cast<size_t>(s.n) * s.k);
  ASSERT_TRUE(Dequantize(s.type, blocks, absl::MakeSpan(wf)).ok());
  std::vector<uint16_t> bf16(wf.size());
  DequantizeRowsToBf16(w, 0, s.n, bf16.data());
  for (size_t i = 0; i < wf.size(); ++i) ASSERT_EQ(bf16[i], Fp32ToBf16(wf[i])) << i;
}

// One parallel step for several matrices (q/k/v; experts with their own inputs) gives each
// exactly its own product.
TEST(QuantMatmulManyTest, EqualsSeparateProducts) {
  std::mt19937 rng(77);
  const int k = 512, m = 3;
  const TensorType types[] = {TensorType::kQ4_K, TensorType::kQ8_0, TensorType::kQ5_0, TensorType::kQ2_K};
  const int rows[] = {48, 20, 7, 33};  // packed groups, tails, and a matrix too small to pack
  std::vector<std::vector<uint8_t>> blocks;
  std::vector<QuantizedWeights> weights;
  for (int i = 0; i < 4; ++i) blocks.push_back(RandomBlocks(types[i], rows[i], k, rng));
  for (int i = 0; i < 4; ++i) weights.push_back(QuantizedWeights::FromBlocks(types[i], rows[i], k, blocks[i].data()));
  std::vector<float> x(static_cast<size_t>(m) * k);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  // One pass, and decode's two (each row's products of its remainder added), on three
  // threads with static and dynamic shares.
  ThreadPool pool(3);
  const ScopedThreadPool use_pool(&pool);
  for (const bool dynamic : {false, true}) {
    for (const bool with_remainder : {false, true}) {
      QuantizedActivations a, own;
      ::hetero::testing::QuantizeForTest(a, x.data(), m, k, with_remainder);
      ::hetero::testing::QuantizeForTest(own, x.data() + k, m - 1, k, with_remainder);  // rows 1.. alone
      std::vector<std::vector<float>> fused(4), alone(4);
      QuantMatmulTask tasks[4];
      for (int i = 0; i < 4; ++i) {
        // The last task has its own activations (as a mixture's experts do).
        const QuantizedActivations& input = i == 3 ? own : a;
        const int out_rows = i == 3 ? m - 1 : m;
        fused[i].assign(static_cast<size_t>(out_rows) * rows[i], std::nanf(""));
        alone[i].assign(static_cast<size_t>(out_rows) * rows[i], std::nanf(""));
        tasks[i] = {&weights[i], fused[i].data(), rows[i], i == 3 ? &own : nullptr};
        QuantMatmul(weights[i], input, alone[i].data(), rows[i]);
      }
      QuantMatmulMany(tasks, a, dynamic);
      for (int i = 0; i < 4; ++i) {
        for (size_t j = 0; j < fused[i].size(); ++j) {
          ASSERT_FALSE(std::isnan(fused[i][j])) << "matrix " << i << " output " << j << " not written";
          ASSERT_EQ(fused[i][j], alone[i][j]) << "matrix " << i << " output " << j << (with_remainder ? ", two passes" : "")
                                              << (dynamic ? ", dynamic" : "");
        }
      }
    }
  }
}

std::vector<Shape> Shapes() {
  std::vector<Shape> shapes;
  for (TensorType t : kFormats) {
    const int kb = static_cast<int>(GetTensorTypeTraits(t).block_size);
    const bool super = kb == 256;
    // One block only, several with a group of 16 and a tail row, a batch past 8, the
    // default model's shapes, and a batch past 16.
    shapes.push_back({t, 7, kb, 1});
    shapes.push_back({t, 33, super ? 768 : 96, 3});
    shapes.push_back({t, 48, super ? 256 : 608, 9});
    shapes.push_back({t, 17, super ? 1536 : 576, 13});
    // Past one 16-row tile (the AVX2 kernel's for the formats with high bits) with a part tile.
    shapes.push_back({t, 16, super ? 512 : 160, 21});
  }
  return shapes;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BlockMatmulTest, ::testing::ValuesIn(Shapes()), [](const auto& info) {
  return std::string(TensorTypeName(info.param.type)) + "_" + std::to_string(info.param.n) + "x" +
         std::to_string(info.param.k) + "_m" + std::to_string(info.param.m);
});

}  // namespace
}  // namespace hetero
