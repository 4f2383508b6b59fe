// Paged KV-cache bookkeeping, device-independent: sequences own lists of fixed-size blocks
// (block tables, as in vLLM) drawn from a bounded pool. Backends keep the K/V storage for
// each block id; the transfer layer moves whole blocks.
#ifndef HETERO_RUNTIME_KV_CACHE_H_
#define HETERO_RUNTIME_KV_CACHE_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "src/runtime/backend.h"

namespace hetero {

class KvBlockTable {
 public:
  // `block_tokens` tokens per block, at most `max_blocks` blocks in all, at most
  // `max_tokens_per_sequence` per sequence (the model's context length).
  KvBlockTable(int block_tokens, int max_blocks, int max_tokens_per_sequence);

  SequenceId NewSequence();
  void FreeSequence(SequenceId seq);
  bool Contains(SequenceId seq) const { return sequences_.contains(seq); }
  int live_sequences() const { return static_cast<int>(sequences_.size()); }
  absl::StatusOr<int> Length(SequenceId seq) const;

  // Makes room for `n` more tokens: OutOfRange past the context length,
  // ResourceExhausted when the pool has too few free blocks (the sequence is unchanged).
  absl::Status Reserve(SequenceId seq, int n);
  // Records `n` tokens as written (after Reserve).
  void Advance(SequenceId seq, int n);
  absl::Status Truncate(SequenceId seq, int length);

  // Block holding token `position` of `seq`, and its slot within the block.
  int BlockOf(SequenceId seq, int position) const;
  const std::vector<int32_t>& Blocks(SequenceId seq) const { return sequences_.at(seq).blocks; }
  int block_tokens() const { return block_tokens_; }
  int max_blocks() const { return max_blocks_; }
  int free_blocks() const { return static_cast<int>(free_.size()); }
  int blocks_ever_used() const { return next_unused_block_; }
  int max_tokens_per_sequence() const { return max_tokens_; }
  int used_tokens() const { return used_tokens_; }  // over all live sequences

 private:
  struct Sequence {
    int length = 0;
    std::vector<int32_t> blocks;
  };
  int32_t TakeBlock();

  int block_tokens_;
  int max_blocks_;
  int max_tokens_;
  int next_unused_block_ = 0;       // blocks are created lazily, so untouched memory stays free
  int used_tokens_ = 0;
  std::vector<int32_t> free_;       // released blocks, reused first
  SequenceId next_id_ = 1;
  absl::flat_hash_map<SequenceId, Sequence> sequences_;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_KV_CACHE_H_
