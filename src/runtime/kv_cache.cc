#include "src/runtime/kv_cache.h"

#include "absl/strings/str_cat.h"

namespace hetero {

KvBlockTable::KvBlockTable(int block_tokens, int max_blocks, int max_tokens_per_sequence)
    : block_tokens_(block_tokens), max_blocks_(max_blocks), max_tokens_(max_tokens_per_sequence) {}

SequenceId KvBlockTable::NewSequence() {
  const SequenceId id = next_id_++;
  sequences_.emplace(id, Sequence{});
  return id;
}

void KvBlockTable::FreeSequence(SequenceId seq) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  free_.insert(free_.end(), it->second.blocks.begin(), it->second.blocks.end());
  used_tokens_ -= it->second.length;
  sequences_.erase(it);
}

absl::StatusOr<int> KvBlockTable::Length(SequenceId seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  return it->second.length;
}

int32_t KvBlockTable::TakeBlock() {
  if (!free_.empty()) {
    const int32_t b = free_.back();
    free_.pop_back();
    return b;
  }
  return next_unused_block_++;
}

absl::Status KvBlockTable::Reserve(SequenceId seq, int n) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  Sequence& s = it->second;
  if (n < 0 || static_cast<int64_t>(s.length) + n > max_tokens_) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", seq, " holds ", s.length, " tokens; adding ", n,
                                              " would pass the context length ", max_tokens_));
  }
  const int needed = (s.length + n + block_tokens_ - 1) / block_tokens_ - static_cast<int>(s.blocks.size());
  const int available = static_cast<int>(free_.size()) + (max_blocks_ - next_unused_block_);
  if (needed > available) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: ", needed, " more blocks of ", block_tokens_,
                                                     " tokens needed, ", available, " free"));
  }
  for (int i = 0; i < needed; ++i) s.blocks.push_back(TakeBlock());
  return absl::OkStatus();
}

void KvBlockTable::Advance(SequenceId seq, int n) {
  sequences_.at(seq).length += n;
  used_tokens_ += n;
}

absl::Status KvBlockTable::Truncate(SequenceId seq, int length) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  Sequence& s = it->second;
  if (length < 0 || length > s.length) {
    return absl::OutOfRangeError(absl::StrCat("cannot truncate sequence ", seq, " of ", s.length, " tokens to ", length));
  }
  used_tokens_ -= s.length - length;
  s.length = length;
  const size_t keep = static_cast<size_t>((length + block_tokens_ - 1) / block_tokens_);
  while (s.blocks.size() > keep) {
    free_.push_back(s.blocks.back());
    s.blocks.pop_back();
  }
  return absl::OkStatus();
}

int KvBlockTable::BlockOf(SequenceId seq, int position) const {
  return sequences_.at(seq).blocks[static_cast<size_t>(position / block_tokens_)];
}

}  // namespace hetero
