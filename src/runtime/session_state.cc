#include "src/runtime/session_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "hetero/tools.h"

namespace hetero::internal {

namespace {

constexpr char kMagic[8] = {'H', 'E', 'T', 'S', 'T', 'A', 'T', 'E'};
// The most a field may claim, far above any real state, so a hostile length fails before
// any allocation: 1 << 24 KV tokens, 16 Gi floats of KV, 16 MiB of conversation (its JSON
// tree takes some twenty times that), nesting 8 deep (the format needs 5).
constexpr uint64_t kMaxKvTokens = uint64_t{1} << 24;
constexpr uint64_t kMaxKvFloats = uint64_t{16} << 30;
constexpr uint64_t kMaxConversationBytes = uint64_t{16} << 20;
constexpr int kMaxConversationDepth = 8;

// How deep JSON text nests, outside strings: refused before a tree is built.
int NestingDepth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

template <typename T>
void Put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 Linux: little-endian
  out.append(bytes, sizeof(T));
}

class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  absl::StatusOr<T> Get(const char* field) {
    if (bytes_.size() - at_ < sizeof(T)) return Truncated(field);
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  absl::StatusOr<std::string_view> Bytes(uint64_t n, const char* field) {
    if (bytes_.size() - at_ < n) return Truncated(field);
    std::string_view out = bytes_.substr(at_, n);
    at_ += n;
    return out;
  }
  size_t left() const { return bytes_.size() - at_; }

 private:
  absl::Status Truncated(const char* field) const {
    return absl::InvalidArgumentError(
        absl::StrCat("session state: truncated at byte ", at_, " of ", bytes_.size(), " (reading ", field, ")"));
  }
  std::string_view bytes_;
  size_t at_ = 0;
};

#define HETERO_STATE_GET(var, type, reader, field)                        \
  type var;                                                               \
  {                                                                       \
    absl::StatusOr<type> value_ = (reader).Get<type>(field);              \
    if (!value_.ok()) return value_.status();                             \
    var = *value_;                                                        \
  }

nlohmann::json ConversationJson(const SessionStateData& s) {
  nlohmann::json messages = nlohmann::json::array();
  for (const ChatMessage& m : s.messages) {
    nlohmann::json calls = nlohmann::json::array();
    for (const ToolCall& c : m.tool_calls) calls.push_back({{"id", c.id}, {"name", c.name}, {"arguments", c.arguments_json}});
    messages.push_back({{"role", m.role}, {"content", m.content}, {"tool_calls", calls},
                        {"tool_call_id", m.tool_call_id}, {"name", m.name}});
  }
  nlohmann::json generated = nlohmann::json::array();
  for (const auto& [index, turn] : s.generated) {
    generated.push_back({{"message", index}, {"format", static_cast<int>(turn.format)}, {"text", turn.text}});
  }
  nlohmann::json j = {{"messages", messages}, {"generated", generated}};
  if (!s.adapter.empty()) j["adapter"] = {{"name", s.adapter}, {"scale", s.adapter_scale}};
  return j;
}

absl::Status Malformed(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("session state: conversation ", what));
}

// A string field of a JSON object, or an error naming it.
absl::StatusOr<std::string> StringField(const nlohmann::json& o, const char* key, const std::string& where) {
  if (!o.is_object() || !o.contains(key) || !o[key].is_string()) {
    return Malformed(absl::StrCat(where, ".", key, " is missing or not a string"));
  }
  return o[key].get<std::string>();
}

