#include "src/runtime/tokenizer/sentence_piece_encoder.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "src/runtime/tokenizer/utf8.h"

namespace hetero {
namespace {

constexpr char kSpaceMarker[] = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

// "<0x41>" -> 0x41; -1 when `text` is not a byte token's text.
int ParseByteToken(absl::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]);
  const int lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SentencePieceEncoder>> SentencePieceEncoder::Create(const Vocab& vocab) {
  auto enc = std::unique_ptr<SentencePieceEncoder>(new SentencePieceEncoder(vocab));
  enc->byte_token_.fill(-1);
  enc->token_bytes_.resize(vocab.tokens.size());
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    const std::string& text = vocab.tokens[id];
    if (vocab.types[id] == TokenType::kByte) {
      const int b = ParseByteToken(text);
      if (b < 0) {
        return absl::InvalidArgumentError(absl::StrCat("tokenizer: byte token ", id, " '",
                                                       PrintableName(text), "' is not of the form <0xNN>"));
      }
      if (enc->byte_token_[b] < 0) enc->byte_token_[b] = static_cast<int32_t>(id);
      enc->token_bytes_[id] = std::string(1, static_cast<char>(b));
    } else if (vocab.types[id] == TokenType::kControl || vocab.types[id] == TokenType::kUserDefined) {
      enc->token_bytes_[id] = text;
    } else {
      enc->token_bytes_[id] = absl::StrReplaceAll(text, {{kSpaceMarker, " "}});
    }
  }
  return enc;
}

absl::Status SentencePieceEncoder::Emit(absl::string_view piece, std::vector<int32_t>& out) const {
  if (const int32_t id = vocab_.Find(piece);
      id >= 0 && vocab_.types[id] != TokenType::kControl && vocab_.types[id] != TokenType::kUnused) {
    out.push_back(id);
    return absl::OkStatus();
  }
  // Byte fallback when every byte has its token; otherwise the unknown token for the piece.
  bool all_bytes = true;
  for (char c : piece) all_bytes &= byte_token_[static_cast<uint8_t>(c)] >= 0;
  if (all_bytes) {
    for (char c : piece) out.push_back(byte_token_[static_cast<uint8_t>(c)]);
    return absl::OkStatus();
  }
  if (vocab_.unk < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tokenizer: '%s' has no token, no byte fallback and no unknown token", PrintableName(piece)));
  }
  out.push_back(vocab_.unk);
  return absl::OkStatus();
}

absl::Status SentencePieceEncoder::Encode(absl::string_view text, bool prefix_space,
                                          std::vector<int32_t>& out) const {
  if (text.empty()) return absl::OkStatus();
  std::string escaped = prefix_space ? kSpaceMarker : "";
  escaped += absl::StrReplaceAll(text, {{" ", kSpaceMarker}});

  // Symbols are characters (invalid bytes stand alone); merging joins neighbours.
  struct Symbol {
    size_t begin;
    size_t size;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < escaped.size();) {
    size_t n = ValidUtf8SequenceLength(absl::string_view(escaped).substr(i));
    if (n == 0) n = 1;
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({i, n, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
    i += n;
  }
  struct Candidate {
    float score;
    int32_t left;
    int32_t right;
    size_t size;  // merged length, to detect stale entries
    bool operator<(const Candidate& o) const {  // highest score first, then leftmost
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Candidate> queue;
  auto push = [&](int32_t left) {
    if (left < 0 || symbols[left].next < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[l.next];
    const int32_t id = vocab_.Find(absl::string_view(escaped).substr(l.begin, l.size + r.size));
    // Only ordinary pieces are merge results: never control, unknown, byte or unused ones.
    if (id < 0 || (vocab_.types[id] != TokenType::kNormal && vocab_.types[id] != TokenType::kUserDefined)) return;
    queue.push({vocab_.scores[id], left, l.next, l.size + r.size});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    if (left.size == 0 || left.next != c.right || left.size + symbols[c.right].size != c.size) continue;
    Symbol& right = symbols[c.right];
    left.size += right.size;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.size = 0;
    push(left.prev);
    push(c.left);
  }
  for (int32_t i = 0; i >= 0 && i < static_cast<int32_t>(symbols.size()); i = symbols[i].next) {
    absl::Status s = Emit(absl::string_view(escaped).substr(symbols[i].begin, symbols[i].size), out);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace hetero
