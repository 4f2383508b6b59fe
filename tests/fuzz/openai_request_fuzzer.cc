// Fuzzes hetero-serve's request translation (server/openai_request.h): any body, for each
// endpoint, is accepted or refused with a 400 naming a message, never a crash; the error
// JSON is always valid JSON.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "nlohmann/json.hpp"
#include "server/openai_request.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "openai_request_fuzzer: property violated: %s\n", what);
    std::abort();
  }
}

void CheckError(const hetero::serve::RequestError& e) {
  Check(e.http_status == 400 && !e.message.empty(), "a refusal is a 400 with a message");
  Check(!nlohmann::json::parse(hetero::serve::ErrorJson(e), nullptr, false).is_discarded(), "error JSON parses");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  {
    hetero::serve::ChatRequest r;
    hetero::serve::RequestError e;
    if (hetero::serve::ParseChatRequest(body, 64, r, e)) {
      Check(r.run.max_tokens >= 1, "max_tokens is positive");
      for (const std::string& s : r.run.stop) Check(!s.empty(), "no empty stop string");
    } else {
      CheckError(e);
    }
  }
  {
    hetero::serve::CompletionRequest r;
    hetero::serve::RequestError e;
    if (hetero::serve::ParseCompletionRequest(body, 64, r, e)) {
      Check(!r.prompt.empty(), "a prompt");
    } else {
      CheckError(e);
    }
  }
  {
    hetero::serve::EmbeddingRequest r;
    hetero::serve::RequestError e;
    if (hetero::serve::ParseEmbeddingRequest(body, r, e)) {
      Check(!r.inputs.empty(), "inputs");
    } else {
      CheckError(e);
    }
  }
  return 0;
}
