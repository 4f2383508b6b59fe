#include "src/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/container/inlined_vector.h"

#include "src/cpu/cpu_features.h"
#include "src/cpu/thread_pool.h"
#include "src/runtime/kv_layout.h"

namespace hetero {
namespace internal {

void AttendDecodePortable(const DecodeQuery& query, float* scores, float* out) {
  const int hd = query.head_dim;
  const int n = query.n_keys;
  const int bt = query.block_tokens;
  const int f = query.first_key;
  const size_t ld = static_cast<size_t>(n + 15) / 16 * 16;
  for (int h = 0; h < query.group; ++h) {
    const float* qv = query.q + static_cast<size_t>(h) * hd;
    float* s = scores + h * ld;
    float max_score = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < n; ++j) {
      const float* k = query.blocks[(j + f) / bt] + query.k_offset + static_cast<size_t>((j + f) % bt) * hd;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < hd; ++d) dot += qv[d] * k[d];
      s[j] = dot * query.scale;
      max_score = std::max(max_score, s[j]);
    }
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - max_score);
      sum += s[j];
    }
    if (query.part_max != nullptr) {
      query.part_max[h] = max_score;
      query.part_sum[h] = sum;
    }
    const float inv = query.part_max != nullptr ? 1.0f : 1.0f / sum;
    float* o = out + static_cast<size_t>(h) * hd;
    std::fill(o, o + hd, 0.0f);
    for (int j = 0; j < n; ++j) {
      const float* v = query.blocks[(j + f) / bt] + query.v_offset + static_cast<size_t>((j + f) % bt) * hd;
      const float p = s[j];
#pragma omp simd
      for (int d = 0; d < hd; ++d) o[d] += p * v[d];
    }
    for (int d = 0; d < hd; ++d) o[d] *= inv;
  }
}

void MergeAttentionParts(int parts, int group, int head_dim, const float* outs, const float* max, const float* sum,
                         float* out) {
  absl::InlinedVector<float, 16> weight(parts);
  for (int h = 0; h < group; ++h) {
    float top = -std::numeric_limits<float>::infinity();
    for (int p = 0; p < parts; ++p) top = std::max(top, max[p * group + h]);
    float total = 0.0f;
    for (int p = 0; p < parts; ++p) {
      weight[p] = std::exp(max[p * group + h] - top);
      total += weight[p] * sum[p * group + h];
    }
    const float inv = 1.0f / total;
    float* o = out + static_cast<size_t>(h) * head_dim;
    std::fill(o, o + head_dim, 0.0f);
    for (int p = 0; p < parts; ++p) {
      const float w = weight[p] * inv;
      const float* part = outs + (static_cast<size_t>(p) * group + h) * head_dim;
      for (int d = 0; d < head_dim; ++d) o[d] += w * part[d];
    }
  }
}

}  // namespace internal

Attention::RowKeys Attention::KeysOf(int position, int window) const {
  // A sliding window sees positions position - window + 1 .. position.
  const int first = window > 0 ? std::max(0, position + 1 - window) : 0;
  const int n_keys = position + 1 - first;
  return RowKeys{first, n_keys, (n_keys + kKeysPerPart - 1) / kKeysPerPart};
}

void Attention::AttendPart(const float* q, const SequenceKv& kv, const RowKeys& keys, int g, int part, float* out,
                           float* max, float* sum) const {
  const int hd = s_.head_dim;
  const int group = s_.n_heads / s_.n_kv_heads;
  // Offsets within one layer's region of a block (src/runtime/kv_layout.h).
  const KvBlockLayout layer{/*n_layers=*/1, s_.n_kv_heads, hd, s_.block_tokens};
  static const bool avx512 = DetectCpu().avx512f;
  const bool simd = avx512 && hd % 16 == 0;
  const int first = keys.first + part * kKeysPerPart;
  const int n_keys = std::min(kKeysPerPart, keys.n_keys - part * kKeysPerPart);
  const int first_block = first / s_.block_tokens;
  // Scratch per thread, grown to the longest part, 64-byte aligned (the kernel's 16-float
  // stores then never split cache lines).
  thread_local std::vector<float> scratch;
  const size_t floats = static_cast<size_t>(group) * ((n_keys + 15) / 16 * 16);
  if (scratch.size() < floats + 16) scratch.resize(floats + 16);
  float* scores = scratch.data();
  while (reinterpret_cast<uintptr_t>(scores) % 64 != 0) ++scores;
  internal::DecodeQuery query{q + static_cast<size_t>(g) * group * hd,
                              group,
                              hd,
                              n_keys,
                              first - first_block * s_.block_tokens,
                              kv.blocks.data() + first_block,
                              s_.block_tokens,
                              layer.Offset(0, /*values=*/false, g, 0),
                              layer.Offset(0, /*values=*/true, g, 0),
                              s_.scale,
                              max,
                              sum};
  if (simd) {
    internal::AttendDecodeAvx512(query, scores, out);
  } else {
    internal::AttendDecodePortable(query, scores, out);
  }
}

