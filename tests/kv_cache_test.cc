// The paged KV block table: accounting, prefix sharing, copy-on-write and the cache of
// released shared blocks. A randomized run checks the property that matters: whatever
// sequences do, every slot a sequence reads holds the KV of that sequence's own prefix.
#include "src/runtime/kv_cache.h"

#include <map>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;
using ::testing::HasSubstr;
using BlockCopy = KvBlockTable::BlockCopy;

std::vector<int32_t> Range(int from, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = from + i;
  return v;
}

// Reserve and write `tokens` after the sequence's end, as a backend step does.
void Append(KvBlockTable& t, SequenceId seq, const std::vector<int32_t>& tokens) {
  ASSERT_TRUE(t.Reserve(seq, tokens).ok());
  t.Advance(seq, static_cast<int>(tokens.size()));
}

TEST(KvBlockTableTest, WithoutSharingCountsEveryToken) {
  KvBlockTable t(4, 10, 100, /*share_prefixes=*/false);
  const SequenceId a = t.NewSequence(), b = t.NewSequence();
  Append(t, a, Range(1, 10));
  Append(t, b, Range(1, 10));
  EXPECT_EQ(t.AttachCachedPrefix(t.NewSequence(), Range(1, 10), 10), 0);
  EXPECT_EQ(t.used_tokens(), 20);
  EXPECT_EQ(t.shared_tokens(), 0);
  EXPECT_EQ(t.available_blocks(), 10 - 6);
  EXPECT_TRUE(t.Tokens(a).empty());
}

TEST(KvBlockTableTest, SecondSequenceAttachesTheFirstOnesFullBlocks) {
  KvBlockTable t(4, 16, 100);
  const SequenceId a = t.NewSequence();
  std::vector<int32_t> prompt = Range(100, 10);  // blocks [0,4) [4,8) full, [8,10) partial
  Append(t, a, prompt);
  EXPECT_EQ(t.Tokens(a), prompt);
  const SequenceId b = t.NewSequence();
  std::vector<int32_t> other = prompt;
  other[9] = 7;  // differs in the partial block only
  EXPECT_EQ(t.AttachCachedPrefix(b, other, static_cast<int>(other.size()) - 1), 8);
  EXPECT_EQ(*t.Length(b), 8);
  EXPECT_EQ(t.Blocks(b), std::vector<int32_t>(t.Blocks(a).begin(), t.Blocks(a).begin() + 2));
  EXPECT_EQ(t.shared_tokens(), 8);
  EXPECT_EQ(t.logical_tokens(), 18);
  EXPECT_EQ(t.used_tokens(), 10);
  EXPECT_EQ(t.attached_tokens_total(), 8);
  Append(t, b, {other[8], other[9]});
  EXPECT_NE(t.Blocks(b)[2], t.Blocks(a)[2]);
  EXPECT_EQ(t.used_tokens(), 12);
  // Freeing the first leaves the second whole.
  t.FreeSequence(a);
  EXPECT_EQ(t.shared_tokens(), 0);
  EXPECT_EQ(t.used_tokens(), 10);
  EXPECT_EQ(*t.Length(b), 10);
}

TEST(KvBlockTableTest, AttachStopsAtTheLimitAndAtADifference) {
  KvBlockTable t(4, 16, 100);
  const SequenceId a = t.NewSequence();
  Append(t, a, Range(0, 16));
  // The limit keeps the last token to encode: 15 allows 3 blocks.
  EXPECT_EQ(t.AttachCachedPrefix(t.NewSequence(), Range(0, 16), 15), 12);
  // A difference in the second block stops after the first.
  std::vector<int32_t> differs = Range(0, 16);
  differs[5] = 99;
  EXPECT_EQ(t.AttachCachedPrefix(t.NewSequence(), differs, 16), 4);
  // Only at a block boundary, and only onto what the sequence holds.
  const SequenceId c = t.NewSequence();
  Append(t, c, Range(0, 2));
  EXPECT_EQ(t.AttachCachedPrefix(c, Range(0, 16), 16), 0);
}

