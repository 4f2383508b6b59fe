// Decode attention kernels (AVX-512, AVX2 and portable) against a float64 softmax-attention
// reference, on random queries, keys and values in paged blocks: key counts that are not
// multiples of 16 or of the block size, one and several query heads per KV head, head
// dimensions 64 and 128, and windows that start inside a block (sliding-window layers).
// Rows longer than Attention::kKeysPerPart run in parts merged afterwards: the parts
// against the same reference, and a row's result bit-identical whichever rows share its
// pass and however many threads run it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/cpu/attention.h"
#include "src/cpu/attention_kernels.h"
#include "src/cpu/cpu_features.h"
#include "src/cpu/thread_pool.h"
#include "src/runtime/kv_layout.h"

namespace hetero {
namespace {

struct Case {
  int n_keys, group, head_dim, block_tokens;
  int first_key = 0;  // keys start this far into the first block
};

class AttentionDecodeTest : public ::testing::TestWithParam<Case> {};

// One KV head's keys and values in paged blocks ([k | v][slot][dim] per block, scaled so
// the scores spread over several units) and the query of its `group` heads, all random.
struct RandomRow {
  std::vector<std::vector<float>> storage;
  std::vector<const float*> blocks;
  std::vector<float> q;
  size_t head_floats;  // one block's keys (or values): block_tokens x head_dim
};
RandomRow MakeRandomRow(const Case& c, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  RandomRow row;
  row.head_floats = static_cast<size_t>(c.block_tokens) * c.head_dim;
  const int n_blocks = (c.first_key + c.n_keys + c.block_tokens - 1) / c.block_tokens;
  row.storage.assign(n_blocks, std::vector<float>(2 * row.head_floats));
  for (auto& b : row.storage) {
    for (float& v : b) v = dist(rng) * 2.0f;
    row.blocks.push_back(b.data());
  }
  row.q.resize(static_cast<size_t>(c.group) * c.head_dim);
  for (float& v : row.q) v = dist(rng);
  return row;
}

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
  if (DetectCpu().avx2 && DetectCpu().fma) {
    std::vector<float> simd(q.size(), -1.0f);
    internal::AttendDecodeAvx2(query, scores.data(), simd.data());
    check(simd, "avx2");
  }
  if (DetectCpu().avx512f) {
    std::vector<float> simd(q.size(), -1.0f);
    internal::AttendDecodeAvx512(query, scores.data(), simd.data());
    check(simd, "avx512");
  } else {
    GTEST_SKIP() << "no AVX-512 on this CPU: the portable kernel and, where the CPU has it, AVX2 were checked";
  }
}

// The SIMD kernels' transposed-keys form (a prompt's scores) against the same kernel on
// the keys as stored: the transposer copies every key exactly, and the outputs are the same
// bits. The transposed keys' spare columns and the score rows' padding hold NaN, so a lane
// past the last key that reached a sum or the softmax would show.
TEST_P(AttentionDecodeTest, TransposedKeysGiveTheSameBits) {
  const Case c = GetParam();
  const RandomRow row = MakeRandomRow(c, c.n_keys * 13 + c.group * 3 + c.head_dim);
  const std::vector<const float*>& blocks = row.blocks;
  const std::vector<float>& q = row.q;
  const size_t head_floats = row.head_floats;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const size_t ld = static_cast<size_t>(c.n_keys + 15) / 16 * 16 + 16;
  internal::DecodeQuery query{q.data(),     c.group,       c.head_dim,     c.n_keys, c.first_key,
                              blocks.data(), c.block_tokens, /*k_offset=*/0, head_floats,
                              1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  using Transposer = void (*)(const float* const*, int, size_t, int, int, int, float*, size_t);
  using Kernel = void (*)(const internal::DecodeQuery&, float*, float*);
  struct Simd {
    Transposer transpose;
    Kernel attend;
    const char* name;
  };
  std::vector<Simd> kernels;
  if (DetectCpu().avx2 && DetectCpu().fma && c.head_dim % 8 == 0) {
    kernels.push_back({internal::TransposeKeysAvx2, internal::AttendDecodeAvx2, "avx2"});
  }
  if (DetectCpu().avx512f && c.head_dim % 16 == 0) {
    kernels.push_back({internal::TransposeKeysAvx512, internal::AttendDecodeAvx512, "avx512"});
  }
  if (kernels.empty()) {
    GTEST_SKIP() << "no transposed-keys kernel to check: this CPU (or HETERO_CPU_ISA) has neither AVX2 with FMA "
                    "(head_dim % 8 == 0) nor AVX-512 (head_dim % 16 == 0), so every row runs the portable kernel, "
                    "which reads the keys as stored";
  }
  for (const Simd& k : kernels) {
    SCOPED_TRACE(k.name);
    std::vector<float> kt(static_cast<size_t>(c.head_dim) * ld, nan);
    k.transpose(blocks.data(), c.block_tokens, 0, c.head_dim, c.first_key, c.n_keys, kt.data(), ld);
    for (int j = 0; j < c.n_keys; ++j) {
      const int i = c.first_key + j;
      const float* key = blocks[i / c.block_tokens] + static_cast<size_t>(i % c.block_tokens) * c.head_dim;
      for (int d = 0; d < c.head_dim; ++d) ASSERT_EQ(kt[d * ld + j], key[d]) << "key " << j << ", dimension " << d;
    }
    std::vector<float> scores(static_cast<size_t>(c.group) * ((c.n_keys + 15) / 16 * 16), nan);
    std::vector<float> stored(q.size()), transposed(q.size());
    k.attend(query, scores.data(), stored.data());
    std::fill(scores.begin(), scores.end(), nan);
    internal::DecodeQuery from_kt = query;
    from_kt.kt = kt.data();
    from_kt.kt_ld = ld;
    k.attend(from_kt, scores.data(), transposed.data());
    for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(transposed[i], stored[i]) << "output " << i;
  }
}

// The same query in parts of `part_keys` keys (each computed alone, unnormalised, with its
// maxima and sums), merged, against the whole row's float64 attention.
TEST_P(AttentionDecodeTest, PartsMergeToTheWholeRow) {
  const Case c = GetParam();
  const RandomRow row = MakeRandomRow(c, c.n_keys * 17 + c.group * 5 + c.head_dim);
  const std::vector<const float*>& blocks = row.blocks;
  const std::vector<float>& q = row.q;
  const size_t head_floats = row.head_floats;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<double> want(q.size());
  for (int h = 0; h < c.group; ++h) {
    std::vector<double> s(c.n_keys);
    for (int j = 0; j < c.n_keys; ++j) {
      const int i = c.first_key + j;
      const float* k = blocks[i / c.block_tokens] + static_cast<size_t>(i % c.block_tokens) * c.head_dim;
      double dot = 0;
      for (int d = 0; d < c.head_dim; ++d) dot += static_cast<double>(q[h * c.head_dim + d]) * k[d];
      s[j] = dot * scale;
    }
    const double max = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& v : s) sum += (v = std::exp(v - max));
    for (int j = 0; j < c.n_keys; ++j) {
      const int i = c.first_key + j;
      const float* v = blocks[i / c.block_tokens] + head_floats + static_cast<size_t>(i % c.block_tokens) * c.head_dim;
      for (int d = 0; d < c.head_dim; ++d) want[h * c.head_dim + d] += s[j] / sum * v[d];
    }
  }
  using Kernel = void (*)(const internal::DecodeQuery&, float*, float*);
  std::vector<std::pair<Kernel, const char*>> kernels = {{internal::AttendDecodePortable, "portable"}};
  if (DetectCpu().avx2 && DetectCpu().fma) kernels.push_back({internal::AttendDecodeAvx2, "avx2"});
  if (DetectCpu().avx512f) kernels.push_back({internal::AttendDecodeAvx512, "avx512"});
  std::vector<std::pair<internal::AttentionKernels, const char*>> merges = {{internal::AttentionKernels::kPortable, "portable"}};
  if (DetectCpu().avx2 && DetectCpu().fma) merges.push_back({internal::AttentionKernels::kAvx2, "avx2"});
  if (DetectCpu().avx512f && c.head_dim % 16 == 0) merges.push_back({internal::AttentionKernels::kAvx512, "avx512"});
  for (const int part_keys : {1, 7, 16, 64}) {
    const int parts = (c.n_keys + part_keys - 1) / part_keys;
    for (const auto& [kernel, name] : kernels) {
      std::vector<float> outs(static_cast<size_t>(parts) * q.size(), -1.0f);
      std::vector<float> max(static_cast<size_t>(parts) * c.group), sum(max.size());
      for (int p = 0; p < parts; ++p) {
        const int first = c.first_key + p * part_keys;
        const int n = std::min(part_keys, c.n_keys - p * part_keys);
        std::vector<float> scores(static_cast<size_t>(c.group) * ((n + 15) / 16 * 16));
        internal::DecodeQuery query{q.data(),   c.group,  c.head_dim, n,          first % c.block_tokens,
                                    blocks.data() + first / c.block_tokens,  c.block_tokens, 0,
                                    head_floats, scale,   max.data() + p * c.group,  sum.data() + p * c.group};
        kernel(query, scores.data(), outs.data() + p * q.size());
      }
      // Every weighted sum of the parts this CPU runs (their bits differ, their error not).
      for (const auto& [merge, merge_name] : merges) {
        std::vector<float> got(q.size(), -1.0f);
        internal::MergeAttentionParts(parts, c.group, c.head_dim, outs.data(), max.data(), sum.data(), got.data(),
                                      merge);
        double err = 0, norm = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          err += (got[i] - want[i]) * (got[i] - want[i]);
          norm += want[i] * want[i];
        }
        EXPECT_LT(std::sqrt(err / norm), 2e-6) << name << " in parts of " << part_keys << ", merged " << merge_name;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionDecodeTest,
                         ::testing::Values(Case{1, 1, 64, 16}, Case{5, 3, 64, 16}, Case{16, 3, 64, 16},
                                           Case{17, 1, 128, 16}, Case{100, 3, 64, 16}, Case{301, 4, 128, 32},
                                           Case{33, 8, 64, 8}, Case{1, 1, 64, 16, 15}, Case{37, 4, 256, 16, 5},
                                           Case{512, 1, 256, 16, 13}, Case{70, 7, 64, 16, 3}, Case{45, 5, 128, 8}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return "keys" + std::to_string(c.n_keys) + "_group" + std::to_string(c.group) + "_hd" +
                                  std::to_string(c.head_dim) + "_bt" + std::to_string(c.block_tokens) + "_first" +
                                  std::to_string(c.first_key);
                         });

// Rows of several sequences through Attention::Run: alone on two threads (every part of
// a row an item of its own), all in one pass (a row per item), and without a pool give
// the same bits, and match float64.
// The relative RMS error of one row's output (all heads) against float64 softmax attention
// over keys first..position of `seq`.
double RowErrorAgainstFloat64(const AttentionShape& shape, const SequenceKv& seq, const float* q, int position,
                              int window, const float* got) {
  const KvBlockLayout layout{/*n_layers=*/1, shape.n_kv_heads, shape.head_dim, shape.block_tokens};
  const int group = shape.n_heads / shape.n_kv_heads;
  const int first = window > 0 ? std::max(0, position + 1 - window) : 0;
  const auto at = [&](int j, bool values, int g) {
    return seq.blocks[j / shape.block_tokens] + layout.Offset(0, values, g, j % shape.block_tokens);
  };
  double err = 0, norm = 0;
  for (int h = 0; h < shape.n_heads; ++h) {
    const int g = h / group;
    const float* qh = q + h * shape.head_dim;
    std::vector<double> s;
    for (int j = first; j <= position; ++j) {
      double dot = 0;
      for (int d = 0; d < shape.head_dim; ++d) dot += static_cast<double>(qh[d]) * at(j, false, g)[d];
      s.push_back(dot * shape.scale);
    }
    const double max = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& v : s) sum += (v = std::exp(v - max));
    for (int d = 0; d < shape.head_dim; ++d) {
      double want = 0;
      for (int j = first; j <= position; ++j) want += s[j - first] / sum * at(j, true, g)[d];
      const double out = got[h * shape.head_dim + d];
      err += (out - want) * (out - want);
      norm += want * want;
    }
  }
  return std::sqrt(err / norm);
}

TEST(AttentionRunTest, RowResultDoesNotDependOnThePassOrThreads) {
  const AttentionShape shape{/*n_heads=*/6, /*n_kv_heads=*/2, /*head_dim=*/64, /*block_tokens=*/16, 0.125f};
  const KvBlockLayout layout{/*n_layers=*/1, shape.n_kv_heads, shape.head_dim, shape.block_tokens};
  const size_t row_floats = static_cast<size_t>(shape.n_heads) * shape.head_dim;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  // Positions short of, at and past one part, several parts with a ragged last one, and
  // deep enough that a row alone is cut into whole parts (every KV head in one item).
  const std::vector<int32_t> positions = {0, 40, 63, 64, 65, 127, 200, 333, 700};
  ASSERT_GE((700 + Attention::kKeysPerPart) / Attention::kKeysPerPart, Attention::kPartsPerThreadForWholeParts * 2)
      << "the deepest row no longer takes the whole-parts path on two threads";
  std::vector<std::vector<float>> storage;
  std::vector<SequenceKv> seqs(positions.size());
  for (size_t r = 0; r < positions.size(); ++r) {
    for (int b = 0; b <= positions[r] / shape.block_tokens; ++b) {
      storage.emplace_back(layout.block_floats());
      for (float& v : storage.back()) v = dist(rng) * 2.0f;
    }
  }
  for (size_t r = 0, b = 0; r < positions.size(); ++r) {
    for (int i = 0; i <= positions[r] / shape.block_tokens; ++i) seqs[r].blocks.push_back(storage[b++].data());
  }
  std::vector<const SequenceKv*> kv;
  for (const SequenceKv& s : seqs) kv.push_back(&s);
  const int rows = static_cast<int>(positions.size());
  std::vector<float> q(rows * row_floats);
  for (float& v : q) v = dist(rng);
  const Attention attention(shape);
  // Windows of 50 (no row split) and 150 (split rows whose window starts mid-block).
  for (const int window : {0, 50, 150}) {
    SCOPED_TRACE(window);
    std::vector<float> together(q.size()), alone(q.size()), threes(q.size()), serial(q.size());
    ThreadPool pool(2);
    {
      const ScopedThreadPool use(&pool);
      // 9 rows: a row per item. 1 and 3 rows (fewer than twice the threads): (row, KV head,
      // part) items, the later rows' items and slots after the earlier rows', or with parts
      // enough (the deepest row alone, the last three rows together) (row, part) items
      // of every KV head.
      attention.Run(q.data(), rows, positions.data(), kv, window, together.data());
      for (int r = 0; r < rows; ++r) {
        const std::vector<const SequenceKv*> one = {kv[r]};
        attention.Run(q.data() + r * row_floats, 1, &positions[r], one, window, alone.data() + r * row_floats);
      }
      for (int r = 0; r < rows; r += 3) {
        const int n = std::min(3, rows - r);
        const std::vector<const SequenceKv*> some(kv.begin() + r, kv.begin() + r + n);
        attention.Run(q.data() + r * row_floats, n, &positions[r], some, window, threes.data() + r * row_floats);
      }
      // A row of one part among whole parts (row 40 beside row 700): its heads write the
      // output directly.
      {
        const int shallow = 1, deep = rows - 1;
        const std::vector<int32_t> pair_positions = {positions[shallow], positions[deep]};
        const std::vector<const SequenceKv*> pair = {kv[shallow], kv[deep]};
        std::vector<float> pair_q(2 * row_floats), pair_out(2 * row_floats);
        std::copy_n(q.data() + shallow * row_floats, row_floats, pair_q.data());
        std::copy_n(q.data() + deep * row_floats, row_floats, pair_q.data() + row_floats);
        attention.Run(pair_q.data(), 2, pair_positions.data(), pair, window, pair_out.data());
        for (size_t i = 0; i < row_floats; ++i) {
          ASSERT_EQ(pair_out[i], alone[shallow * row_floats + i]) << "row 40 beside row 700";
          ASSERT_EQ(pair_out[row_floats + i], alone[deep * row_floats + i]) << "row 700 beside row 40";
        }
      }
    }
    attention.Run(q.data(), rows, positions.data(), kv, window, serial.data());
    for (size_t i = 0; i < q.size(); ++i) {
      ASSERT_EQ(together[i], alone[i]) << "row " << i / row_floats;
      ASSERT_EQ(together[i], threes[i]) << "row " << i / row_floats;
      ASSERT_EQ(together[i], serial[i]) << "row " << i / row_floats;
    }
    for (int r = 0; r < rows; ++r) {
      EXPECT_LT(RowErrorAgainstFloat64(shape, seqs[r], q.data() + r * row_floats, positions[r], window,
                                       together.data() + r * row_floats),
                2e-6)
          << "position " << positions[r];
    }
  }
}


// A prompt's rows share one sequence: with Attention::kRowsForTransposedKeys rows or more
// the pass transposes its keys once and the rows' scores read them (no horizontal sums).
// Those scores are the decode kernel's bit for bit, so each row equals the same row run
// alone (the decode path) for every group size the kernel tiles (1 to 5 heads per KV
// head), head dimensions 16 to 128, blocks that are not a multiple of 16 tokens, windows
// that start inside a block and part boundaries, whatever the threads; and matches float64.
struct PromptCase {
  int n_kv_heads, group, head_dim, block_tokens, first_position, rows, window;
};

class AttentionPromptTest : public ::testing::TestWithParam<PromptCase> {};

TEST_P(AttentionPromptTest, RowsOfOnePromptEqualTheRowsAlone) {
  const PromptCase c = GetParam();
  const AttentionShape shape{c.n_kv_heads * c.group, c.n_kv_heads, c.head_dim, c.block_tokens,
                             1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  const KvBlockLayout layout{/*n_layers=*/1, shape.n_kv_heads, shape.head_dim, shape.block_tokens};
  const size_t row_floats = static_cast<size_t>(shape.n_heads) * shape.head_dim;
  std::mt19937 rng(11 + c.head_dim + c.group);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int last = c.first_position + c.rows - 1;
  std::vector<std::vector<float>> storage(last / c.block_tokens + 1, std::vector<float>(layout.block_floats()));
  SequenceKv seq;
  for (auto& block : storage) {
    for (float& v : block) v = dist(rng) * 1.5f;
    seq.blocks.push_back(block.data());
  }
  std::vector<int32_t> positions(c.rows);
  for (int r = 0; r < c.rows; ++r) positions[r] = c.first_position + r;
  std::vector<float> q(c.rows * row_floats);
  for (float& v : q) v = dist(rng);
  const Attention attention(shape);
  const std::vector<const SequenceKv*> kv(c.rows, &seq);
  std::vector<float> together(q.size()), serial(q.size()), alone(q.size());
  {
    ThreadPool pool(2);
    const ScopedThreadPool use(&pool);
    attention.Run(q.data(), c.rows, positions.data(), kv, c.window, together.data());
    for (int r = 0; r < c.rows; ++r) {
      attention.Run(q.data() + r * row_floats, 1, &positions[r], {&seq}, c.window, alone.data() + r * row_floats);
    }
  }
  attention.Run(q.data(), c.rows, positions.data(), kv, c.window, serial.data());
  for (size_t i = 0; i < q.size(); ++i) {
    ASSERT_EQ(together[i], alone[i]) << "row " << i / row_floats << ", float " << i % row_floats;
    ASSERT_EQ(together[i], serial[i]) << "row " << i / row_floats;
  }
  double worst = 0;
  for (int r = 0; r < c.rows; r += 7) {
    worst = std::max(worst, RowErrorAgainstFloat64(shape, seq, q.data() + r * row_floats, positions[r], c.window,
                                                   together.data() + r * row_floats));
  }
  EXPECT_LT(worst, 2e-6);
  const CpuInfo& cpu = DetectCpu();
  const bool transposed = (cpu.avx512f && c.head_dim % 16 == 0) || (cpu.avx2 && cpu.fma && c.head_dim % 8 == 0);
  if (!transposed) {
    std::printf("neither AVX-512 with head_dim %% 16 == 0 nor AVX2 with head_dim %% 8 == 0: the rows ran the "
                "portable kernel; transposed keys unchecked\n");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionPromptTest,
    ::testing::Values(PromptCase{3, 3, 64, 16, 0, 150, 0},    // the default model's shape, parts 1..3
                      PromptCase{2, 1, 128, 10, 5, 41, 0},    // one head per KV head, 10-token blocks
                      PromptCase{1, 2, 16, 16, 60, 9, 0},     // the fewest rows that transpose
                      PromptCase{2, 4, 48, 7, 30, 70, 50},    // window inside 7-token blocks
                      PromptCase{1, 5, 80, 16, 100, 33, 150}, // 4 + 1 heads, window past a part
                      PromptCase{4, 2, 64, 32, 0, 8, 0},      // a short prompt from the start
                      PromptCase{2, 3, 64, 16, 200, 41, 150},  // windows from key 51 on, 3 parts each
                      PromptCase{1, 3, 64, 16, 240, 40, 0}));  // keys to 279: transposed in two 256-key items

// Several sequences in one pass, each's rows consecutive (as a batch's prompt chunks are):
// two with enough rows to transpose (the second's keys stored after the first's), one with
// too few between them (read as stored); and the same rows interleaved (none transposed).
TEST(AttentionPromptTest, SequencesInOnePassEachEqualTheirRowsAlone) {
  const AttentionShape shape{/*n_heads=*/6, /*n_kv_heads=*/2, /*head_dim=*/64, /*block_tokens=*/16, 0.125f};
  const KvBlockLayout layout{/*n_layers=*/1, shape.n_kv_heads, shape.head_dim, shape.block_tokens};
  const size_t row_floats = static_cast<size_t>(shape.n_heads) * shape.head_dim;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int first_position[3] = {70, 0, 100}, count[3] = {20, 9, 3};
  std::vector<std::vector<float>> storage;
  SequenceKv seqs[3];
  for (int s = 0; s < 3; ++s) {
    for (int b = 0; b <= (first_position[s] + count[s] - 1) / shape.block_tokens; ++b) {
      storage.emplace_back(layout.block_floats());
      for (float& v : storage.back()) v = dist(rng);
    }
  }
  for (int s = 0, b = 0; s < 3; ++s) {
    for (int i = 0; i <= (first_position[s] + count[s] - 1) / shape.block_tokens; ++i) seqs[s].blocks.push_back(storage[b++].data());
  }
  for (const bool interleaved : {false, true}) {
    SCOPED_TRACE(interleaved ? "interleaved" : "consecutive");
    std::vector<int32_t> positions;
    std::vector<const SequenceKv*> kv;
    int next[3] = {0, 0, 0};
    while (positions.size() < 32) {
      for (const int s : {0, 2, 1}) {
        while (next[s] < count[s]) {
          positions.push_back(first_position[s] + next[s]++);
          kv.push_back(&seqs[s]);
          if (interleaved) break;
        }
      }
    }
    const int rows = static_cast<int>(positions.size());
    std::vector<float> q(rows * row_floats);
    for (float& v : q) v = dist(rng);
    const Attention attention(shape);
    std::vector<float> together(q.size()), alone(q.size());
    ThreadPool pool(2);
    const ScopedThreadPool use(&pool);
    attention.Run(q.data(), rows, positions.data(), kv, /*window=*/0, together.data());
    for (int r = 0; r < rows; ++r) {
      attention.Run(q.data() + r * row_floats, 1, &positions[r], {kv[r]}, 0, alone.data() + r * row_floats);
    }
    for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(together[i], alone[i]) << "row " << i / row_floats;
  }
}

}  // namespace
}  // namespace hetero
