// Fuzzes the constrained-decoding mask builder (ToolCallConstraint) over the default model's
// vocabulary. The input is FLAGS SCHEMA \0 CHOICES: FLAGS picks the format (generic, Hermes,
// Llama 3.1) and a token budget; SCHEMA is the parameters of a tool "fuzz" registered beside
// a fixed one; each pair of CHOICES bytes picks the next token among those the mask allows.
// Properties checked at every step:
//  - the mask and the per-token check agree (on the chosen token and 64 others);
//  - Mask() reports "none allowed" exactly when every logit is masked, and the walk never
//    reaches a dead end before the call is complete;
// and at the end of the walk:
//  - when the end-of-generation token was chosen, every call in the text parses and its
//    arguments validate (generic replies are then whole JSON documents);
//  - when the budget ran out and the call could fit in it from the start, the call is closed.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hetero/model.h"
#include "hetero/tokenizer.h"
#include "hetero/tools.h"
#include "nlohmann/json.hpp"
#include "src/runtime/tools/json_matcher.h"
#include "src/runtime/tools/json_schema.h"
#include "src/runtime/tools/tool_call_constraint.h"

namespace {

using hetero::ToolCallFormat;
using hetero::internal::Grammar;
using hetero::internal::SchemaNode;
using hetero::internal::ToolCallConstraint;
using hetero::internal::VocabBytes;

std::unique_ptr<hetero::Model> g_model;
std::unique_ptr<hetero::Tokenizer> g_tokenizer;
std::shared_ptr<const VocabBytes> g_vocab;
std::vector<int32_t> g_hermes_marker;  // "<tool_call>\n" as tokens
std::vector<int32_t> g_granite_marker;  // "<|tool_call|>" as tokens

void Check(bool ok, const char* what, const std::string& text = "") {
  if (!ok) {
    std::fprintf(stderr, "constraint_mask_fuzzer: property violated: %s\ntext so far: %s\n", what, text.c_str());
    std::abort();
  }
}

hetero::Tool MakeTool(std::string name, std::string schema) {
  hetero::Tool tool;
  tool.name = std::move(name);
  tool.description = "fuzzed";
  tool.parameters_json = std::move(schema);
  tool.handler = [](const std::string& a) -> absl::StatusOr<std::string> { return a; };
  return tool;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto path = hetero::ResolveModelPath("");
  auto model = path.ok() ? hetero::Model::Load(*path) : path.status();
  auto tokenizer = model.ok() ? hetero::Tokenizer::Create(**model) : model.status();
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "constraint_mask_fuzzer: %s\n", std::string(tokenizer.status().message()).c_str());
    std::exit(1);
  }
  g_model = std::move(*model);
  g_tokenizer = std::move(*tokenizer);
  g_vocab = std::make_shared<VocabBytes>(*g_tokenizer);
  g_hermes_marker = *g_tokenizer->Encode("<tool_call>\n", /*add_bos=*/false, /*parse_special=*/false);
  g_granite_marker = *g_tokenizer->Encode("<|tool_call|>", /*add_bos=*/false, /*parse_special=*/false);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const ToolCallFormat format = data[0] % 4 == 0   ? ToolCallFormat::kGeneric
                                : data[0] % 4 == 1 ? ToolCallFormat::kHermes
                                : data[0] % 4 == 2 ? ToolCallFormat::kLlama3
                                                   : ToolCallFormat::kGranite;
  const int budget = 8 + data[1] % 56;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  const size_t nul = rest.find('\0');
  if (nul == std::string_view::npos) return 0;
  const std::string_view choices = rest.substr(nul + 1);

  hetero::ToolRegistry tools;
  if (!tools.Register(MakeTool("fuzz", std::string(rest.substr(0, nul)))).ok()) return 0;
  if (!tools.Register(MakeTool("add", R"({"type": "object", "properties": {"a": {"type": "number"},
      "b": {"type": "number"}}, "required": ["a", "b"], "additionalProperties": false})")).ok()) std::abort();
  const std::vector<std::string> names = {"fuzz", "add"};
  const std::vector<const SchemaNode*> schemas = {&tools.schema(0).root(), &tools.schema(1).root()};
  std::shared_ptr<const Grammar> grammar = ToolCallGrammar(format, names, schemas, /*max_calls=*/4, /*calls_only=*/false);
  ToolCallConstraint constraint(g_vocab, grammar, format);

  const int vocab = g_tokenizer->vocab_size();
  std::string text;
  int step = 0;
  if (format == ToolCallFormat::kHermes || format == ToolCallFormat::kGranite) {  // start inside a call
    for (int32_t id : format == ToolCallFormat::kHermes ? g_hermes_marker : g_granite_marker) {
      Check(constraint.Allows(id), "the marker is allowed");
      constraint.Accept(id);
      text += g_vocab->bytes[id];
      ++step;
    }
  }
  constraint.SetBudget(budget - step);
  const bool fits = constraint.completion_tokens() < budget - step;

  std::vector<float> logits(vocab);
  std::vector<int32_t> allowed;
  bool ended = false;
  size_t at = 0;
  uint32_t lcg = 12345u + static_cast<uint32_t>(size);
  for (; step < budget && !ended && at + 1 < choices.size(); ++step, at += 2) {
    constraint.SetBudget(budget - step);
    std::fill(logits.begin(), logits.end(), 0.0f);
    const bool any = constraint.Mask(absl::MakeSpan(logits));
    allowed.clear();
    for (int32_t id = 0; id < vocab; ++id) {
      if (std::isfinite(logits[id])) allowed.push_back(id);
    }
    Check(any == !allowed.empty(), "Mask() says whether any token is allowed", text);
    Check(any, "no dead end before the call is complete", text);
    for (int probe = 0; probe < 64; ++probe) {
      lcg = lcg * 1664525u + 1013904223u;
      const int32_t id = static_cast<int32_t>((lcg >> 8) % static_cast<uint32_t>(vocab));
      Check(constraint.Allows(id) == std::isfinite(logits[id]), "mask and per-token check agree", text);
    }
    const uint32_t pick = static_cast<uint8_t>(choices[at]) | static_cast<uint8_t>(choices[at + 1]) << 8;
    const int32_t token = allowed[pick % allowed.size()];
    Check(constraint.Allows(token), "the chosen token is allowed", text);
    constraint.Accept(token);
    if (g_tokenizer->IsEndOfGeneration(token)) {
      ended = true;
    } else {
      text += g_vocab->bytes[token];
    }
  }
  if (constraint.broken()) return 0;
  const bool out_of_budget = step == budget;
  if (!ended && !(out_of_budget && fits)) return 0;

  if (format == ToolCallFormat::kGeneric) {
    Check(!nlohmann::json::parse(text, nullptr, false).is_discarded(), "a generic reply is whole JSON", text);
  }
  const hetero::ParsedReply reply = hetero::ParseToolCalls(text, format);
  for (const hetero::ParsedToolCall& call : reply.calls) {
    Check(call.error.empty(), "every call parses", text);
    Check(tools.ValidateArguments(call.name, call.arguments_json).ok(), "every call's arguments validate", text);
  }
  if (format == ToolCallFormat::kHermes || format == ToolCallFormat::kGranite) {
    Check(!reply.calls.empty(), "the call was written", text);
  }
  return 0;
}