TEST(KvBlockTableTest, AttachContinuesASequenceThatHoldsTheSamePrefix) {
  KvBlockTable t(4, 16, 100);
  const SequenceId a = t.NewSequence();
  Append(t, a, Range(0, 12));
  const SequenceId b = t.NewSequence();
  Append(t, b, Range(0, 4));  // encoded by itself: its first block is a private duplicate
  EXPECT_EQ(t.AttachCachedPrefix(b, Range(0, 12), 12), 0) << "b's first block is not the registered one";
  const SequenceId c = t.NewSequence();
  EXPECT_EQ(t.AttachCachedPrefix(c, Range(0, 4), 4), 4);
  EXPECT_EQ(t.AttachCachedPrefix(c, Range(0, 12), 12), 8);
  EXPECT_EQ(t.Blocks(c), t.Blocks(a));
  // A mismatch with what the sequence holds attaches nothing.
  std::vector<int32_t> wrong = Range(0, 16);
  wrong[0] = 50;
  EXPECT_EQ(t.AttachCachedPrefix(c, wrong, 16), 0);
}

TEST(KvBlockTableTest, TruncatingIntoASharedBlockCopiesIt) {
  KvBlockTable t(4, 16, 100);
  const SequenceId a = t.NewSequence();
  Append(t, a, Range(0, 8));
  const SequenceId b = t.NewSequence();
  ASSERT_EQ(t.AttachCachedPrefix(b, Range(0, 8), 8), 8);
  const int32_t shared = t.Blocks(a)[1];
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(t.Truncate(b, 6, &copies).ok());
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].from, shared);
  EXPECT_EQ(t.Blocks(b)[1], copies[0].to);
  EXPECT_NE(copies[0].to, shared);
  EXPECT_EQ(t.Blocks(b)[0], t.Blocks(a)[0]);  // still shared
  EXPECT_EQ(t.shared_tokens(), 4);
  EXPECT_EQ(t.used_tokens(), 8 + 6 - 4);
  // Truncating at a block boundary copies nothing.
  copies.clear();
  ASSERT_TRUE(t.Truncate(b, 4, &copies).ok());
  EXPECT_TRUE(copies.empty());
  // With no free block for the copy: ResourceExhausted, nothing changed.
  KvBlockTable full(4, 2, 100);
  const SequenceId x = full.NewSequence();
  Append(full, x, Range(0, 8));
  const SequenceId y = full.NewSequence();
  ASSERT_EQ(full.AttachCachedPrefix(y, Range(0, 8), 8), 8);
  EXPECT_THAT(full.Truncate(y, 5, &copies), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("shared block")));
  EXPECT_EQ(*full.Length(y), 8);
}

TEST(KvBlockTableTest, RewritingASoleOwnersBlockUnregistersIt) {
  KvBlockTable t(4, 16, 100);
  const SequenceId a = t.NewSequence();
  Append(t, a, Range(0, 8));
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(t.Truncate(a, 6, &copies).ok());
  EXPECT_TRUE(copies.empty());
  Append(t, a, {70, 71});  // block 1 now holds 4 5 70 71
  // The old content (4 5 6 7) must not be found; the new one is.
  EXPECT_EQ(t.AttachCachedPrefix(t.NewSequence(), Range(0, 8), 8), 4);
  std::vector<int32_t> now = Range(0, 6);
  now.push_back(70);
  now.push_back(71);
  EXPECT_EQ(t.AttachCachedPrefix(t.NewSequence(), now, 8), 8);
}

