// Decode attention kernels (AVX-512 and portable) against a float64 softmax-attention
// reference, on random queries, keys and values in paged blocks: key counts that are not
// multiples of 16 or of the block size, one and several query heads per KV head, head
// dimensions 64 and 128, and windows that start inside a block (sliding-window layers).
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/cpu/attention_kernels.h"
#include "src/cpu/cpu_features.h"

namespace hetero {
namespace {

struct Case {
  int n_keys, group, head_dim, block_tokens;
  int first_key = 0;  // keys start this far into the first block
};

class AttentionDecodeTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionDecodeTest, MatchesFloat64Reference) {
  const Case c = GetParam();
  std::mt19937 rng(c.n_keys * 31 + c.group * 7 + c.head_dim);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  // One KV head pair per block region: [k | v][slot][dim], plus an unrelated head before
  // each, so the offsets matter.
  const int n_blocks = (c.first_key + c.n_keys + c.block_tokens - 1) / c.block_tokens;
  const size_t head_floats = static_cast<size_t>(c.block_tokens) * c.head_dim;
  std::vector<std::vector<float>> storage(n_blocks, std::vector<float>(4 * head_floats));
  std::vector<const float*> blocks;
  for (auto& b : storage) {
    for (float& v : b) v = dist(rng) * 2.0f;  // scores spread over several units
    blocks.push_back(b.data());
  }
  std::vector<float> q(static_cast<size_t>(c.group) * c.head_dim);
  for (float& v : q) v = dist(rng);
  internal::DecodeQuery query{q.data(),     c.group,       c.head_dim,  c.n_keys,
                              c.first_key,  blocks.data(), c.block_tokens, head_floats,
                              3 * head_floats, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};

  std::vector<double> want(q.size());
  for (int h = 0; h < c.group; ++h) {
    std::vector<double> s(c.n_keys);
    double max = -1e300;
    for (int j = 0; j < c.n_keys; ++j) {
      const int i = c.first_key + j;
      const float* k = blocks[i / c.block_tokens] + head_floats + static_cast<size_t>(i % c.block_tokens) * c.head_dim;
      double dot = 0;
      for (int d = 0; d < c.head_dim; ++d) dot += static_cast<double>(q[h * c.head_dim + d]) * k[d];
      s[j] = dot * query.scale;
      max = std::max(max, s[j]);
    }
    double sum = 0;
    for (double& v : s) sum += (v = std::exp(v - max));
    for (int j = 0; j < c.n_keys; ++j) {
      const int i = c.first_key + j;
      const float* v = blocks[i / c.block_tokens] + 3 * head_floats + static_cast<size_t>(i % c.block_tokens) * c.head_dim;
      for (int d = 0; d < c.head_dim; ++d) want[h * c.head_dim + d] += s[j] / sum * v[d];
    }
  }

  std::vector<float> scores(static_cast<size_t>(c.group) * ((c.n_keys + 15) / 16 * 16));
  const auto check = [&](const std::vector<float>& got, const char* kernel) {
    double err = 0, norm = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err += (got[i] - want[i]) * (got[i] - want[i]);
      norm += want[i] * want[i];
    }
    // f32 dot products of 64-128 terms and a softmax: a few float ulps, relative.
    EXPECT_LT(std::sqrt(err / norm), 2e-6) << kernel;
  };
  std::vector<float> portable(q.size(), -1.0f);
  internal::AttendDecodePortable(query, scores.data(), portable.data());
  check(portable, "portable");
  if (DetectCpu().avx512f) {
    std::vector<float> simd(q.size(), -1.0f);
    internal::AttendDecodeAvx512(query, scores.data(), simd.data());
    check(simd, "avx512");
  } else {
    GTEST_SKIP() << "no AVX-512 on this CPU: only the portable kernel was checked";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionDecodeTest,
                         ::testing::Values(Case{1, 1, 64, 16}, Case{5, 3, 64, 16}, Case{16, 3, 64, 16},
                                           Case{17, 1, 128, 16}, Case{100, 3, 64, 16}, Case{301, 4, 128, 32},
                                           Case{33, 8, 64, 8}, Case{1, 1, 64, 16, 15}, Case{37, 4, 256, 16, 5},
                                           Case{512, 1, 256, 16, 13}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return "keys" + std::to_string(c.n_keys) + "_group" + std::to_string(c.group) + "_hd" +
                                  std::to_string(c.head_dim) + "_bt" + std::to_string(c.block_tokens) + "_first" +
                                  std::to_string(c.first_key);
                         });

}  // namespace
}  // namespace hetero
