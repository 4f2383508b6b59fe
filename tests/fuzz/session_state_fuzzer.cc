// Fuzzes the session-state decoder (src/runtime/session_state.h), with and without its
// checksum. Properties checked on every input:
//  - decoding never crashes and refuses with InvalidArgument and a message;
//  - a state it accepts encodes back to bytes that decode to the same state (round trip).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "src/runtime/session_state.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "session_state_fuzzer: property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (bool verify : {false, true}) {
    absl::StatusOr<hetero::internal::SessionStateData> state = hetero::internal::DecodeSessionState(bytes, verify);
    if (!state.ok()) {
      Check(state.status().code() == absl::StatusCode::kInvalidArgument, "refusals are InvalidArgument");
      Check(!state.status().message().empty(), "refusals say why");
      continue;
    }
    const std::string again = hetero::internal::EncodeSessionState(*state);
    absl::StatusOr<hetero::internal::SessionStateData> back = hetero::internal::DecodeSessionState(again);
    Check(back.ok(), "an accepted state re-encodes to a valid one");
    Check(back->model == state->model && back->kv_tokens == state->kv_tokens &&
              back->messages.size() == state->messages.size() && back->generated.size() == state->generated.size() &&
              back->kv.size() == state->kv.size(),
          "the round trip keeps the state");
  }
  return 0;
}
