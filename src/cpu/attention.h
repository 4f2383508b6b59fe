// Causal grouped-query attention over the paged KV cache, in f32: every row (prompt rows
// and decode steps alike) by the same per-row kernel (attention_kernels.h), a prompt's
// (KV head, row) items, head by head (or, for a decode step, its KV heads and parts of its
// keys) spread over the current thread pool (thread_pool.h). A row's result depends only on its query
// and its sequence's keys, never on which other rows share the pass, so a prompt encoded
// in one pass, in chunks, or after attaching shared KV blocks gives bit-identical outputs
// (with the native quantized matmuls, whose rows are independent too). This replaced
// oneDNN matmuls for prompt chunks, whose summation order changed with the chunk's row
// count; the per-row kernel was also faster at every prompt length measured
// (docs/PERFORMANCE.md). With the AVX-512 and AVX2 kernels, a prompt's rows (a sequence
// with kRowsForTransposedKeys rows or more in the pass) read their keys from a copy
// transposed once per pass: the scores come from
// broadcast multiply-adds and a vertical summation tree that reproduces the per-row
// kernel's horizontal sums exactly, so which form a row used never shows in its bits.
#ifndef HETERO_CPU_ATTENTION_H_
#define HETERO_CPU_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "src/cpu/attention_kernels.h"

namespace hetero {

struct AttentionShape {
  int n_heads;
  int n_kv_heads;
  int head_dim;
  int block_tokens;
  float scale;  // multiplies q·k (usually 1/sqrt(head_dim))
};

// Where one sequence's keys and values for one layer live: a pointer per KV block to the
// layer's [k|v][kv head][slot][dim] region.
struct SequenceKv {
  std::vector<const float*> blocks;
};


class Attention {
 public:
  // A row attending to more keys than this is cut into parts of this many (the last one
  // shorter), each part's softmax taken alone and the parts merged by their maxima and sums
  // (flash-decoding). The cut depends only on the row's own keys, so the row's result does
  // not depend on the pass; a decode step's parts spread over the threads, where its KV
  // heads alone (often fewer than twice the threads) would leave threads idle.
  static constexpr int kKeysPerPart = 64;
  // Deep in a context a decode step reads its keys and values from memory, and a paged
  // block holds them as one run of block_tokens x head_dim floats per KV head and layer
  // (4 KiB for 16 tokens of 64), a whole block of every layer apart: from runs that short
  // the hardware prefetchers fetch about a third of what the memory gives a stream. So
  // where a step has at least this many parts per thread, each thread takes whole parts,
  // every KV head, and asks for their blocks' layer regions (contiguous: keys then values
  // of every KV head) before it reads them, up to kMaxPartPrefetchBytes. Measured on an AMD
  // EPYC (Zen 4, 2 threads), BM_AttentionDecodeDeep at 4096 keys: 10.9-13.7 -> 16.7-18.1
  // GB/s; the default model's tg128 at depth 2048: 81.0 -> 106.2 tok/s (docs/PERFORMANCE.md).
  static constexpr int kPartsPerThreadForWholeParts = 4;
  // The most a whole part asks for before it starts (the default model's part: 96-120 KiB,
  // granite-3.0-1b-a400m's 256-320 KiB): a model with more or wider KV heads reads the rest
  // as it comes rather than flooding a 1 MiB L2 that the other thread's part shares.
  static constexpr size_t kMaxPartPrefetchBytes = size_t{384} << 10;

  explicit Attention(const AttentionShape& shape) : s_(shape) {}

  // q: rows x (n_heads * head_dim); out: same shape. Row r attends to positions
  // 0..positions[r] of kv[r], or with `window` > 0 to the last `window` of them.
  void Run(const float* q, int rows, const int32_t* positions, const std::vector<const SequenceKv*>& kv,
           int window, float* out) const;

 private:
  // A sequence with at least this many rows in a pass has its keys transposed once for the
  // pass (TransposedKeys), which its rows' scores then read without horizontal sums.
  static constexpr int kRowsForTransposedKeys = 8;
  // At most this much transposed keys per pass (per calling thread, kept between passes):
  // 16 MiB holds about 4000 keys of 8 KV heads of 128 dimensions (a sequence's span starts
  // at its first key attended to, so a later chunk of a long prompt counts every key before
  // it). Past it rows read the keys as stored: slower, same bits.
  static constexpr size_t kMaxTransposedBytes = size_t{16} << 20;

  // The keys one row attends to: n_keys from position `first`, in `parts` parts.
  struct RowKeys {
    int first;
    int n_keys;
    int parts;
  };
  // One sequence's keys first_key .. first_key + ld - 1 for one pass, transposed per KV head:
  // head g's key first_key + j, dimension d at kt[(g * head_dim + d) * ld + j].
  struct TransposedKeys {
    float* kt = nullptr;
    size_t ld = 0;
    int first_key = 0;
  };
  // Rows begin..end - 1 of a pass, one sequence's, and its keys transposed up to end_key.
  struct RowRun {
    int begin, end;
    TransposedKeys keys;
    int end_key;
  };
  // Transposes the keys of each run of kRowsForTransposedKeys or more consecutive rows of
  // one sequence (within kMaxTransposedBytes); returns those runs (none for a decode step).
  std::vector<RowRun> TransposeKeysOfRuns(int rows, const int32_t* positions, const std::vector<const SequenceKv*>& kv,
                                          int window) const;
  // The one place that picks the kernels: AVX-512 where the CPU has it and head_dim % 16 == 0,
  // else AVX2 and FMA where head_dim % 8 == 0, else portable.
  internal::AttentionKernels Kernels() const;
  bool Simd() const;  // Kernels() is AVX-512 or AVX2 (and transposed keys may be used)
  RowKeys KeysOf(int position, int window) const;
  // KV head g's query heads over part `part` of the row's keys. `out`: group x head_dim;
  // max and sum: group floats each, or null when the row is one part (`out` normalised).
  // `kt`: the row's sequence's transposed keys, or null.
  void AttendPart(const float* q, const SequenceKv& kv, const TransposedKeys* kt, const RowKeys& keys, int g,
                  int part, float* out, float* max, float* sum) const;
  // KV head g's query heads of one row over all its keys (its parts merged): the head's
  // share of the row's output `out` (n_heads x head_dim).
  void RunRowHead(const float* q, int position, const SequenceKv& kv, const TransposedKeys* kt, int window, int g,
                  float* out) const;
  void Merge(int parts, const float* outs, const float* max, const float* sum, float* out) const;
  // Fewer rows than the threads can share: each (row, KV head, part) is an item, or deep in
  // a context each (row, part) with every KV head (kPartsPerThreadForWholeParts).
  void RunParts(const float* q, int rows, const int32_t* positions, const std::vector<const SequenceKv*>& kv,
                int window, float* out) const;

  AttentionShape s_;
};

}  // namespace hetero

#endif  // HETERO_CPU_ATTENTION_H_
