#include "src/runtime/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace hetero {

KvBlockTable::KvBlockTable(int block_tokens, int max_blocks, int max_tokens_per_sequence, bool share_prefixes)
    : block_tokens_(block_tokens), max_blocks_(max_blocks), max_tokens_(max_tokens_per_sequence), share_(share_prefixes) {}

SequenceId KvBlockTable::NewSequence() {
  const SequenceId id = next_id_++;
  sequences_.emplace(id, Sequence{});
  return id;
}

void KvBlockTable::FreeSequence(SequenceId seq) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  // Last block first: the deepest blocks of a prefix are the first evicted.
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) Release(*b);
  logical_tokens_ -= it->second.length;
  sequences_.erase(it);
}

absl::StatusOr<int> KvBlockTable::Length(SequenceId seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  return it->second.length;
}

std::vector<int32_t> KvBlockTable::Tokens(SequenceId seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end() || !KnowsTokens(it->second)) return {};
  return std::vector<int32_t>(it->second.tokens.begin(), it->second.tokens.begin() + it->second.length);
}

void KvBlockTable::Hold(int32_t block) {
  BlockState& b = blocks_[block];
  if (b.refs == 0 && b.registered) cached_lru_.erase(b.lru);
  ++b.refs;
  if (b.refs > 1) shared_tokens_ += block_tokens_;
}

void KvBlockTable::Release(int32_t block) {
  BlockState& b = blocks_[block];
  if (b.refs > 1) shared_tokens_ -= block_tokens_;
  if (--b.refs > 0) return;
  if (b.registered) {
    const BlockKey& k = b.key;
    const bool parent_current =
        k.parent < 0 || (blocks_[k.parent].registered && blocks_[k.parent].generation == k.parent_generation);
    if (parent_current) {
      b.lru = cached_lru_.insert(cached_lru_.end(), block);
      return;
    }
    Unregister(block);  // unreachable: what it continued is gone
  }
  free_.push_back(block);
}

void KvBlockTable::Unregister(int32_t block) {
  BlockState& b = blocks_[block];
  if (!b.registered) return;
  registry_.erase(b.key);
  b.registered = false;
  b.key = BlockKey{};
  ++b.generation;  // blocks registered as its continuation no longer match
}

int32_t KvBlockTable::TakeBlock() {
  int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!cached_lru_.empty()) {
    block = cached_lru_.front();
    cached_lru_.pop_front();
    Unregister(block);
  } else {
    block = next_unused_block_++;
    blocks_.resize(static_cast<size_t>(next_unused_block_));
  }
  blocks_[block].refs = 1;
  return block;
}

absl::Status KvBlockTable::Grow(SequenceId seq, Sequence& s, int n) {
  if (n < 0 || static_cast<int64_t>(s.length) + n > max_tokens_) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", seq, " holds ", s.length, " tokens; adding ", n,
                                              " would pass the context length ", max_tokens_));
  }
  const int needed = (s.length + n + block_tokens_ - 1) / block_tokens_ - static_cast<int>(s.blocks.size());
  if (needed > available_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: ", needed, " more blocks of ", block_tokens_,
                                                     " tokens needed, ", available_blocks(), " free"));
  }
  for (int i = 0; i < needed; ++i) s.blocks.push_back(TakeBlock());
  return absl::OkStatus();
}

absl::Status KvBlockTable::Reserve(SequenceId seq, absl::Span<const int32_t> tokens) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  Sequence& s = it->second;
  if (absl::Status status = Grow(seq, s, static_cast<int>(tokens.size())); !status.ok()) return status;
  if (KnowsTokens(s)) {
    s.tokens.resize(static_cast<size_t>(s.length));
    s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
  }
  return absl::OkStatus();
}

absl::Status KvBlockTable::Reserve(SequenceId seq, int n) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  Sequence& s = it->second;
  if (absl::Status status = Grow(seq, s, n); !status.ok()) return status;
  s.known_tokens = false;
  s.tokens.clear();
  return absl::OkStatus();
}

void KvBlockTable::MarkPrivate(SequenceId seq) {
  Sequence& s = sequences_.at(seq);
  s.known_tokens = false;
  s.tokens.clear();
}

