#include "src/runtime/tokenizer/byte_pair_encoder.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "src/runtime/tokenizer/utf8.h"

namespace hetero {
namespace {

// GPT-2's reversible byte -> character map: printable Latin-1 bytes map to themselves,
// the other 68 bytes to U+0100 onwards, in byte order.
std::array<uint32_t, 256> ByteToCodePoint() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[b] = printable ? b : next++;
  }
  return map;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BytePairEncoder>> BytePairEncoder::Create(const Vocab& vocab,
                                                                         std::unique_ptr<PreTokenizer> pre) {
  auto enc = std::unique_ptr<BytePairEncoder>(new BytePairEncoder(vocab, std::move(pre)));
  const std::array<uint32_t, 256> byte_cp = ByteToCodePoint();
  absl::flat_hash_map<uint32_t, uint8_t> cp_to_byte;
  for (int b = 0; b < 256; ++b) {
    AppendUtf8(byte_cp[b], enc->byte_char_[b]);
    enc->byte_token_[b] = vocab.Find(enc->byte_char_[b]);
    cp_to_byte[byte_cp[b]] = static_cast<uint8_t>(b);
  }

  // Merges: rank = position in the list. Both halves and the result must be tokens.
  enc->merges_.reserve(vocab.merges.size());
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const auto& [left, right] = vocab.merges[rank];
    const int32_t l = vocab.Find(left);
    const int32_t r = vocab.Find(right);
    const int32_t m = vocab.Find(left + right);
    if (l < 0 || r < 0 || m < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer: merge ", rank, " '", PrintableName(left), " ", PrintableName(right),
          "' refers to a token missing from the vocabulary"));
    }
    // The first (lowest-rank) occurrence of a pair wins.
    enc->merges_.emplace((static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r),
                         Merge{static_cast<int32_t>(rank), m});
  }

  // What each token decodes to.
  enc->token_bytes_.resize(vocab.tokens.size());
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    const std::string& text = vocab.tokens[id];
    if (vocab.types[id] == TokenType::kControl || vocab.types[id] == TokenType::kUserDefined) {
      enc->token_bytes_[id] = text;
      continue;
    }
    std::string bytes;
    size_t i = 0;
    while (i < text.size()) {
      const size_t n = ValidUtf8SequenceLength(absl::string_view(text).substr(i));
      if (n == 0) {  // not UTF-8: keep the byte as it is
        bytes.push_back(text[i++]);
        continue;
      }
      uint32_t cp = 0;
      const auto* p = reinterpret_cast<const uint8_t*>(text.data() + i);
      if (n == 1) cp = p[0];
      if (n == 2) cp = ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
      if (n == 3) cp = ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
      if (n == 4) cp = ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
      auto it = cp_to_byte.find(cp);
      if (it != cp_to_byte.end()) {
        bytes.push_back(static_cast<char>(it->second));
      } else {
        bytes.append(text, i, n);  // a character outside the byte map stands for itself
      }
      i += n;
    }
    enc->token_bytes_[id] = std::move(bytes);
  }
  return enc;
}

absl::Status BytePairEncoder::EncodePiece(absl::string_view piece, std::vector<int32_t>& out) const {
  if (pre_->ignore_merges()) {
    std::string mapped;
    for (char c : piece) mapped += byte_char_[static_cast<uint8_t>(c)];
    if (const int32_t id = vocab_.Find(mapped); id >= 0 && vocab_.types[id] == TokenType::kNormal) {
      out.push_back(id);
      return absl::OkStatus();
    }
  }
  // One symbol per byte, in a doubly linked list over the piece.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  // A byte whose character is not in the vocabulary (SmolLM2 lacks a few control bytes)
  // is dropped before merging, as Hugging Face tokenizers does (its BPE has no unknown
  // token here), so its neighbours can still merge.
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (char c : piece) {
    const int32_t id = byte_token_[static_cast<uint8_t>(c)];
    if (id < 0) continue;
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
  }
  const auto n = static_cast<int32_t>(symbols.size());
  // Candidate merges, lowest rank first, then leftmost; stale entries are skipped.
  struct Candidate {
    int32_t rank;
    int32_t left;
    int32_t right;
    bool operator<(const Candidate& o) const {  // priority_queue pops the "largest"
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate> queue;
  auto push = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    if (const Merge* m = FindMerge(symbols[left].id, symbols[right].id)) queue.push({m->rank, left, right});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    if (left.id < 0 || left.next != c.right) continue;  // merged away or neighbour changed
    const Merge* m = FindMerge(left.id, symbols[c.right].id);
    if (m == nullptr || m->rank != c.rank) continue;
    left.id = m->merged;
    Symbol& right = symbols[c.right];
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -1;
    push(left.prev);
    push(c.left);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) out.push_back(symbols[i].id);
  return absl::OkStatus();
}

absl::Status BytePairEncoder::Encode(absl::string_view text, std::vector<int32_t>& out) const {
  std::vector<absl::string_view> pieces;
  for (const Utf8Segment& segment : SplitValidUtf8(text)) {
    if (!segment.valid) {
      absl::Status s = EncodePiece(segment.bytes, out);
      if (!s.ok()) return s;
      continue;
    }
    pieces.clear();
    absl::Status s = pre_->Split(segment.bytes, pieces);
    if (!s.ok()) return s;
    for (absl::string_view piece : pieces) {
      s = EncodePiece(piece, out);
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace hetero
