// Fuzzes the tool-calling input surfaces. The first byte picks the target:
//  even: the reply parser and the streaming filter, on the rest as model output, for each
//        format. Properties: never crashes; a call without an error has a name and a JSON
//        object as arguments; the streamed text is valid to join (no crash on any split).
//  odd:  the schema compiler, the argument validator and the constrained-decoding matcher.
//        The rest is "SCHEMA\0ARGUMENTS". Properties: registration never crashes; when it
//        succeeds, any ARGUMENTS that the matcher accepts as a complete value also pass
//        the validator (the matcher allows nothing the validator refuses).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "hetero/tools.h"
#include "nlohmann/json.hpp"
#include "src/runtime/tools/json_matcher.h"
#include "src/runtime/tools/json_schema.h"
#include "src/runtime/tools/reply_stream.h"

namespace {

void FuzzParser(std::string_view reply, uint8_t split_seed) {
  using hetero::ToolCallFormat;
  for (ToolCallFormat format :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3, ToolCallFormat::kGeneric, ToolCallFormat::kGranite}) {
    const hetero::ParsedReply parsed = hetero::ParseToolCalls(reply, format);
    for (const hetero::ParsedToolCall& call : parsed.calls) {
      if (!call.error.empty()) continue;
      const nlohmann::json args = nlohmann::json::parse(call.arguments_json, nullptr, false);
      if (args.is_discarded() || !args.is_object()) std::abort();
    }
    std::string streamed;
    hetero::internal::ReplyStream stream(format, [&streamed](std::string_view piece) {
      streamed.append(piece);
      return true;
    });
    // Pieces of 1..16 bytes, as a detokenizer would hand them over.
    size_t step = 1 + split_seed % 16;
    for (size_t at = 0; at < reply.size(); at += step) stream.Push(reply.substr(at, step));
    if (streamed.size() > 4 * reply.size() + 16) std::abort();  // unescaping never grows much
  }
}

void FuzzSchema(std::string_view input) {
  const size_t nul = input.find('\0');
  const std::string schema(input.substr(0, nul));
  const std::string arguments(nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1));
  hetero::ToolRegistry registry;
  hetero::Tool tool;
  tool.name = "fuzz";
  tool.description = "fuzzed schema";
  tool.parameters_json = schema;
  tool.handler = [](const std::string& a) -> absl::StatusOr<std::string> { return a; };
  if (!registry.Register(std::move(tool)).ok()) return;
  (void)registry.ValidateArguments("fuzz", arguments);
  const std::unique_ptr<hetero::internal::Grammar> grammar =
      hetero::internal::Grammar::ForSchema(registry.schema(0).root());
  hetero::internal::JsonMatcher matcher(grammar->root());
  for (char c : arguments) {
    if (!matcher.Feed(static_cast<uint8_t>(c))) return;
  }
  if (matcher.done() && !registry.ValidateArguments("fuzz", arguments).ok()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    FuzzParser(rest, data[0] / 2);
  } else {
    FuzzSchema(rest);
  }
  return 0;
}
