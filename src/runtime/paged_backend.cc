#include "src/runtime/paged_backend.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/runtime/models/model_definition.h"
#include "src/runtime/status_macros.h"

namespace hetero {

PagedBackend::PagedBackend(std::string name, const ModelConfig& config, int kv_block_tokens, int kv_capacity_tokens,
                           int max_sequences, bool share_prefixes)
    : name_(std::move(name)),
      kv_block_tokens_(kv_block_tokens),
      kv_layout_{config.n_layers, config.n_kv_heads, config.head_dim, kv_block_tokens},
      kv_block_floats_(kv_layout_.block_floats()),
      max_sequences_(max_sequences),
      kv_(kv_block_tokens, (kv_capacity_tokens + kv_block_tokens - 1) / kv_block_tokens, config.context_length,
          share_prefixes) {}

ExpertTraffic PagedBackend::expert_traffic(SequenceId seq) const {
  MutexLock lock(&mutex_);
  const auto it = expert_traffic_.find(seq);
  return it == expert_traffic_.end() ? ExpertTraffic{} : it->second;
}

void PagedBackend::AddExpertTraffic(SequenceId seq, const ExpertTraffic& t) {
  ExpertTraffic& sum = expert_traffic_[seq];
  sum.cpu_evaluations += t.cpu_evaluations;
  sum.gpu_evaluations += t.gpu_evaluations;
  sum.bytes_moved += t.bytes_moved;
  sum.wait_ms += t.wait_ms;
}

int PagedBackend::RoutedEvaluationsPerToken(const ModelDefinition& definition) {
  int n = 0;
  for (const LayerDefinition& l : definition.layers) n += l.experts.present() ? l.experts.used : 0;
  return n;
}

absl::StatusOr<SequenceId> PagedBackend::NewSequence() {
  MutexLock lock(&mutex_);
  // Bounded so a caller leaking sequences fails loudly instead of exhausting memory.
  if (kv_.live_sequences() >= max_sequences_) {
    return absl::ResourceExhaustedError(absl::StrCat(name_, ": ", kv_.live_sequences(),
                                                     " sequences live, the maximum is ", max_sequences_));
  }
  return kv_.NewSequence();
}

void PagedBackend::FreeSequence(SequenceId seq) {
  MutexLock lock(&mutex_);
  if (kv_.Contains(seq)) kv_.FreeSequence(seq);
  adapters_.erase(seq);
  expert_traffic_.erase(seq);
}

absl::Status PagedBackend::SetSequenceAdapter(SequenceId seq, const SequenceAdapter& adapter) {
  if (adapter.active() && !can_apply_adapters()) return Backend::SetSequenceAdapter(seq, adapter);
  if (adapter.active() && !(adapter.scale == adapter.scale)) return absl::InvalidArgumentError("adapter scale is NaN");
  MutexLock lock(&mutex_);
  if (!kv_.Contains(seq)) return absl::NotFoundError(absl::StrCat(name_, ": no sequence ", seq));
  HETERO_RETURN_IF_ERROR(kv_.SetDomain(seq, adapter.kv_domain()));
  if (adapter.active()) {
    adapters_[seq] = adapter;
  } else {
    adapters_.erase(seq);
  }
  return absl::OkStatus();
}

const SequenceAdapter& PagedBackend::AdapterOf(SequenceId seq) const {
  static const SequenceAdapter kNone;
  auto it = adapters_.find(seq);
  return it == adapters_.end() ? kNone : it->second;
}

absl::StatusOr<int> PagedBackend::SequenceLength(SequenceId seq) const {
  MutexLock lock(&mutex_);
  return kv_.Length(seq);
}

absl::Status PagedBackend::TruncateSequence(SequenceId seq, int length) {
  MutexLock lock(&mutex_);
  std::vector<KvBlockTable::BlockCopy> copies;
  HETERO_RETURN_IF_ERROR(kv_.Truncate(seq, length, &copies));
  if (copies.empty()) return absl::OkStatus();
  absl::Status copied = CopyKvBlocks(copies);
  if (!copied.ok()) {
    // The copy holds nothing usable: end the sequence before it.
    kv_.Truncate(seq, length / kv_block_tokens_ * kv_block_tokens_, &copies).IgnoreError();
  }
  return copied;
}

absl::StatusOr<int> PagedBackend::AttachCachedPrefix(SequenceId seq, absl::Span<const int32_t> tokens,
                                                     int max_length) {
  MutexLock lock(&mutex_);
  if (!kv_.Contains(seq)) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  return kv_.AttachCachedPrefix(seq, tokens, max_length);
}

KvCacheStats PagedBackend::kv_cache_stats() const {
  MutexLock lock(&mutex_);
  KvCacheStats s;
  s.capacity_tokens = kv_.max_blocks() * kv_.block_tokens();
  s.used_tokens = kv_.used_tokens();
  s.logical_tokens = kv_.logical_tokens();
  s.shared_tokens = kv_.shared_tokens();
  s.cached_tokens = kv_.cached_blocks() * kv_.block_tokens();
  s.attached_tokens_total = kv_.attached_tokens_total();
  return s;
}

int PagedBackend::kv_capacity_tokens() const {
  MutexLock lock(&mutex_);
  return kv_.max_blocks() * kv_.block_tokens();
}

int PagedBackend::kv_used_tokens() const {
  MutexLock lock(&mutex_);
  return kv_.used_tokens();
}

size_t PagedBackend::kv_bytes_per_token() const {
  return kv_layout_.bytes_per_token();
}

absl::Status PagedBackend::Prefill(SequenceId seq, absl::Span<const int32_t> tokens, absl::Span<float> logits) {
  if (tokens.empty()) return absl::InvalidArgumentError("Prefill needs at least one token");
  const SequenceChunk chunk{seq, tokens};
  return Step({&chunk, 1}, logits);
}

absl::Status PagedBackend::Decode(absl::Span<const SequenceId> seqs, absl::Span<const int32_t> tokens,
                                  absl::Span<float> logits) {
  if (seqs.size() != tokens.size() || seqs.empty()) {
    return absl::InvalidArgumentError("Decode needs one token per sequence and at least one sequence");
  }
  std::vector<SequenceChunk> chunks;
  chunks.reserve(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) chunks.push_back({seqs[i], tokens.subspan(i, 1), /*generated=*/true});
  return Step(chunks, logits);
}

absl::StatusOr<std::vector<int>> PagedBackend::ReserveChunks(absl::Span<const SequenceChunk> chunks) {
  if (chunks.empty()) return absl::InvalidArgumentError("Step needs at least one sequence");
  std::vector<int> lengths;
  lengths.reserve(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].tokens.empty()) return absl::InvalidArgumentError(absl::StrCat("chunk ", i, " has no tokens"));
    for (size_t j = 0; j < i; ++j) {
      if (chunks[j].seq == chunks[i].seq) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", chunks[i].seq, " appears twice"));
      }
    }
    HETERO_ASSIGN_OR_RETURN(int length, kv_.Length(chunks[i].seq));
    lengths.push_back(length);
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (absl::Status s = kv_.Reserve(chunks[i].seq, chunks[i].tokens); !s.ok()) {
      RollBack(chunks.subspan(0, i), lengths);
      return s;
    }
  }
  return lengths;
}