void Attention::RunRow(const float* q, int position, const SequenceKv& kv, int window, float* out) const {
  const int hd = s_.head_dim;
  const int group = s_.n_heads / s_.n_kv_heads;
  const RowKeys keys = KeysOf(position, window);
  const size_t head_floats = static_cast<size_t>(group) * hd;
  if (keys.parts == 1) {
    for (int g = 0; g < s_.n_kv_heads; ++g) AttendPart(q, kv, keys, g, 0, out + g * head_floats, nullptr, nullptr);
    return;
  }
  thread_local std::vector<float> parts;
  parts.resize(static_cast<size_t>(keys.parts) * (head_floats + 2 * group));
  float* outs = parts.data();
  float* max = outs + keys.parts * head_floats;
  float* sum = max + keys.parts * group;
  for (int g = 0; g < s_.n_kv_heads; ++g) {
    for (int p = 0; p < keys.parts; ++p) {
      AttendPart(q, kv, keys, g, p, outs + p * head_floats, max + p * group, sum + p * group);
    }
    internal::MergeAttentionParts(keys.parts, group, hd, outs, max, sum, out + g * head_floats);
  }
}

void Attention::RunParts(const float* q, int rows, const int32_t* positions, const std::vector<const SequenceKv*>& kv,
                         int window, float* out) const {
  const int group = s_.n_heads / s_.n_kv_heads;
  const size_t head_floats = static_cast<size_t>(group) * s_.head_dim;
  const size_t row_floats = static_cast<size_t>(s_.n_heads) * s_.head_dim;
  // Item i of row r is KV head (i - start[r]) / parts, part (i - start[r]) % parts; a part
  // of a split row writes its unnormalised output and statistics at slot[r] + that index.
  absl::InlinedVector<RowKeys, 8> keys(rows);
  absl::InlinedVector<int, 9> start(rows + 1);
  absl::InlinedVector<int, 8> slot(rows);
  int items = 0, slots = 0;
  for (int r = 0; r < rows; ++r) {
    keys[r] = KeysOf(positions[r], window);
    start[r] = items;
    slot[r] = slots;
    items += s_.n_kv_heads * keys[r].parts;
    if (keys[r].parts > 1) slots += s_.n_kv_heads * keys[r].parts;
  }
  start[rows] = items;
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(slots) * (head_floats + 2 * group));
  float* outs = scratch.data();
  float* max = outs + slots * head_floats;
  float* sum = max + static_cast<size_t>(slots) * group;
  ParallelFor(items, ThreadPool::Schedule::kDynamic, [&](int i) {
    const int r = static_cast<int>(std::upper_bound(start.begin(), start.end(), i) - start.begin()) - 1;
    const int g = (i - start[r]) / keys[r].parts;
    const int p = (i - start[r]) % keys[r].parts;
    const float* qr = q + r * row_floats;
    if (keys[r].parts == 1) {
      AttendPart(qr, *kv[r], keys[r], g, 0, out + r * row_floats + g * head_floats, nullptr, nullptr);
    } else {
      const size_t k = static_cast<size_t>(slot[r]) + (i - start[r]);
      AttendPart(qr, *kv[r], keys[r], g, p, outs + k * head_floats, max + k * group, sum + k * group);
    }
  });
  for (int r = 0; r < rows; ++r) {
    if (keys[r].parts == 1) continue;
    for (int g = 0; g < s_.n_kv_heads; ++g) {
      const size_t k = static_cast<size_t>(slot[r]) + static_cast<size_t>(g) * keys[r].parts;
      internal::MergeAttentionParts(keys[r].parts, group, s_.head_dim, outs + k * head_floats, max + k * group,
                                    sum + k * group, out + r * row_floats + g * head_floats);
    }
  }
}

void Attention::Run(const float* q, int rows, const int32_t* positions, const std::vector<const SequenceKv*>& kv,
                    int window, float* out) const {
  const ThreadPool* pool = CurrentThreadPool();
  if (pool != nullptr && rows < 2 * pool->threads()) {
    RunParts(q, rows, positions, kv, window, out);
    return;
  }
  const size_t row_floats = static_cast<size_t>(s_.n_heads) * s_.head_dim;
  // Later rows of a prompt attend to more keys: dynamic scheduling balances them.
  ParallelFor(rows, ThreadPool::Schedule::kDynamic,
              [&](int r) { RunRow(q + r * row_floats, positions[r], *kv[r], window, out + r * row_floats); });
}

}  // namespace hetero
