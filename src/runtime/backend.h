// The interface every device backend implements (CPU in src/cpu, CUDA in src/gpu): weights
// prepared once at creation, sequences with their own KV cache, prefill of a prompt and
// batched single-token decode. src/runtime talks to devices only through this class.
#ifndef HETERO_RUNTIME_BACKEND_H_
#define HETERO_RUNTIME_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "hetero/engine.h"
#include "hetero/transfer.h"
#include "src/runtime/sampler.h"

namespace hetero {

struct BackendInfo {
  DeviceKind kind = DeviceKind::kCpu;
  std::string name;            // "cpu (AMD EPYC, 1 thread)"
  std::string weight_format;   // how matrices are held, e.g. "native Q4_1/Q8_0 + bf16 prefill"
  int threads = 1;
  uint64_t weight_bytes = 0;   // memory the prepared weights occupy beyond the mapped file
  int max_sequences = 0;
  int max_context = 0;         // tokens per sequence
};

using SequenceId = int32_t;

struct LoraAdapter;  // src/runtime/lora.h

// The LoRA adapter a sequence's matrix products apply, with the user's scale. A sequence's
// KV depends on it, so sequences share KV blocks only with sequences of the same adapter and
// scale (kv_domain).
struct SequenceAdapter {
  std::shared_ptr<const LoraAdapter> adapter;  // null: none
  float scale = 1.0f;

  bool active() const { return adapter != nullptr; }
  // 0 without an adapter; otherwise a value naming this adapter object and scale.
  uint64_t kv_domain() const;
};

// A sequence's KV cache copied to host memory (swap-out while its task waits on a tool, or
// a CPU prefill on its way to the GPU). The CPU and CUDA backends share one block layout,
// so either reads what the other saved (the KV handoff).
struct SavedSequence {
  int tokens = 0;
  HostBuffer data;  // pinned where a GPU is present (include/hetero/transfer.h)
  // The token ids, when the backend knew them (prefix sharing); empty otherwise. SwapIn
  // with them makes the copy's full blocks shareable again.
  std::vector<int32_t> token_ids;
  // The adapter the KV was computed with; SwapIn gives the new sequence the same one.
  SequenceAdapter adapter;
};

// A backend's KV cache in tokens: blocks shared by several sequences count once in
// used_tokens; shared_tokens is what sharing saves; cached_tokens are in shared-prefix
// blocks no sequence holds (kept until the pool needs them).
struct KvCacheStats {
  int capacity_tokens = 0;
  int used_tokens = 0;
  int logical_tokens = 0;  // the sum of live sequences' lengths (shared blocks once per holder)
  int shared_tokens = 0;
  int cached_tokens = 0;
  int64_t attached_tokens_total = 0;  // prompt tokens taken from shared blocks so far
};

// A mixture-of-experts model's routed expert evaluations (token x chosen expert) for one
// sequence since it was created, by the device that ran them, and the traffic of those the
// GPU left to the host: bytes over the bus and the time the device waited for them.
struct ExpertTraffic {
  int64_t cpu_evaluations = 0;
  int64_t gpu_evaluations = 0;
  uint64_t bytes_moved = 0;
  double wait_ms = 0;
  ExpertTraffic operator-(const ExpertTraffic& o) const {
    return {cpu_evaluations - o.cpu_evaluations, gpu_evaluations - o.gpu_evaluations, bytes_moved - o.bytes_moved,
            wait_ms - o.wait_ms};
  }
};

// Adds `t` to a stage report's expert counts (include/hetero/engine.h's StageReport).
inline void AddExpertTraffic(const ExpertTraffic& t, StageReport& report) {
  report.cpu_expert_evaluations += t.cpu_evaluations;
  report.gpu_expert_evaluations += t.gpu_evaluations;
  report.expert_bytes_moved += t.bytes_moved;
  report.expert_wait_ms += t.wait_ms;
}

// Tokens to append to one sequence in a batched step.
struct SequenceChunk {
  SequenceId seq;
  absl::Span<const int32_t> tokens;
  // The tokens were sampled from this backend's logits (a decode step), not a prompt's. The
  // CPU backend rounds a generated token's activations more finely (two int8 passes where a
  // prompt's take one: src/cpu/quant_matmul.h), so how a token is computed depends on its
  // role, never on how a prompt was cut into steps or which sequences share a step.
  bool generated = false;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const BackendInfo& info() const = 0;
  virtual int vocab_size() const = 0;

