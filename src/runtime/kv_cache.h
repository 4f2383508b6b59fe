// Paged KV-cache bookkeeping, device-independent: sequences own lists of fixed-size blocks
// (block tables, as in vLLM) drawn from a bounded pool. Backends keep the K/V storage for
// each block id; the transfer layer moves whole blocks.
//
// Prefix sharing (copy-on-write): a full block whose tokens (and every token before them)
// are known is registered under (its parent block, the parent's generation, its tokens).
// A sequence that starts with the same tokens attaches the registered blocks instead of
// encoding them again (AttachCachedPrefix), so sessions with one system prompt hold its KV
// once. Shared blocks are never written: a sequence truncated into the middle of one gets
// a private copy of it (Truncate names the copy for the backend to make). Registered blocks
// no sequence holds stay cached until the pool needs them (least recently released first).
#ifndef HETERO_RUNTIME_KV_CACHE_H_
#define HETERO_RUNTIME_KV_CACHE_H_

#include <cstdint>
#include <list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/runtime/backend.h"

namespace hetero {

class KvBlockTable {
 public:
  // `block_tokens` tokens per block, at most `max_blocks` blocks in all, at most
  // `max_tokens_per_sequence` per sequence (the model's context length). Without
  // `share_prefixes` no tokens are kept and nothing is shared.
  KvBlockTable(int block_tokens, int max_blocks, int max_tokens_per_sequence, bool share_prefixes = true);

  SequenceId NewSequence();
  void FreeSequence(SequenceId seq);
  bool Contains(SequenceId seq) const { return sequences_.contains(seq); }
  int live_sequences() const { return static_cast<int>(sequences_.size()); }
  absl::StatusOr<int> Length(SequenceId seq) const;

  // Makes room for `tokens` after the sequence's end: OutOfRange past the context length,
  // ResourceExhausted when the pool has too few free blocks (the sequence is unchanged).
  // The tokens are kept so full blocks can be shared once written (Advance).
  absl::Status Reserve(SequenceId seq, absl::Span<const int32_t> tokens);
  // The same for `n` tokens whose ids are unknown (KV copied in): the sequence is never
  // shared, nor are blocks added to it later.
  absl::Status Reserve(SequenceId seq, int n);
  // Records the next `n` reserved tokens as written; blocks they complete are registered
  // for sharing.
  void Advance(SequenceId seq, int n);
  // Keeps the first `length` tokens. Cutting into a block other sequences share gives this
  // sequence a fresh block: `copies` gets {shared, fresh}, whose first `length %
  // block_tokens` slots the backend must copy before writing the sequence again.
  // ResourceExhausted (nothing changed) when no block is free for that copy.
  struct BlockCopy {
    int32_t from;
    int32_t to;
  };
  absl::Status Truncate(SequenceId seq, int length, std::vector<BlockCopy>* copies);
  // The KV of this sequence is not a function of its tokens (embeddings that stop after a
  // few layers leave the later layers unwritten): none of its blocks is ever shared.
  void MarkPrivate(SequenceId seq);
  // What else the sequence's KV depends on beyond its tokens (a LoRA adapter:
  // SequenceAdapter::kv_domain); blocks are shared only within one domain. Set while the
  // sequence is empty (FailedPrecondition otherwise).
  absl::Status SetDomain(SequenceId seq, uint64_t domain);

  // Appends to `seq` the longest run of registered blocks that continue it with the next
  // tokens of `tokens` (whose first Length(seq) tokens must be what the sequence holds),
  // without passing `max_length` tokens. Only whole blocks attach, and only at a block
  // boundary. Returns the tokens attached (0 when sharing is off or nothing matches).
  int AttachCachedPrefix(SequenceId seq, absl::Span<const int32_t> tokens, int max_length);

  // Block holding token `position` of `seq`, and its slot within the block.
  int BlockOf(SequenceId seq, int position) const;
  const std::vector<int32_t>& Blocks(SequenceId seq) const { return sequences_.at(seq).blocks; }
  // The token ids `seq` holds (empty when unknown or sharing is off).
  std::vector<int32_t> Tokens(SequenceId seq) const;
  int block_tokens() const { return block_tokens_; }
  int max_blocks() const { return max_blocks_; }
  // Blocks a Reserve may take: never used, released, or cached and held by no sequence.
  int available_blocks() const {
    return static_cast<int>(free_.size() + cached_lru_.size()) + (max_blocks_ - next_unused_block_);
  }
  int blocks_ever_used() const { return next_unused_block_; }
  int max_tokens_per_sequence() const { return max_tokens_; }
  // Tokens held by live sequences, each shared block counted once.
  int used_tokens() const { return logical_tokens_ - shared_tokens_; }
  // The sum of live sequences' lengths (shared blocks counted once per holder).
  int logical_tokens() const { return logical_tokens_; }
  // Tokens saved by sharing: for each block held by k > 1 sequences, (k - 1) blocks.
  int shared_tokens() const { return shared_tokens_; }
  // Registered blocks no sequence holds (reusable by AttachCachedPrefix until evicted).
  int cached_blocks() const { return static_cast<int>(cached_lru_.size()); }
  // Tokens AttachCachedPrefix has attached so far.
  int64_t attached_tokens_total() const { return attached_tokens_total_; }

 private:
  struct Sequence {
    int length = 0;
    std::vector<int32_t> blocks;
    std::vector<int32_t> tokens;  // written then reserved; empty when !known_tokens
    bool known_tokens = true;
    uint64_t domain = 0;
  };
  // What a registered block holds: the block it continues (-1 for the first), that
  // block's generation when registered, and its own tokens.
  struct BlockKey {
    int32_t parent = -1;
    uint32_t parent_generation = 0;
    uint64_t domain = 0;
    std::vector<int32_t> tokens;
    bool operator==(const BlockKey& o) const {
      return parent == o.parent && parent_generation == o.parent_generation && domain == o.domain &&
             tokens == o.tokens;
    }
    template <typename H>
    friend H AbslHashValue(H h, const BlockKey& k) {
      return H::combine(std::move(h), k.parent, k.parent_generation, k.domain, k.tokens);
    }
  };
  struct BlockState {
    int refs = 0;
    bool registered = false;
    uint32_t generation = 0;  // changes when the block stops holding what it was registered for
    BlockKey key;             // when registered
    std::list<int32_t>::iterator lru;  // when cached (registered, refs == 0)
  };

  // Takes the blocks `n` more tokens need (checked first: on failure nothing changed).
  absl::Status Grow(SequenceId seq, Sequence& s, int n);
  int32_t TakeBlock();  // a block with one reference; available_blocks() must be > 0
  void Hold(int32_t block);
  void Release(int32_t block);
  void Unregister(int32_t block);
  void RegisterFullBlocks(Sequence& s, int from_block);
  bool KnowsTokens(const Sequence& s) const { return share_ && s.known_tokens; }

  int block_tokens_;
  int max_blocks_;
  int max_tokens_;
  bool share_;
  int next_unused_block_ = 0;  // blocks are created lazily, so untouched memory stays free
  int logical_tokens_ = 0;
  int shared_tokens_ = 0;
  int64_t attached_tokens_total_ = 0;
  std::vector<int32_t> free_;        // released unregistered blocks, reused first
  std::list<int32_t> cached_lru_;    // registered blocks no sequence holds, oldest first
  std::vector<BlockState> blocks_;   // by block id, for blocks ever used
  absl::flat_hash_map<BlockKey, int32_t> registry_;
  SequenceId next_id_ = 1;
  absl::flat_hash_map<SequenceId, Sequence> sequences_;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_KV_CACHE_H_