TEST(KvBlockTableTest, ReleasedSharedBlocksStayCachedUntilThePoolNeedsThem) {
  KvBlockTable t(4, 4, 100);
  const SequenceId a = t.NewSequence();
  Append(t, a, Range(0, 8));
  t.FreeSequence(a);
  EXPECT_EQ(t.used_tokens(), 0);
  EXPECT_EQ(t.cached_blocks(), 2);
  EXPECT_EQ(t.available_blocks(), 4);
  const SequenceId b = t.NewSequence();
  EXPECT_EQ(t.AttachCachedPrefix(b, Range(0, 8), 8), 8);
  EXPECT_EQ(t.cached_blocks(), 0);
  t.FreeSequence(b);
  // A block needed while none is free evicts one before the pool grows (memory stays at
  // the working set), the deepest of a prefix first.
  const SequenceId c = t.NewSequence();
  Append(t, c, Range(50, 4));
  EXPECT_EQ(t.blocks_ever_used(), 2);
  EXPECT_EQ(t.cached_blocks(), 1);
  EXPECT_EQ(t.AttachCachedPrefix(t.NewSequence(), Range(0, 8), 8), 4);
}

TEST(KvBlockTableTest, UnknownTokensAndPrivateSequencesAreNeverShared) {
  KvBlockTable t(4, 16, 100);
  const SequenceId swapped_in = t.NewSequence();
  ASSERT_TRUE(t.Reserve(swapped_in, 8).ok());
  t.Advance(swapped_in, 8);
  Append(t, swapped_in, Range(0, 4));
  const SequenceId embedding = t.NewSequence();
  t.MarkPrivate(embedding);
  Append(t, embedding, Range(0, 8));
  EXPECT_EQ(t.AttachCachedPrefix(t.NewSequence(), Range(0, 8), 8), 0);
  EXPECT_TRUE(t.Tokens(swapped_in).empty());
}

TEST(KvBlockTableTest, ReserveChecksTheContextAndThePool) {
  KvBlockTable t(4, 3, 10);
  const SequenceId a = t.NewSequence();
  EXPECT_THAT(t.Reserve(a, Range(0, 11)), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("context length 10")));
  Append(t, a, Range(0, 10));
  const SequenceId b = t.NewSequence();
  EXPECT_THAT(t.Reserve(b, Range(0, 1)), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("KV cache full")));
  EXPECT_EQ(*t.Length(b), 0);
  EXPECT_THAT(t.Reserve(999, Range(0, 1)), StatusIs(absl::StatusCode::kNotFound));
}

// What a backend would store: each slot's "KV", modelled as a hash of the whole prefix up
// to and including that position (as real KV depends on every earlier token).
class FakeKvStore {
 public:
  explicit FakeKvStore(int block_tokens) : bt_(block_tokens) {}
  void Write(const KvBlockTable& t, SequenceId seq, const std::vector<int32_t>& tokens, int from) {
    for (int pos = from; pos < static_cast<int>(tokens.size()); ++pos) {
      slots_[{t.BlockOf(seq, pos), pos % bt_}] = PrefixHash(tokens, pos);
    }
  }
  void Copy(const std::vector<BlockCopy>& copies) {
    for (const BlockCopy& c : copies) {
      for (int s = 0; s < bt_; ++s) {
        auto it = slots_.find({c.from, s});
        if (it != slots_.end()) slots_[{c.to, s}] = it->second;
      }
    }
  }
  // Every position the sequence holds reads its own prefix's KV.
  bool Consistent(const KvBlockTable& t, SequenceId seq, const std::vector<int32_t>& tokens) const {
    for (int pos = 0; pos < static_cast<int>(tokens.size()); ++pos) {
      auto it = slots_.find({t.BlockOf(seq, pos), pos % bt_});
      if (it == slots_.end() || it->second != PrefixHash(tokens, pos)) return false;
    }
    return true;
  }

 private:
  static uint64_t PrefixHash(const std::vector<int32_t>& tokens, int pos) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i <= pos; ++i) h = (h ^ static_cast<uint32_t>(tokens[static_cast<size_t>(i)])) * 1099511628211ull;
    return h;
  }
  int bt_;
  std::map<std::pair<int, int>, uint64_t> slots_;
};