void KvBlockTable::RegisterFullBlocks(Sequence& s, int from_block) {
  const int full = s.length / block_tokens_;
  for (int i = from_block; i < full; ++i) {
    const int32_t block = s.blocks[static_cast<size_t>(i)];
    if (blocks_[block].registered) continue;  // attached from the cache
    const int32_t parent = i == 0 ? -1 : s.blocks[static_cast<size_t>(i - 1)];
    if (parent >= 0 && !blocks_[parent].registered) return;  // a private copy: nothing after it is findable
    BlockKey key;
    key.parent = parent;
    key.parent_generation = parent >= 0 ? blocks_[parent].generation : 0;
    key.domain = s.domain;
    key.tokens.assign(s.tokens.begin() + static_cast<ptrdiff_t>(i) * block_tokens_,
                      s.tokens.begin() + static_cast<ptrdiff_t>(i + 1) * block_tokens_);
    // Another sequence encoded the same block first: ours stays private, and so do the
    // blocks after it.
    if (!registry_.emplace(key, block).second) return;
    blocks_[block].registered = true;
    blocks_[block].key = std::move(key);
  }
}

void KvBlockTable::Advance(SequenceId seq, int n) {
  Sequence& s = sequences_.at(seq);
  const int before = s.length;
  s.length += n;
  logical_tokens_ += n;
  if (KnowsTokens(s) && s.length / block_tokens_ > before / block_tokens_) RegisterFullBlocks(s, before / block_tokens_);
}

absl::Status KvBlockTable::Truncate(SequenceId seq, int length, std::vector<BlockCopy>* copies) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  Sequence& s = it->second;
  if (length < 0 || length > s.length) {
    return absl::OutOfRangeError(absl::StrCat("cannot truncate sequence ", seq, " of ", s.length, " tokens to ", length));
  }
  if (length % block_tokens_ != 0) {
    // The block the sequence now ends in will be written again.
    const size_t i = static_cast<size_t>(length / block_tokens_);
    const int32_t block = s.blocks[i];
    if (blocks_[block].refs > 1) {
      if (available_blocks() == 0) {
        return absl::ResourceExhaustedError(absl::StrCat("KV cache full: truncating sequence ", seq,
                                                         " into a shared block needs a free block for its copy"));
      }
      const int32_t copy = TakeBlock();
      copies->push_back({block, copy});
      Release(block);
      s.blocks[i] = copy;
    } else {
      Unregister(block);
    }
  }
  const size_t keep = static_cast<size_t>((length + block_tokens_ - 1) / block_tokens_);
  while (s.blocks.size() > keep) {
    Release(s.blocks.back());
    s.blocks.pop_back();
  }
  logical_tokens_ -= s.length - length;
  s.length = length;
  if (s.tokens.size() > static_cast<size_t>(length)) s.tokens.resize(static_cast<size_t>(length));
  return absl::OkStatus();
}

int KvBlockTable::AttachCachedPrefix(SequenceId seq, absl::Span<const int32_t> tokens, int max_length) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return 0;
  Sequence& s = it->second;
  const size_t bt = static_cast<size_t>(block_tokens_);
  const size_t length = static_cast<size_t>(s.length);
  if (!KnowsTokens(s) || length % bt != 0 || s.blocks.size() != length / bt || tokens.size() < length ||
      !std::equal(s.tokens.begin(), s.tokens.begin() + static_cast<ptrdiff_t>(length), tokens.begin())) {
    return 0;
  }
  int32_t parent = s.blocks.empty() ? -1 : s.blocks.back();
  if (parent >= 0 && !blocks_[parent].registered) return 0;
  const size_t limit = std::min({tokens.size(), static_cast<size_t>(std::max(max_length, 0)),
                                 static_cast<size_t>(max_tokens_)});
  int attached = 0;
  BlockKey key;
  while (static_cast<size_t>(s.length) + bt <= limit) {
    key.parent = parent;
    key.parent_generation = parent >= 0 ? blocks_[parent].generation : 0;
    key.domain = s.domain;
    key.tokens.assign(tokens.begin() + s.length, tokens.begin() + s.length + static_cast<ptrdiff_t>(bt));
    auto found = registry_.find(key);
    if (found == registry_.end()) break;
    const int32_t block = found->second;
    Hold(block);
    s.blocks.push_back(block);
    s.tokens.resize(static_cast<size_t>(s.length));
    s.tokens.insert(s.tokens.end(), key.tokens.begin(), key.tokens.end());
    s.length += block_tokens_;
    logical_tokens_ += block_tokens_;
    attached += block_tokens_;
    parent = block;
  }
  attached_tokens_total_ += attached;
  return attached;
}

absl::Status KvBlockTable::SetDomain(SequenceId seq, uint64_t domain) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  Sequence& s = it->second;
  if (s.domain == domain) return absl::OkStatus();
  if (s.length != 0 || !s.blocks.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq, " already holds ", s.length,
                                                      " tokens; its adapter is set while it is empty"));
  }
  s.domain = domain;
  return absl::OkStatus();
}

int KvBlockTable::BlockOf(SequenceId seq, int position) const {
  return sequences_.at(seq).blocks[static_cast<size_t>(position / block_tokens_)];
}

}  // namespace hetero
