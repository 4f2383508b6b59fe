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
                         float* out, AttentionKernels kernels) {
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
    for (int p = 0; p < parts; ++p) weight[p] *= inv;
    const float* first = outs + static_cast<size_t>(h) * head_dim;
    const size_t part_stride = static_cast<size_t>(group) * head_dim;
    float* o = out + static_cast<size_t>(h) * head_dim;
    if (kernels == AttentionKernels::kAvx512) {
      WeightedPartsAvx512(parts, weight.data(), first, part_stride, head_dim, o);
      continue;
    }
    if (kernels == AttentionKernels::kAvx2) {
      WeightedPartsAvx2(parts, weight.data(), first, part_stride, head_dim, o);
      continue;
    }
    std::fill(o, o + head_dim, 0.0f);
    for (int p = 0; p < parts; ++p) {
      const float w = weight[p];
      const float* part = first + p * part_stride;
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

namespace {
bool HasAvx512() {
  static const bool avx512 = DetectCpu().avx512f;
  return avx512;
}
bool HasAvx2() {
  static const bool avx2 = DetectCpu().avx2 && DetectCpu().fma;
  return avx2;
}
}  // namespace

internal::AttentionKernels Attention::Kernels() const {
  using internal::AttentionKernels;
  if (HasAvx512() && s_.head_dim % 16 == 0) return AttentionKernels::kAvx512;
  if (HasAvx2() && s_.head_dim % 8 == 0) return AttentionKernels::kAvx2;
  return AttentionKernels::kPortable;
}

bool Attention::Simd() const { return Kernels() != internal::AttentionKernels::kPortable; }

void Attention::Merge(int parts, const float* outs, const float* max, const float* sum, float* out) const {
  internal::MergeAttentionParts(parts, s_.n_heads / s_.n_kv_heads, s_.head_dim, outs, max, sum, out, Kernels());
}

void Attention::AttendPart(const float* q, const SequenceKv& kv, const TransposedKeys* kt, const RowKeys& keys,
                           int g, int part, float* out, float* max, float* sum) const {
  const int hd = s_.head_dim;
  const int group = s_.n_heads / s_.n_kv_heads;
  // Offsets within one layer's region of a block (src/runtime/kv_layout.h).
  const KvBlockLayout layer{/*n_layers=*/1, s_.n_kv_heads, hd, s_.block_tokens};
  const internal::AttentionKernels kernels = Kernels();
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
  if (kt != nullptr) {
    query.kt = kt->kt + static_cast<size_t>(g) * hd * kt->ld + (first - kt->first_key);
    query.kt_ld = kt->ld;
  }
  switch (kernels) {
    case internal::AttentionKernels::kAvx512: internal::AttendDecodeAvx512(query, scores, out); break;
    case internal::AttentionKernels::kAvx2: internal::AttendDecodeAvx2(query, scores, out); break;
    case internal::AttentionKernels::kPortable: internal::AttendDecodePortable(query, scores, out); break;
  }
}

void Attention::RunRowHead(const float* q, int position, const SequenceKv& kv, const TransposedKeys* kt, int window,
                           int g, float* out) const {
  const int group = s_.n_heads / s_.n_kv_heads;
  const size_t head_floats = static_cast<size_t>(group) * s_.head_dim;
  const RowKeys keys = KeysOf(position, window);
  float* head_out = out + g * head_floats;
  if (keys.parts == 1) {
    AttendPart(q, kv, kt, keys, g, 0, head_out, nullptr, nullptr);
    return;
  }
  thread_local std::vector<float> parts;
  parts.resize(static_cast<size_t>(keys.parts) * (head_floats + 2 * group));
  float* outs = parts.data();
  float* max = outs + keys.parts * head_floats;
  float* sum = max + keys.parts * group;
  for (int p = 0; p < keys.parts; ++p) {
    AttendPart(q, kv, kt, keys, g, p, outs + p * head_floats, max + p * group, sum + p * group);
  }
  Merge(keys.parts, outs, max, sum, head_out);
}

void Attention::RunParts(const float* q, int rows, const int32_t* positions, const std::vector<const SequenceKv*>& kv,
                         int window, float* out) const {
  const int group = s_.n_heads / s_.n_kv_heads;
  const size_t head_floats = static_cast<size_t>(group) * s_.head_dim;
  const size_t row_floats = static_cast<size_t>(s_.n_heads) * s_.head_dim;
  absl::InlinedVector<RowKeys, 8> keys(rows);
  absl::InlinedVector<int, 8> slot(rows);
  int parts = 0, slots = 0;
  for (int r = 0; r < rows; ++r) {
    keys[r] = KeysOf(positions[r], window);
    slot[r] = slots;
    parts += keys[r].parts;
    if (keys[r].parts > 1) slots += s_.n_kv_heads * keys[r].parts;
  }
  // An item is one part of a row with every KV head (a block's keys and values of one
  // layer, every head, are one contiguous run: see kPartsPerThreadForWholeParts), where
  // there are parts enough to keep the threads busy; otherwise one KV head of one part.
  // Either way every (head, part) runs once with the same arithmetic, so the results do not
  // depend on the choice.
  const ThreadPool* pool = CurrentThreadPool();
  const bool whole_parts = pool != nullptr && parts >= kPartsPerThreadForWholeParts * pool->threads();
  const int heads_per_item = whole_parts ? s_.n_kv_heads : 1;
  // Row r's items start at start[r]; its item j = i - start[r] is KV heads from
  // j / keys[r].parts x heads_per_item, part j % keys[r].parts. A part of a split row writes
  // its unnormalised output and statistics at slot[r] + head x keys[r].parts + part.
  absl::InlinedVector<int, 9> start(rows + 1);
  int items = 0;
  for (int r = 0; r < rows; ++r) {
    start[r] = items;
    items += keys[r].parts * (s_.n_kv_heads / heads_per_item);
  }
  start[rows] = items;
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(slots) * (head_floats + 2 * group));
  float* outs = scratch.data();
  float* max = outs + slots * head_floats;
  float* sum = max + static_cast<size_t>(slots) * group;
  const size_t layer_bytes =
      KvBlockLayout{/*n_layers=*/1, s_.n_kv_heads, s_.head_dim, s_.block_tokens}.layer_floats() * sizeof(float);
  ParallelFor(items, ThreadPool::Schedule::kDynamic, [&](int i) {
    const int r = static_cast<int>(std::upper_bound(start.begin(), start.end(), i) - start.begin()) - 1;
    const int n_parts = keys[r].parts;
    const int first_head = (i - start[r]) / n_parts * heads_per_item;
    const int p = (i - start[r]) % n_parts;
    if (whole_parts) {
      // Ask for the layer regions (keys then values of every KV head, kv_layout.h) of the
      // blocks holding the part's keys, before any head reads them.
      const int first = keys[r].first + p * kKeysPerPart;
      const int last = std::min(first + kKeysPerPart, keys[r].first + keys[r].n_keys) - 1;
      size_t asked = 0;
      for (int b = first / s_.block_tokens; b <= last / s_.block_tokens && asked < kMaxPartPrefetchBytes; ++b) {
        const char* region = reinterpret_cast<const char*>(kv[r]->blocks[b]);
        for (size_t line = 0; line < layer_bytes; line += 64) __builtin_prefetch(region + line, 0, 3);
        asked += layer_bytes;
      }
    }
    const float* qr = q + r * row_floats;
    for (int g = first_head; g < first_head + heads_per_item; ++g) {
      if (n_parts == 1) {
        AttendPart(qr, *kv[r], nullptr, keys[r], g, 0, out + r * row_floats + g * head_floats, nullptr, nullptr);
      } else {
        const size_t k = static_cast<size_t>(slot[r]) + static_cast<size_t>(g) * n_parts + p;
        AttendPart(qr, *kv[r], nullptr, keys[r], g, p, outs + k * head_floats, max + k * group, sum + k * group);
      }
    }
  });
  for (int r = 0; r < rows; ++r) {
    if (keys[r].parts == 1) continue;
    for (int g = 0; g < s_.n_kv_heads; ++g) {
      const size_t k = static_cast<size_t>(slot[r]) + static_cast<size_t>(g) * keys[r].parts;
      Merge(keys[r].parts, outs + k * head_floats, max + k * group, sum + k * group,
            out + r * row_floats + g * head_floats);
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
  const std::vector<RowRun> runs = TransposeKeysOfRuns(rows, positions, kv, window);
  // Items are (KV head, row), head-major: a thread's run of items reads one head's keys
  // and values (a 512-token prompt of the default model: 260 KiB of them, transposed keys
  // included, against 780 KiB for all three heads), which then stay in its L2 from row to
  // row. Later rows of a prompt attend to more keys: dynamic scheduling balances them.
  ParallelFor(rows * s_.n_kv_heads, ThreadPool::Schedule::kDynamic, [&](int i) {
    const int g = i / rows, r = i % rows;
    const TransposedKeys* kt = nullptr;
    for (const RowRun& run : runs) {
      if (r >= run.begin && r < run.end) kt = &run.keys;
    }
    RunRowHead(q + r * row_floats, positions[r], *kv[r], kt, window, g, out + r * row_floats);
  });
}

std::vector<Attention::RowRun> Attention::TransposeKeysOfRuns(int rows, const int32_t* positions,
                                                              const std::vector<const SequenceKv*>& kv,
                                                              int window) const {
  std::vector<RowRun> runs;
  if (!Simd() || rows < kRowsForTransposedKeys) return runs;  // a decode step: nothing to share
  // Runs of consecutive rows of one sequence (a prompt chunk's rows are consecutive), each
  // with the span of keys its rows attend to; ld: that span in whole 16-key vectors plus
  // sixteen spare columns (a part's last sixteen keys may reach past the last key).
  size_t floats = 0;
  absl::InlinedVector<size_t, 4> offsets;  // each run's place in the storage, in floats
  for (int begin = 0, end; begin < rows; begin = end) {
    int first = KeysOf(positions[begin], window).first, last = positions[begin];
    for (end = begin + 1; end < rows && kv[end] == kv[begin]; ++end) {
      first = std::min(first, KeysOf(positions[end], window).first);
      last = std::max(last, positions[end]);
    }
    if (end - begin < kRowsForTransposedKeys) continue;
    const size_t ld = static_cast<size_t>(last + 1 - first + 15) / 16 * 16 + 16;
    const size_t need = static_cast<size_t>(s_.n_kv_heads) * s_.head_dim * ld;
    // Past the cap (a long context's keys) the rows read the keys as stored: same bits.
    if ((floats + need) * sizeof(float) > kMaxTransposedBytes) continue;
    runs.push_back(RowRun{begin, end, TransposedKeys{nullptr, ld, first}, last + 1});
    offsets.push_back(floats);
    floats += need;
  }
  if (runs.empty()) return runs;
  // 64-byte aligned, as are the rows (ld a multiple of 16 floats): without a window, whose
  // parts start anywhere, a 16-key load never splits a cache line. Kept per calling thread.
  thread_local std::vector<float> storage;
  if (storage.size() < floats + 16) storage.resize(floats + 16);
  float* base = storage.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  for (size_t i = 0; i < runs.size(); ++i) runs[i].keys.kt = base + offsets[i];
  // Items: (run, KV head, 256 keys).
  struct Item {
    int run, g, first, n;
  };
  absl::InlinedVector<Item, 16> items;
  constexpr int kKeysPerItem = 256;
  for (size_t i = 0; i < runs.size(); ++i) {
    for (int g = 0; g < s_.n_kv_heads; ++g) {
      for (int k = runs[i].keys.first_key; k < runs[i].end_key; k += kKeysPerItem) {
        items.push_back(Item{static_cast<int>(i), g, k, std::min(kKeysPerItem, runs[i].end_key - k)});
      }
    }
  }
  const KvBlockLayout layer{/*n_layers=*/1, s_.n_kv_heads, s_.head_dim, s_.block_tokens};
  ParallelFor(static_cast<int>(items.size()), ThreadPool::Schedule::kDynamic, [&](int it) {
    const Item& item = items[static_cast<size_t>(it)];
    const RowRun& run = runs[static_cast<size_t>(item.run)];
    const TransposedKeys& t = run.keys;
    float* head = t.kt + static_cast<size_t>(item.g) * s_.head_dim * t.ld;
    const size_t column = static_cast<size_t>(item.first - t.first_key);
    const float* const* blocks = kv[static_cast<size_t>(run.begin)]->blocks.data();
    const size_t k_offset = layer.Offset(0, /*values=*/false, item.g, 0);
    if (Kernels() == internal::AttentionKernels::kAvx512) {
      internal::TransposeKeysAvx512(blocks, s_.block_tokens, k_offset, s_.head_dim, item.first, item.n, head + column,
                                    t.ld);
    } else {
      internal::TransposeKeysAvx2(blocks, s_.block_tokens, k_offset, s_.head_dim, item.first, item.n, head + column,
                                  t.ld);
    }
    // The spare columns after a head's last key (read, never used, by a part's last sixteen).
    if (item.first + item.n == run.end_key) {
      for (int d = 0; d < s_.head_dim; ++d) std::fill(head + d * t.ld + column + item.n, head + (d + 1) * t.ld, 0.0f);
    }
  });
  return runs;
}

}  // namespace hetero
