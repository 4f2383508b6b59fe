// A session's state as bytes (Session::SaveState, Engine::RestoreSession): the conversation,
// the assistant turns as generated with tools, and the KV cache in the shared block layout
// (src/runtime/kv_layout.h, float32), so it restores on any device and into an engine whose
// model has the same shape and vocabulary, whatever its weights' quantization.
//
// Format, little-endian, version 1:
//   "HETSTATE" | u32 version | u32 reserved (0)
//   model: u32 n_layers, n_kv_heads, head_dim, n_vocab, block_tokens | u64 vocabulary hash
//   u64 conversation JSON bytes | JSON (messages and generated turns)
//   u32 KV tokens | i32 token ids | u64 KV floats | f32 floats (whole blocks)
//   u64 FNV-1a 64 of everything before it
// Decoding checks every length against what is left before it reads, so a hostile or
// truncated buffer is an InvalidArgument naming the field, never a crash.
#ifndef HETERO_RUNTIME_SESSION_STATE_H_
#define HETERO_RUNTIME_SESSION_STATE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/chat.h"
#include "src/runtime/kv_layout.h"
#include "src/runtime/tools/tool_prompt.h"

namespace hetero::internal {

inline constexpr uint32_t kSessionStateVersion = 1;
// No state is larger (16 Gi floats of KV and 16 MiB of conversation, with room to spare).
inline constexpr uint64_t kMaxSessionStateBytes = uint64_t{80} << 30;

struct SessionStateModel {
  KvBlockLayout layout;
  uint32_t n_vocab = 0;
  uint64_t vocabulary_hash = 0;
  bool operator==(const SessionStateModel& o) const {
    return layout.n_layers == o.layout.n_layers && layout.n_kv_heads == o.layout.n_kv_heads &&
           layout.head_dim == o.layout.head_dim && layout.block_tokens == o.layout.block_tokens &&
           n_vocab == o.n_vocab && vocabulary_hash == o.vocabulary_hash;
  }
};

struct SessionStateData {
  SessionStateModel model;
  std::vector<ChatMessage> messages;
  GeneratedTurns generated;
  std::vector<int32_t> kv_tokens;  // what the KV holds
  std::vector<float> kv;           // ceil(kv_tokens / block_tokens) blocks; empty without KV
  // The LoRA adapter the session uses (Session::SetAdapter), by name; empty: none. In the
  // conversation JSON as "adapter": {"name", "scale"}, absent without one.
  std::string adapter;
  float adapter_scale = 1.0f;
};

std::string EncodeSessionState(const SessionStateData& state);
// `verify_checksum` false skips only the checksum (the fuzz target reaches the parser so).
absl::StatusOr<SessionStateData> DecodeSessionState(std::string_view bytes, bool verify_checksum = true);

// FNV-1a 64.
uint64_t Fnv1a64(std::string_view bytes, uint64_t hash = 14695981039346656037ull);

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_SESSION_STATE_H_
