// The native quantized matmul kernels: AVX-512 VNNI and AVX2 against the portable kernels, and both
// against a float64 product of the dequantized weights with the unquantized activations,
// on random blocks of awkward sizes (odd block counts, single rows, non-multiple-of-16 n).
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "src/cpu/cpu_features.h"
#include "src/cpu/linear.h"
#include "src/cpu/quant_matmul.h"
#include "src/runtime/dequantize.h"
#include "src/runtime/fp16.h"
#include "tests/support/quant_reference.h"

namespace hetero {
namespace {

std::vector<uint8_t> RandomBlocks(TensorType type, int n, int k, std::mt19937& rng) {
  const TensorTypeTraits& t = GetTensorTypeTraits(type);
  std::vector<uint8_t> data(static_cast<size_t>(n) * (k / 32) * t.type_size);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  for (size_t off = 0; off < data.size(); off += t.type_size) {
    const uint16_t d = Fp32ToFp16(scale(rng));
    std::memcpy(data.data() + off, &d, 2);
    if (type == TensorType::kQ4_1) {
      const uint16_t m = Fp32ToFp16(-8.0f * scale(rng));
      std::memcpy(data.data() + off + 2, &m, 2);
    }
  }
  return data;
}

using ::hetero::testing::ReferenceDot;

struct Shape {
  TensorType type;
  int n, k, m;
};

class QuantMatmulTest : public ::testing::TestWithParam<Shape> {};

// An empty QuantizedActivations with `a`'s shape, for the portable quantizer to fill.
QuantizedActivations SizedLike(const QuantizedActivations& a) {
  QuantizedActivations out;
  out.q.resize(a.q.size());
  out.q_biased.resize(a.q.size());
  out.d.resize(a.d.size());
  out.d_sum.resize(a.d.size());
  out.q4_0_offsets.resize(a.d.size());
  out.q8_0_offsets.resize(a.d.size());
  out.half_sums.resize(a.half_sums.size());
  out.q6_k_half_offsets.resize(a.half_sums.size());
  out.rows = a.rows;
  out.cols = a.cols;
  return out;
}

void ExpectSameQuantization(const QuantizedActivations& a, const QuantizedActivations& expected) {
  EXPECT_EQ(a.q, expected.q);
  EXPECT_EQ(a.q_biased, expected.q_biased);
  EXPECT_EQ(a.d, expected.d);
  EXPECT_EQ(a.d_sum, expected.d_sum);
  EXPECT_EQ(a.half_sums, expected.half_sums);
  EXPECT_EQ(a.q4_0_offsets, expected.q4_0_offsets);
  EXPECT_EQ(a.q8_0_offsets, expected.q8_0_offsets);
  EXPECT_EQ(a.q6_k_half_offsets, expected.q6_k_half_offsets);
  if (!a.d_lanes.empty()) {  // the AVX-512 kernels' copy of d, eight lanes per block
    ASSERT_EQ(a.d_lanes.size(), 8 * a.d.size());
    for (size_t i = 0; i < a.d_lanes.size(); ++i) ASSERT_EQ(a.d_lanes[i], a.d[i / 8]) << "lane " << i;
  }
}

// Decode's two passes quantize each row and then its remainder x - d q (the product rounded,
// then the difference): whichever quantizer runs (the AVX-512 one fuses both rows into one
// pass), the same bits as the portable quantizer on x and on that remainder.
TEST(QuantizeWithRemainderTest, SameBitsAsThePortableQuantizerOnBothRows) {
  std::mt19937 rng(23);
  for (const auto& [rows, cols] : {std::pair{1, 32}, std::pair{1, 576}, std::pair{3, 1056}, std::pair{2, 96}}) {
    std::vector<float> x(static_cast<size_t>(rows) * cols);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::uniform_real_distribution<float> scale(-6.0f, 4.0f);
    for (size_t i = 0; i < x.size(); i += 32) {  // each block its own magnitude
      const float magnitude = std::exp2(scale(rng));
      for (size_t j = i; j < i + 32; ++j) x[j] = magnitude * dist(rng);
    }
    QuantizedActivations a;
    a.QuantizeWithRemainder(x.data(), rows, cols, cols);
    ASSERT_EQ(a.rows, 2 * rows);
    QuantizedActivations expected = SizedLike(a);
    for (int m = 0; m < rows; ++m) {
      const float* row = x.data() + static_cast<size_t>(m) * cols;
      internal::QuantizeRowsPortable(row, 1, cols, cols, expected, 2 * m);
      std::vector<float> rest(cols);
      for (int i = 0; i < cols; ++i) {
        const float product = expected.d[(2 * static_cast<size_t>(m) * cols + i) / 32] *
                              static_cast<float>(expected.q[2 * static_cast<size_t>(m) * cols + i]);
        rest[i] = row[i] - product;
      }
      internal::QuantizeRowsPortable(rest.data(), 1, cols, cols, expected, 2 * m + 1);
    }
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    ExpectSameQuantization(a, expected);
  }
}

TEST_P(QuantMatmulTest, MatchesFloat64Reference) {
  const Shape s = GetParam();
  std::mt19937 rng(s.n * 131 + s.k * 7 + s.m);
  const std::vector<uint8_t> blocks = RandomBlocks(s.type, s.n, s.k, rng);
  const QuantizedWeights w = QuantizedWeights::FromBlocks(s.type, s.n, s.k, blocks.data());
  std::vector<float> x(static_cast<size_t>(s.m) * s.k);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  // Reference: dequantized weights (bit-exact, tested elsewhere) times float64 activations.
  std::vector<float> wf(static_cast<size_t>(s.n) * s.k);
  ASSERT_TRUE(Dequantize(s.type, blocks, absl::MakeSpan(wf)).ok());

  QuantizedActivations a;
  a.Quantize(x.data(), s.m, s.k, s.k);
  QuantizedActivations portable = SizedLike(a);
  internal::QuantizeRowsPortable(x.data(), s.m, s.k, s.k, portable);
  ExpectSameQuantization(a, portable);  // the SIMD quantizer rounds exactly like the portable one

  std::vector<float> y(static_cast<size_t>(s.m) * s.n);
  QuantMatmul(w, a, y.data(), s.n);
  double max_kernel_diff = 0, max_ref_err = 0;
  for (int m = 0; m < s.m; ++m) {
    for (int j = 0; j < s.n; ++j) {
      const auto [ref, magnitude] = ReferenceDot(wf, x, s.k, j, m);
      const float got = y[static_cast<size_t>(m) * s.n + j];
      const float port = internal::QuantDotPortable(w, j, portable, m);
      max_kernel_diff = std::max(max_kernel_diff, std::fabs(got - port) / (magnitude + 1e-30));
      // Activations keep ~7 bits per 32-value block: the error is a small fraction of the
      // sum of |w x| (not of the result, which can cancel).
      max_ref_err = std::max(max_ref_err, std::fabs(got - ref) / (magnitude + 1e-30));
    }
  }
  EXPECT_LT(max_kernel_diff, 1e-5) << "SIMD vs portable (float summation order only)";
  EXPECT_LT(max_ref_err, 2e-2) << "vs float64";
  if (QuantMatmulUsesAvx512()) SUCCEED() << "AVX-512 VNNI kernels in use";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, QuantMatmulTest,
    ::testing::Values(Shape{TensorType::kQ4_0, 7, 32, 1}, Shape{TensorType::kQ4_0, 33, 96, 3},
                      Shape{TensorType::kQ4_1, 17, 608, 1}, Shape{TensorType::kQ4_1, 64, 576, 5},
                      Shape{TensorType::kQ4_1, 5, 1536, 2}, Shape{TensorType::kQ8_0, 9, 160, 1},
                      Shape{TensorType::kQ8_0, 31, 576, 4}, Shape{TensorType::kQ8_0, 3, 32, 7},
                      // Packed groups of 16 with 8-row tiles plus leftovers, and a tail row.
                      Shape{TensorType::kQ4_1, 48, 576, 8}, Shape{TensorType::kQ4_1, 49, 96, 17},
                      Shape{TensorType::kQ4_0, 32, 160, 9}, Shape{TensorType::kQ8_0, 33, 576, 13},
                      // Q8_0 packs block pairs: odd and even block counts, one and several pairs.
                      Shape{TensorType::kQ4_0, 48, 576, 2}, Shape{TensorType::kQ4_0, 17, 64, 8},
                      Shape{TensorType::kQ8_0, 16, 96, 3}, Shape{TensorType::kQ8_0, 40, 64, 9},
                      // Past one 16-row tile (the AVX2 kernel's for Q8_0) with a part tile.
                      Shape{TensorType::kQ8_0, 32, 160, 21}, Shape{TensorType::kQ4_0, 16, 96, 21}),
    [](const auto& info) {
      return TensorTypeName(info.param.type) + "_" + std::to_string(info.param.n) + "x" +
             std::to_string(info.param.k) + "_m" + std::to_string(info.param.m);
    });

// A row's outputs do not depend on which other rows share its batch (the one-row kernels
// of a decode step against the batched ones of a prompt).
TEST_P(QuantMatmulTest, BatchedRowsEqualRowsAlone) {
  Shape s = GetParam();
  s.m += 1;  // at least two rows
  std::mt19937 rng(s.n * 5 + s.k + s.m * 3);
  const std::vector<uint8_t> blocks = RandomBlocks(s.type, s.n, s.k, rng);
  const QuantizedWeights w = QuantizedWeights::FromBlocks(s.type, s.n, s.k, blocks.data());
  ::hetero::testing::ExpectBatchedRowsEqualRowsAlone(w, s.m, rng);
}

// Decode's two int8 passes: near the float64 product of x itself, and a sequence's outputs
// still independent of the other sequences in its step.
TEST_P(QuantMatmulTest, RemainderPassNearFloat64) {
  const Shape s = GetParam();
  std::mt19937 rng(s.n * 13 + s.k * 3 + s.m);
  const std::vector<uint8_t> blocks = RandomBlocks(s.type, s.n, s.k, rng);
  const QuantizedWeights w = QuantizedWeights::FromBlocks(s.type, s.n, s.k, blocks.data());
  ::hetero::testing::ExpectRemainderPassHolds(w, blocks, s.m, rng);
}

// The AVX2 kernels (CPUs without AVX-512 VNNI) against the portable one and float64, run
// directly so they are checked on every CPU that has AVX2, whichever kernel QuantMatmul picks.
TEST_P(QuantMatmulTest, Avx2KernelMatchesPortable) {
  if (!DetectCpu().avx2 || !DetectCpu().fma) GTEST_SKIP() << "no AVX2 on this CPU";
  const Shape s = GetParam();
  std::mt19937 rng(s.n * 17 + s.k + s.m * 5);
  const std::vector<uint8_t> blocks = RandomBlocks(s.type, s.n, s.k, rng);
  const QuantizedWeights w = QuantizedWeights::FromBlocks(s.type, s.n, s.k, blocks.data());
  std::vector<float> x(static_cast<size_t>(s.m) * s.k);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  QuantizedActivations a;
  a.Quantize(x.data(), s.m, s.k, s.k);
  std::vector<float> wf(static_cast<size_t>(s.n) * s.k);
  ASSERT_TRUE(Dequantize(s.type, blocks, absl::MakeSpan(wf)).ok());
  std::vector<float> y(static_cast<size_t>(s.m) * s.n, std::nanf(""));
  for (int j = 0; j < s.n; ++j) internal::QuantRowsAvx2(w, j, a, y.data(), s.n);
  // The packed tiles' kernel too, on the groups (the same tiles the AVX-512 kernels read, so
  // it runs wherever FromBlocks packed them), the rows past the last group as above.
  std::vector<float> y_groups(y.size(), std::nanf(""));
  const bool groups = w.packed_rows > 0 && DetectCpu().f16c;
  if (groups) {
    for (int g = 0; g < w.packed_rows / QuantizedWeights::kGroupRows; ++g) {
      internal::QuantGroupAvx2(w, g, a, y_groups.data(), s.n);
    }
    for (int j = w.packed_rows; j < s.n; ++j) internal::QuantRowsAvx2(w, j, a, y_groups.data(), s.n);
  }
  for (int m = 0; m < s.m; ++m) {
    for (int j = 0; j < s.n; ++j) {
      const auto [ref, magnitude] = ReferenceDot(wf, x, s.k, j, m);
      const float port = internal::QuantDotPortable(w, j, a, m);
      for (const std::vector<float>* out : {&y, &y_groups}) {
        if (out == &y_groups && !groups) continue;
        const float got = (*out)[static_cast<size_t>(m) * s.n + j];
        const char* kernel = out == &y ? "rows" : "groups";
        ASSERT_LT(std::fabs(got - port) / (magnitude + 1e-30), 1e-5) << kernel << ": row " << m << " output " << j;
        ASSERT_LT(std::fabs(got - ref) / (magnitude + 1e-30), 2e-2) << kernel << ": row " << m << " output " << j;
      }
    }
  }
}

// The bf16 copy used by the GEMM path: within one bf16 rounding step of the exact values.
TEST_P(QuantMatmulTest, Bf16CopyMatchesDequantization) {
  const Shape s = GetParam();
  std::mt19937 rng(s.n + s.k);
  const std::vector<uint8_t> blocks = RandomBlocks(s.type, s.n, s.k, rng);
  const QuantizedWeights w = QuantizedWeights::FromBlocks(s.type, s.n, s.k, blocks.data());
  std::vector<float> exact(static_cast<size_t>(s.n) * s.k);
  ASSERT_TRUE(Dequantize(s.type, blocks, absl::MakeSpan(exact)).ok());
  std::vector<uint16_t> fast(exact.size()), portable(exact.size());
  DequantizeRowsToBf16(w, 0, s.n, fast.data());
  internal::DequantizeRowsToBf16Portable(w, 0, s.n, portable.data());
  for (size_t i = 0; i < exact.size(); ++i) {
    // bf16 keeps 8 significant bits: half an ulp is 2^-9 relative, plus one ulp of slack
    // for the fused multiply-add the SIMD path uses before rounding.
    const double bound = std::fabs(exact[i]) * std::ldexp(1.0, -7) + 1e-30;
    ASSERT_LE(std::fabs(Bf16ToFp32(fast[i]) - exact[i]), bound) << i;
    ASSERT_LE(std::fabs(Bf16ToFp32(portable[i]) - exact[i]), bound) << i;
  }
}

TEST(QuantMatmulTest, ZeroActivationsGiveZero) {
  std::mt19937 rng(3);
  const std::vector<uint8_t> blocks = RandomBlocks(TensorType::kQ4_1, 4, 64, rng);
  const QuantizedWeights w = QuantizedWeights::FromBlocks(TensorType::kQ4_1, 4, 64, blocks.data());
  std::vector<float> x(64, 0.0f), y(4, 1.0f);
  QuantizedActivations a;
  a.Quantize(x.data(), 1, 64, 64);
  QuantMatmul(w, a, y.data(), 4);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

// Packing tells the loader of the source rows it has copied (so their file pages can go):
// whole row groups, in order from the first byte, in stretches of at least 4 MiB but the
// last, covering exactly the packed rows (the tail rows past the last group are still read
// from the source); and the packed copy is the same with or without being told.
TEST(QuantMatmulTest, PackingReportsTheSourceRowsItCopiedInOrder) {
  std::mt19937 rng(11);
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_1, TensorType::kQ4_K, TensorType::kQ6_K}) {
    SCOPED_TRACE(TensorTypeName(type));
    const TensorTypeTraits& t = GetTensorTypeTraits(type);
    const int n = 16 * 150 + 5, k = 4096;
    std::vector<uint8_t> blocks(static_cast<size_t>(n) * (k / t.block_size) * t.type_size);
    for (uint8_t& b : blocks) b = static_cast<uint8_t>(rng());
    std::vector<std::pair<const uint8_t*, size_t>> reports;
    const QuantizedWeights w = QuantizedWeights::FromBlocks(
        type, n, k, blocks.data(), [&](const uint8_t* begin, size_t bytes) { reports.emplace_back(begin, bytes); });
    const QuantizedWeights plain = QuantizedWeights::FromBlocks(type, n, k, blocks.data());
    ASSERT_EQ(w.packed_rows, plain.packed_rows);
    ASSERT_EQ(w.packed.size(), plain.packed.size());
    EXPECT_EQ(std::memcmp(w.packed.data(), plain.packed.data(), w.packed.size() * sizeof(w.packed[0])), 0);
    if (w.packed_rows == 0) {  // this CPU (or HETERO_CPU_ISA cap) reads the blocks in place
      EXPECT_TRUE(reports.empty());
      continue;
    }
    EXPECT_EQ(w.packed_rows, 16 * 150);
    ASSERT_GE(reports.size(), 2u);
    const uint8_t* next = blocks.data();
    for (size_t i = 0; i < reports.size(); ++i) {
      EXPECT_EQ(reports[i].first, next) << "report " << i;
      if (i + 1 < reports.size()) {
        EXPECT_GE(reports[i].second, size_t{4} << 20) << "report " << i;
      }
      EXPECT_EQ(reports[i].second % (16 * w.row_bytes), 0u) << "report " << i << ": not whole row groups";
      next = reports[i].first + reports[i].second;
    }
    EXPECT_EQ(next, blocks.data() + static_cast<size_t>(w.packed_rows) * w.row_bytes);
  }
}

// MakeQuantLinear tells its caller of the file bytes no kernel reads (the caller drops
// those pages): as packing copies them, then the whole tensor, where only the packed copy
// is read; nothing at all where a kernel reads the file's blocks (the bf16 prompt path from
// 8 rows, or no packed copy on this CPU).
TEST(QuantMatmulTest, QuantLinearReleasesOnlyTheSourceNoKernelReads) {
  std::mt19937 rng(12);
  const int n = 16 * 150, k = 4096;  // 10.4 MB of Q8_0, no rows past the last group
  std::vector<uint8_t> blocks(static_cast<size_t>(n) * (k / 32) * 34);
  for (uint8_t& b : blocks) b = static_cast<uint8_t>(rng());
  const GgufTensorInfo tensor{"w", {k, n}, TensorType::kQ8_0, 0, static_cast<uint64_t>(n) * k, blocks.size(), 0,
                              absl::MakeConstSpan(blocks)};
  const LinearContext ctx;
  for (const int bf16_min_rows : {kNeverBf16, 8}) {
    SCOPED_TRACE(bf16_min_rows);
    std::vector<std::pair<const uint8_t*, size_t>> reports;
    absl::StatusOr<std::unique_ptr<Linear>> linear = MakeQuantLinear(
        ctx, tensor, bf16_min_rows, [&](const uint8_t* begin, size_t bytes) { reports.emplace_back(begin, bytes); });
    if (!linear.ok() && bf16_min_rows != kNeverBf16) continue;  // no bf16 matmul in oneDNN on this CPU
    ASSERT_TRUE(linear.ok()) << linear.status();
    if ((*linear)->reads_source_weights()) {
      EXPECT_TRUE(reports.empty());
      continue;
    }
    ASSERT_GE(reports.size(), 3u);  // two or more stretches while packing, then the whole
    EXPECT_EQ(reports.back(), std::make_pair(static_cast<const uint8_t*>(blocks.data()), blocks.size()));
    const uint8_t* next = blocks.data();
    for (size_t i = 0; i + 1 < reports.size(); ++i) {
      EXPECT_EQ(reports[i].first, next) << "report " << i;
      next = reports[i].first + reports[i].second;
    }
    EXPECT_EQ(next, blocks.data() + blocks.size());
  }
}

}  // namespace
}  // namespace hetero
