// What the CPU and CUDA backends share: a paged KV cache's block table under one lock, the
// bookkeeping of sequences, and the checks and reservations of a batched step. Both keep
// KV blocks in one layout (src/runtime/kv_layout.h), so either can read what the other
// saved (SwapOut / SwapIn: the KV handoff).
#ifndef HETERO_RUNTIME_PAGED_BACKEND_H_
#define HETERO_RUNTIME_PAGED_BACKEND_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "hetero/model.h"
#include "src/runtime/backend.h"
#include "src/runtime/kv_cache.h"
#include "src/runtime/kv_layout.h"
#include "src/runtime/sync.h"

namespace hetero {

struct ModelDefinition;

class PagedBackend : public Backend {
 public:
  absl::StatusOr<SequenceId> NewSequence() override;
  void FreeSequence(SequenceId seq) override;
  absl::StatusOr<int> SequenceLength(SequenceId seq) const override;
  // Kept here for every backend; only those whose can_apply_adapters() accept one.
  absl::Status SetSequenceAdapter(SequenceId seq, const SequenceAdapter& adapter) override;
  absl::Status TruncateSequence(SequenceId seq, int length) override;
  absl::StatusOr<int> AttachCachedPrefix(SequenceId seq, absl::Span<const int32_t> tokens, int max_length) override;
  int kv_capacity_tokens() const override;
  int kv_used_tokens() const override;
  size_t kv_bytes_per_token() const override;
  KvCacheStats kv_cache_stats() const override;
  ExpertTraffic expert_traffic(SequenceId seq) const override;
  // Both as a Step of one chunk per sequence.
  absl::Status Prefill(SequenceId seq, absl::Span<const int32_t> tokens, absl::Span<float> logits) override;
  absl::Status Decode(absl::Span<const SequenceId> seqs, absl::Span<const int32_t> tokens,
                      absl::Span<float> logits) override;

 protected:
  // `name` names the backend in errors ("CPU backend"). Capacity: `kv_capacity_tokens` over
  // all sequences, in blocks of `kv_block_tokens`; `share_prefixes`: KvBlockTable's
  // copy-on-write prefix sharing.
  PagedBackend(std::string name, const ModelConfig& config, int kv_block_tokens, int kv_capacity_tokens,
               int max_sequences, bool share_prefixes);

  // Copies each block `from` whole to its `to` (copy-on-write of a shared block). Called
  // with the lock held, so no pass is in flight.
  virtual absl::Status CopyKvBlocks(absl::Span<const KvBlockTable::BlockCopy> copies) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) = 0;

  // Checks a step's chunks (at least one, each with tokens, distinct sequences that exist),
  // reserves room for their tokens and returns each sequence's length before them. On
  // failure nothing has changed.
  absl::StatusOr<std::vector<int>> ReserveChunks(absl::Span<const SequenceChunk> chunks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Puts the chunks' sequences back to `lengths` (a step that failed part way).
  void RollBack(absl::Span<const SequenceChunk> chunks, const std::vector<int>& lengths)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The blocks SwapIn needs for `saved`, after checking it has this layout's size.
  absl::StatusOr<size_t> SavedBlocks(const SavedSequence& saved) const;
  // SwapIn's sequence: shared blocks still cached for `saved`'s first tokens (when its ids
  // are known) are attached, room is reserved for the rest. Returns the sequence and how
  // many of `saved`'s blocks it already holds: the caller copies the others in, then
  // advances the sequence by the tokens not attached.
  struct SwapInTarget {
    SequenceId seq;
    int attached_tokens = 0;
    size_t first_block_to_copy = 0;
  };
  absl::StatusOr<SwapInTarget> NewSequenceFor(const SavedSequence& saved) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Adds to a sequence's ExpertTraffic (the backend's step, after it succeeded).
  void AddExpertTraffic(SequenceId seq, const ExpertTraffic& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Routed expert evaluations per token: the sum over the MoE layers of experts per token.
  static int RoutedEvaluationsPerToken(const ModelDefinition& definition);
  // The adapter of a sequence (inactive when it has none).
  const SequenceAdapter& AdapterOf(SequenceId seq) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const std::string name_;
  const int kv_block_tokens_;
  const KvBlockLayout kv_layout_;
  const size_t kv_block_floats_;  // kv_layout_.block_floats()
  const int max_sequences_;
  mutable Mutex mutex_;
  KvBlockTable kv_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<SequenceId, SequenceAdapter> adapters_ ABSL_GUARDED_BY(mutex_);  // active ones only
  // Per live sequence id; erased when the sequence is freed or swapped out.
  absl::flat_hash_map<SequenceId, ExpertTraffic> expert_traffic_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_PAGED_BACKEND_H_
