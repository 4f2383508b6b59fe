// Session::SaveState and Engine::RestoreSession (the format: src/runtime/session_state.h).

#include "absl/strings/str_cat.h"
#include "hetero/engine.h"
#include "src/runtime/engine_impl.h"
#include "src/runtime/file_io.h"
#include "src/runtime/session_state.h"
#include "src/runtime/status_macros.h"

namespace hetero {

namespace {

// What a state must match to restore here: the KV's shape and the vocabulary (the tokens
// the KV and the conversation were encoded with), not the weights' quantization.
internal::SessionStateModel StateModel(Engine::Impl& engine) {
  const ModelConfig& c = engine.model->config();
  internal::SessionStateModel m;
  m.layout = KvBlockLayout{c.n_layers, c.n_kv_heads, c.head_dim, BackendRequest{}.kv_block_tokens};
  const Tokenizer& tokenizer = *engine.tokenizer_owned;
  m.n_vocab = static_cast<uint32_t>(tokenizer.vocab_size());
  // Every token's text, once per engine (tens of thousands of tokens), not once per save.
  std::call_once(engine.vocabulary_hash_once, [&] {
    uint64_t hash = internal::Fnv1a64("");
    for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
      hash = internal::Fnv1a64(tokenizer.TokenText(id), hash);
      hash = internal::Fnv1a64(std::string_view("\0", 1), hash);  // token boundaries count
    }
    engine.vocabulary_hash = hash;
  });
  m.vocabulary_hash = engine.vocabulary_hash;
  return m;
}

}  // namespace

absl::StatusOr<std::string> Session::SaveState() {
  State& s = *state_;
  internal::SessionStateData data;
  data.model = StateModel(*s.engine);
  {
    MutexLock lock(&s.mu);
    if (s.running) return absl::FailedPreconditionError("SaveState: a Run is in progress on this session");
    // Marked running while the KV is copied without the lock, so that eviction (which locks
    // every session from a worker thread) neither waits on the copy nor frees the KV under it.
    s.running = true;
    data.messages = s.messages;
    data.generated = s.generated;
    data.adapter = s.kv.adapter_name;
    data.adapter_scale = s.kv.adapter.scale;
  }
  absl::Status status = absl::OkStatus();
  if (s.kv.seq.has_value() && !s.kv.tokens.empty()) {
    // A copy of the KV through host memory; the session keeps its cache (a new sequence on
    // the same device, attaching whatever blocks are still shared).
    Backend& backend = s.engine->devices->Worker(s.kv.device).backend();
    absl::StatusOr<SavedSequence> saved = backend.SwapOut(*s.kv.seq);
    s.kv.seq.reset();
    if (saved.ok()) {
      saved->token_ids = s.kv.tokens;
      data.kv_tokens = s.kv.tokens;
      data.kv.assign(saved->data.data(), saved->data.data() + saved->data.size());
      absl::StatusOr<SequenceId> back = backend.SwapIn(*saved);
      if (back.ok()) {
        s.kv.seq = *back;
      } else {
        s.kv.tokens.clear();  // the next run encodes again; the state is saved either way
      }
    } else {
      s.kv.tokens.clear();
      status = saved.status();
    }
  }
  {
    MutexLock lock(&s.mu);
    s.running = false;
  }
  s.engine->devices->PokeAll();
  HETERO_RETURN_IF_ERROR(status);
  return internal::EncodeSessionState(data);
}

absl::Status Session::SaveStateToFile(const std::string& path) {
  HETERO_ASSIGN_OR_RETURN(std::string bytes, SaveState());
  absl::Status written = internal::WriteFileWhole(path, bytes);
  if (!written.ok()) return absl::Status(written.code(), absl::StrCat("SaveStateToFile: ", written.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Session>> Engine::RestoreSession(std::string_view state) {
  HETERO_ASSIGN_OR_RETURN(internal::SessionStateData data, internal::DecodeSessionState(state));
  const internal::SessionStateModel here = StateModel(*impl_);
  if (!(data.model == here)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RestoreSession: the state is of another model (", data.model.layout.n_layers, " layers, ",
        data.model.layout.n_kv_heads, " KV heads of ", data.model.layout.head_dim, ", ", data.model.n_vocab,
        " tokens; this engine's model: ", here.layout.n_layers, ", ", here.layout.n_kv_heads, " of ", here.layout.head_dim,
        ", ", here.n_vocab, data.model.vocabulary_hash != here.vocabulary_hash ? ", another vocabulary" : "", ")"));
  }
  // The session's adapter, loaded here under the same name (its KV was computed with it).
  absl::StatusOr<SequenceAdapter> adapter = impl_->FindAdapter(data.adapter, data.adapter_scale);
  if (!adapter.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("RestoreSession: the session used LoRA adapter '", data.adapter,
                                                      "': ", adapter.status().message()));
  }
  HETERO_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, NewSession());
  Session::State& s = *session->state_;
  MutexLock lock(&s.mu);
  s.kv.adapter_name = data.adapter;
  s.kv.adapter = *adapter;
  s.messages = std::move(data.messages);
  s.generated = std::move(data.generated);
  if (!data.kv_tokens.empty()) {
    SavedSequence saved;
    saved.tokens = static_cast<int>(data.kv_tokens.size());
    saved.adapter = s.kv.adapter;
    HETERO_ASSIGN_OR_RETURN(saved.data, HostMemoryPool::Default()->Allocate(data.kv.size()));
    std::copy(data.kv.begin(), data.kv.end(), saved.data.data());
    // Private blocks (no token ids): state from outside must never reach other sessions
    // through the shared-prefix cache. Host memory is where it is now: the CPU holds it
    // until a run is placed elsewhere.
    HETERO_ASSIGN_OR_RETURN(SequenceId seq, impl_->devices->cpu().backend->SwapIn(saved));
    s.kv.device = Device::kCpu;
    s.kv.seq = seq;
    s.kv.tokens = std::move(data.kv_tokens);
  }
  return session;
}

absl::StatusOr<std::unique_ptr<Session>> Engine::RestoreSessionFromFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = internal::ReadFileBounded(path, internal::kMaxSessionStateBytes);
  if (!bytes.ok()) return absl::Status(bytes.status().code(), absl::StrCat("RestoreSessionFromFile: ", bytes.status().message()));
  return RestoreSession(*bytes);
}

}  // namespace hetero
