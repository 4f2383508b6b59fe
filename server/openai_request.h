// The OpenAI API's request bodies translated into hetero's public options: what
// hetero-serve accepts, and an error naming the field (as OpenAI's `param`) for everything
// else. Pure functions of the JSON text, so they are tested and fuzzed without a model.
#ifndef HETERO_SERVER_OPENAI_REQUEST_H_
#define HETERO_SERVER_OPENAI_REQUEST_H_

#include <string>
#include <vector>

#include "hetero/chat.h"
#include "hetero/engine.h"
#include "hetero/tools.h"

namespace hetero::serve {

// An error for the client: HTTP status, OpenAI's error type, message and the field.
struct RequestError {
  int http_status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> history;  // every message before the last (all of them when `resume`)
  std::string user_message;          // the last message, a user turn
  bool resume = false;               // the last message is a tool result: Session::Continue
  RunOptions run;                    // sampling, stop, max_tokens, response schema, logprobs
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
};

struct CompletionRequest {
  std::string model;
  std::string prompt;
  CompletionOptions options;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
};

struct EmbeddingRequest {
  std::string model;
  std::vector<std::string> inputs;
  bool base64 = false;  // encoding_format "base64": little-endian float32, base64 (the openai client's default)
};

// Each fills `out` or returns false with `error` set. `max_tokens_default` applies when the
// request names none.
bool ParseChatRequest(const std::string& body, int max_tokens_default, ChatRequest& out, RequestError& error);
bool ParseCompletionRequest(const std::string& body, int max_tokens_default, CompletionRequest& out,
                            RequestError& error);
bool ParseEmbeddingRequest(const std::string& body, EmbeddingRequest& out, RequestError& error);

// OpenAI's error object: {"error": {"message", "type", "param", "code"}}.
std::string ErrorJson(const RequestError& error);

}  // namespace hetero::serve

#endif  // HETERO_SERVER_OPENAI_REQUEST_H_