TEST(KvBlockTableTest, RandomOperationsNeverLetASequenceReadAnotherPrefix) {
  constexpr int kBlockTokens = 4;
  KvBlockTable t(kBlockTokens, 40, 64);
  FakeKvStore store(kBlockTokens);
  std::mt19937 rng(20261130);
  std::map<SequenceId, std::vector<int32_t>> live;  // what each sequence should hold
  // Few distinct prompts over a tiny vocabulary, so prefixes collide often.
  const std::vector<std::vector<int32_t>> prompts = {Range(1, 30), Range(1, 9), {1, 2, 3, 4, 5, 6, 9, 9, 9, 9, 1, 2}};
  int attached = 0, copies_made = 0;
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 6);
    if (op == 0 && t.live_sequences() < 12) {  // a new sequence, sharing what it can
      const SequenceId s = t.NewSequence();
      std::vector<int32_t> prompt = prompts[rng() % prompts.size()];
      prompt.resize(1 + rng() % prompt.size());
      const int got = t.AttachCachedPrefix(s, prompt, static_cast<int>(prompt.size()) - 1);
      attached += got;
      live[s] = std::vector<int32_t>(prompt.begin(), prompt.begin() + got);
      const std::vector<int32_t> rest(prompt.begin() + got, prompt.end());
      if (t.Reserve(s, rest).ok()) {
        store.Write(t, s, prompt, got);
        t.Advance(s, static_cast<int>(rest.size()));
        live[s] = prompt;
      }
    } else if (live.empty()) {
      continue;
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      const SequenceId s = it->first;
      std::vector<int32_t>& tokens = it->second;
      if (op == 1) {  // decode a few tokens
        std::vector<int32_t> more(1 + rng() % 6);
        for (int32_t& m : more) m = static_cast<int32_t>(1 + rng() % 12);
        if (t.Reserve(s, more).ok()) {
          const int from = static_cast<int>(tokens.size());
          tokens.insert(tokens.end(), more.begin(), more.end());
          store.Write(t, s, tokens, from);
          t.Advance(s, static_cast<int>(more.size()));
        }
      } else if (op == 2) {  // truncate (a new turn diverging)
        std::vector<BlockCopy> copies;
        const int length = static_cast<int>(rng() % (tokens.size() + 1));
        if (t.Truncate(s, length, &copies).ok()) {
          store.Copy(copies);
          copies_made += static_cast<int>(copies.size());
          tokens.resize(static_cast<size_t>(length));
        }
      } else if (op == 3) {  // a step that fails: reserve, then roll back
        const int length = static_cast<int>(tokens.size());
        if (t.Reserve(s, Range(3, 5)).ok()) {
          std::vector<BlockCopy> copies;
          ASSERT_TRUE(t.Truncate(s, length, &copies).ok());
          EXPECT_TRUE(copies.empty());
        }
      } else if (op == 4) {
        t.FreeSequence(s);
        live.erase(it);
      } else {  // continue from the cache where the sequence stands
        const int got = t.AttachCachedPrefix(s, prompts[0], static_cast<int>(prompts[0].size()));
        if (got > 0) tokens.assign(prompts[0].begin(), prompts[0].begin() + static_cast<long>(tokens.size()) + got);
        attached += got;
      }
    }
    int logical = 0;
    for (const auto& [s, tokens] : live) {
      ASSERT_EQ(*t.Length(s), static_cast<int>(tokens.size()));
      ASSERT_TRUE(store.Consistent(t, s, tokens)) << "step " << step << ", sequence " << s;
      ASSERT_EQ(t.Tokens(s), tokens);
      logical += static_cast<int>(tokens.size());
    }
    ASSERT_EQ(t.logical_tokens(), logical);
    ASSERT_GE(t.used_tokens(), 0);
    ASSERT_LE(t.used_tokens(), 40 * kBlockTokens);
  }
  EXPECT_GT(attached, 1000) << "the run should share a lot";
  EXPECT_GT(copies_made, 50) << "and copy on write often";
  for (const auto& [s, tokens] : live) t.FreeSequence(s);
  EXPECT_EQ(t.used_tokens(), 0);
  EXPECT_EQ(t.shared_tokens(), 0);
  EXPECT_EQ(t.available_blocks(), 40);
}

}  // namespace
}  // namespace hetero