absl::Status ParseConversation(std::string_view text, SessionStateData& s) {
  if (NestingDepth(text) > kMaxConversationDepth) return Malformed("nests deeper than the format does");
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Malformed("is not a JSON object");
  if (!j.contains("messages") || !j["messages"].is_array()) return Malformed("has no messages array");
  if (!j.contains("generated") || !j["generated"].is_array()) return Malformed("has no generated array");
  for (size_t i = 0; i < j["messages"].size(); ++i) {
    const nlohmann::json& m = j["messages"][i];
    const std::string where = absl::StrCat("messages[", i, "]");
    ChatMessage message;
    absl::StatusOr<std::string> v = StringField(m, "role", where);
    if (!v.ok()) return v.status();
    message.role = *v;
    for (auto [key, field] : {std::pair{"content", &message.content}, std::pair{"tool_call_id", &message.tool_call_id},
                              std::pair{"name", &message.name}}) {
      v = StringField(m, key, where);
      if (!v.ok()) return v.status();
      *field = *v;
    }
    if (!m.contains("tool_calls") || !m["tool_calls"].is_array()) return Malformed(absl::StrCat(where, ".tool_calls is not an array"));
    for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
      const nlohmann::json& c = m["tool_calls"][k];
      const std::string cw = absl::StrCat(where, ".tool_calls[", k, "]");
      ToolCall call;
      for (auto [key, field] : {std::pair{"id", &call.id}, std::pair{"name", &call.name},
                                std::pair{"arguments", &call.arguments_json}}) {
        v = StringField(c, key, cw);
        if (!v.ok()) return v.status();
        *field = *v;
      }
      message.tool_calls.push_back(std::move(call));
    }
    s.messages.push_back(std::move(message));
  }
  for (size_t i = 0; i < j["generated"].size(); ++i) {
    const nlohmann::json& g = j["generated"][i];
    const std::string where = absl::StrCat("generated[", i, "]");
    if (!g.is_object() || !g.contains("message") || !g["message"].is_number_unsigned() ||
        g["message"].get<uint64_t>() >= s.messages.size()) {
      return Malformed(absl::StrCat(where, ".message is not the index of a message"));
    }
    if (!g.contains("format") || !g["format"].is_number_integer() || g["format"].get<int64_t>() < 0 ||
        g["format"].get<int64_t>() > static_cast<int64_t>(ToolCallFormat::kGranite)) {
      return Malformed(absl::StrCat(where, ".format is not a tool-call format"));
    }
    absl::StatusOr<std::string> text = StringField(g, "text", where);
    if (!text.ok()) return text.status();
    s.generated[g["message"].get<size_t>()] = {static_cast<ToolCallFormat>(g["format"].get<int>()), *text};
  }
  if (j.contains("adapter")) {
    const nlohmann::json& a = j["adapter"];
    absl::StatusOr<std::string> name = StringField(a, "name", "adapter");
    if (!name.ok()) return name.status();
    if (name->empty() || !a.contains("scale") || !a["scale"].is_number() ||
        !std::isfinite(a["scale"].get<double>())) {
      return Malformed("adapter has no name or no finite scale");
    }
    s.adapter = *name;
    s.adapter_scale = a["scale"].get<float>();
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t Fnv1a64(std::string_view bytes, uint64_t hash) {
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

std::string EncodeSessionState(const SessionStateData& s) {
  std::string out(kMagic, sizeof kMagic);
  Put<uint32_t>(out, kSessionStateVersion);
  Put<uint32_t>(out, 0);
  for (int v : {s.model.layout.n_layers, s.model.layout.n_kv_heads, s.model.layout.head_dim}) Put<uint32_t>(out, v);
  Put<uint32_t>(out, s.model.n_vocab);
  Put<uint32_t>(out, s.model.layout.block_tokens);
  Put<uint64_t>(out, s.model.vocabulary_hash);
  const std::string conversation = ConversationJson(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  Put<uint64_t>(out, conversation.size());
  out += conversation;
  Put<uint32_t>(out, static_cast<uint32_t>(s.kv_tokens.size()));
  out.append(reinterpret_cast<const char*>(s.kv_tokens.data()), s.kv_tokens.size() * sizeof(int32_t));
  Put<uint64_t>(out, s.kv.size());
  out.append(reinterpret_cast<const char*>(s.kv.data()), s.kv.size() * sizeof(float));
  Put<uint64_t>(out, Fnv1a64(out));
  return out;
}

absl::StatusOr<SessionStateData> DecodeSessionState(std::string_view bytes, bool verify_checksum) {
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return absl::InvalidArgumentError("session state: not a hetero session state (no HETSTATE header)");
  }
  if (bytes.size() < sizeof kMagic + 8 + 8) {
    return absl::InvalidArgumentError(absl::StrCat("session state: truncated (", bytes.size(), " bytes)"));
  }
  if (verify_checksum) {
    uint64_t stored;
    std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
    if (stored != Fnv1a64(bytes.substr(0, bytes.size() - 8))) {
      return absl::InvalidArgumentError("session state: checksum mismatch (corrupt or truncated)");
    }
  }
  Reader r(bytes.substr(sizeof kMagic, bytes.size() - sizeof kMagic - 8));
  HETERO_STATE_GET(version, uint32_t, r, "version");
  if (version != kSessionStateVersion) {
    return absl::InvalidArgumentError(absl::StrCat("session state: version ", version, ", this library reads version ",
                                                   kSessionStateVersion));
  }
  HETERO_STATE_GET(reserved, uint32_t, r, "reserved");
  if (reserved != 0) return absl::InvalidArgumentError("session state: reserved field is not 0");
  SessionStateData s;
  HETERO_STATE_GET(n_layers, uint32_t, r, "n_layers");
  HETERO_STATE_GET(n_kv_heads, uint32_t, r, "n_kv_heads");
  HETERO_STATE_GET(head_dim, uint32_t, r, "head_dim");
  HETERO_STATE_GET(n_vocab, uint32_t, r, "n_vocab");
  HETERO_STATE_GET(block_tokens, uint32_t, r, "block_tokens");
  HETERO_STATE_GET(vocabulary_hash, uint64_t, r, "vocabulary_hash");
  // Caps that keep every product below 2^64: a block is at most 2^47 floats here, and is
  // then held to kMaxKvFloats.
  for (uint32_t v : {n_layers, n_kv_heads, head_dim, block_tokens}) {
    if (v == 0 || v > 4096) return absl::InvalidArgumentError("session state: a model dimension is 0 or above 4096");
  }
  s.model.layout = KvBlockLayout{static_cast<int>(n_layers), static_cast<int>(n_kv_heads), static_cast<int>(head_dim),
                                 static_cast<int>(block_tokens)};
  s.model.n_vocab = n_vocab;
  s.model.vocabulary_hash = vocabulary_hash;
  if (s.model.layout.block_floats() > kMaxKvFloats) {
    return absl::InvalidArgumentError("session state: a KV block would be larger than any state");
  }
  HETERO_STATE_GET(conversation_bytes, uint64_t, r, "conversation length");
  if (conversation_bytes > kMaxConversationBytes) return absl::InvalidArgumentError("session state: conversation too long");
  absl::StatusOr<std::string_view> conversation = r.Bytes(conversation_bytes, "conversation");
  if (!conversation.ok()) return conversation.status();
  if (absl::Status parsed = ParseConversation(*conversation, s); !parsed.ok()) return parsed;
  HETERO_STATE_GET(kv_tokens, uint32_t, r, "KV token count");
  if (kv_tokens > kMaxKvTokens) return absl::InvalidArgumentError("session state: too many KV tokens");
  absl::StatusOr<std::string_view> ids = r.Bytes(uint64_t{kv_tokens} * sizeof(int32_t), "KV token ids");
  if (!ids.ok()) return ids.status();
  s.kv_tokens.resize(kv_tokens);
  if (kv_tokens > 0) std::memcpy(s.kv_tokens.data(), ids->data(), ids->size());
  for (uint32_t i = 0; i < kv_tokens; ++i) {
    if (s.kv_tokens[i] < 0 || static_cast<uint32_t>(s.kv_tokens[i]) >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("session state: KV token ", i, " is ", s.kv_tokens[i],
                                                     ", outside the vocabulary"));
    }
  }
  HETERO_STATE_GET(kv_floats, uint64_t, r, "KV length");
  const uint64_t blocks = (uint64_t{kv_tokens} + block_tokens - 1) / block_tokens;
  if (kv_floats > kMaxKvFloats || kv_floats != blocks * s.model.layout.block_floats()) {
    return absl::InvalidArgumentError(absl::StrCat("session state: ", kv_floats, " KV floats for ", kv_tokens,
                                                   " tokens in blocks of ", block_tokens, " (expected ",
                                                   blocks * s.model.layout.block_floats(), ")"));
  }
  absl::StatusOr<std::string_view> kv = r.Bytes(kv_floats * sizeof(float), "KV");
  if (!kv.ok()) return kv.status();
  s.kv.resize(kv_floats);
  if (kv_floats > 0) std::memcpy(s.kv.data(), kv->data(), kv->size());
  for (size_t i = 0; i < s.kv.size(); ++i) {
    if (!std::isfinite(s.kv[i])) {
      return absl::InvalidArgumentError(absl::StrCat("session state: KV value ", i, " is not finite"));
    }
  }
  if (r.left() != 0) return absl::InvalidArgumentError(absl::StrCat("session state: ", r.left(), " unexpected bytes at the end"));
  return s;
}

}  // namespace hetero::internal