void PagedBackend::RollBack(absl::Span<const SequenceChunk> chunks, const std::vector<int>& lengths) {
  // Back to lengths they had: never into a shared block, so no copies.
  std::vector<KvBlockTable::BlockCopy> copies;
  for (size_t i = 0; i < chunks.size(); ++i) kv_.Truncate(chunks[i].seq, lengths[i], &copies).IgnoreError();
}

absl::StatusOr<size_t> PagedBackend::SavedBlocks(const SavedSequence& saved) const {
  const int bt = kv_block_tokens_;
  const size_t blocks = (static_cast<size_t>(std::max(saved.tokens, 0)) + bt - 1) / bt;
  if (saved.tokens < 0 || saved.data.size() != blocks * kv_block_floats_) {
    return absl::InvalidArgumentError(absl::StrCat("SwapIn: saved KV (", saved.tokens, " tokens, ", saved.data.size(),
                                                   " floats) does not match ", name_, "'s layout"));
  }
  return blocks;
}

absl::StatusOr<PagedBackend::SwapInTarget> PagedBackend::NewSequenceFor(const SavedSequence& saved) {
  if (kv_.live_sequences() >= max_sequences_) {
    return absl::ResourceExhaustedError(absl::StrCat(name_, ": ", max_sequences_, " sequences live, the maximum"));
  }
  if (saved.adapter.active() && !can_apply_adapters()) {
    return absl::UnimplementedError(absl::StrCat(name_, " cannot apply LoRA adapters, and this KV was computed with one"));
  }
  SwapInTarget target;
  target.seq = kv_.NewSequence();
  // The adapter first: prefix blocks attach only within its KV domain.
  absl::Status s = kv_.SetDomain(target.seq, saved.adapter.kv_domain());
  if (s.ok() && static_cast<int>(saved.token_ids.size()) == saved.tokens) {
    target.attached_tokens = kv_.AttachCachedPrefix(target.seq, saved.token_ids, saved.tokens);
    s = kv_.Reserve(target.seq, absl::MakeConstSpan(saved.token_ids).subspan(static_cast<size_t>(target.attached_tokens)));
  } else if (s.ok()) {
    s = kv_.Reserve(target.seq, saved.tokens);
  }
  if (!s.ok()) {
    kv_.FreeSequence(target.seq);
    return s;
  }
  if (saved.adapter.active()) adapters_[target.seq] = saved.adapter;
  target.first_block_to_copy = static_cast<size_t>(target.attached_tokens / kv_block_tokens_);
  return target;
}

}  // namespace hetero