  // A new, empty sequence (its KV cache grows as tokens are added).
  virtual absl::StatusOr<SequenceId> NewSequence() = 0;
  // Releases a sequence and its KV memory. Unknown ids are ignored.
  virtual void FreeSequence(SequenceId seq) = 0;
  // Tokens the sequence holds.
  virtual absl::StatusOr<int> SequenceLength(SequenceId seq) const = 0;
  // LoRA adapters (src/runtime/lora.h): whether this backend applies them, and the adapter
  // of a sequence, set while it is empty (FailedPrecondition otherwise; Unimplemented where
  // the backend cannot apply adapters).
  virtual bool can_apply_adapters() const { return false; }
  virtual absl::Status SetSequenceAdapter(SequenceId seq, const SequenceAdapter& adapter) {
    (void)seq;
    if (!adapter.active()) return absl::OkStatus();
    return absl::UnimplementedError(absl::StrCat(info().name, " cannot apply LoRA adapters"));
  }
  // Keeps the first `length` tokens (prefix reuse, rollback).
  virtual absl::Status TruncateSequence(SequenceId seq, int length) = 0;
  // Cross-sequence prefix sharing: appends to `seq` the KV blocks another sequence already
  // encoded for the next tokens of `tokens` (the sequence must hold its first
  // SequenceLength tokens), whole blocks only, at most `max_length` tokens in all. Returns
  // the tokens attached; backends without sharing attach none.
  virtual absl::StatusOr<int> AttachCachedPrefix(SequenceId seq, absl::Span<const int32_t> tokens, int max_length) {
    (void)seq, (void)tokens, (void)max_length;
    return 0;
  }

  // ExpertTraffic of a live sequence (zeros for dense models and unknown ids).
  virtual ExpertTraffic expert_traffic(SequenceId seq) const {
    (void)seq;
    return {};
  }

  // How often each routed expert was chosen on this backend since load, per mixture-of-
  // experts layer (those it evaluated elsewhere, a GPU's host experts, included). Safe to
  // call while the backend runs a step (the counts may then lag by that step).
  virtual ExpertUsage expert_usage() const { return {}; }

  // KV accounting, in tokens.
  virtual int kv_capacity_tokens() const = 0;
  virtual int kv_used_tokens() const = 0;  // tokens held by live sequences
  virtual size_t kv_bytes_per_token() const = 0;
  virtual KvCacheStats kv_cache_stats() const {
    KvCacheStats s;
    s.capacity_tokens = kv_capacity_tokens();
    s.used_tokens = kv_used_tokens();
    s.logical_tokens = s.used_tokens;
    return s;
  }

  // Copies the sequence's KV cache to host memory and frees the sequence.
  virtual absl::StatusOr<SavedSequence> SwapOut(SequenceId seq) = 0;
  // A new sequence holding `saved`'s tokens.
  virtual absl::StatusOr<SequenceId> SwapIn(const SavedSequence& saved) = 0;

  // Appends `tokens` to `seq` and writes the logits that follow its last token into
  // `logits` (vocab_size floats). Fails (OutOfRange) without changing the sequence if it
  // would exceed the context length.
  virtual absl::Status Prefill(SequenceId seq, absl::Span<const int32_t> tokens, absl::Span<float> logits) = 0;

  // Appends tokens[i] to seqs[i] for every i (distinct sequences) and writes each one's
  // next-token logits into row i of `logits` (seqs.size() x vocab_size).
  virtual absl::Status Decode(absl::Span<const SequenceId> seqs, absl::Span<const int32_t> tokens,
                              absl::Span<float> logits) = 0;

  // Decode with greedy choices: appends tokens[i] to seqs[i] and writes the index of the
  // largest next-token logit (the first, on ties) into next[i]. Backends that can choose on
  // the device (CUDA) skip moving the logits to the host; this default decodes and scans.
  virtual absl::Status DecodeGreedy(absl::Span<const SequenceId> seqs, absl::Span<const int32_t> tokens,
                                    absl::Span<int32_t> next) {
    if (next.size() < seqs.size()) return absl::InvalidArgumentError("DecodeGreedy: `next` is too small");
    // Kept between calls: a fresh buffer per step (1 MiB a row for a 262144-token vocabulary)
    // cost page faults and zeroing every token.
    thread_local std::vector<float> logits;
    logits.resize(seqs.size() * static_cast<size_t>(vocab_size()));
    if (absl::Status s = Decode(seqs, tokens, absl::MakeSpan(logits)); !s.ok()) return s;
    const size_t v = static_cast<size_t>(vocab_size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      const float* row = logits.data() + i * v;
      next[i] = GreedyToken(absl::MakeConstSpan(row, v));
    }
    return absl::OkStatus();
  }

  // Sentence embeddings (Stage::kEmbed): each input's final-norm hidden states pooled and
  // scaled to unit length; `layers` > 0 stops after that many layers. Optional: backends
  // that cannot embed say so in can_embed() and leave this Unimplemented.
  virtual bool can_embed() const { return false; }
  virtual absl::StatusOr<std::vector<std::vector<float>>> Embed(absl::Span<const std::vector<int32_t>> inputs,
                                                                EmbeddingPooling pooling, int layers) {
    (void)inputs, (void)pooling, (void)layers;
    return absl::UnimplementedError(absl::StrCat(info().name, " cannot compute embeddings"));
  }

  // Prompt chunks and decode tokens of several sequences in one pass through the weights
  // (continuous batching): appends each chunk to its sequence (distinct sequences) and
  // writes the logits after each chunk's last token into row i. On failure no sequence
  // changes.
  virtual absl::Status Step(absl::Span<const SequenceChunk> chunks, absl::Span<float> logits) = 0;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_BACKEND_H_
