// The markers around tool calls in the formats whose calls are tagged: what the parser looks
// for, the constraint enforces and the reply stream hides from the user.
#ifndef HETERO_RUNTIME_TOOLS_TOOL_CALL_MARKERS_H_
#define HETERO_RUNTIME_TOOLS_TOOL_CALL_MARKERS_H_

#include <string_view>

namespace hetero::internal {

// Hermes (Qwen2.5, Qwen3): <tool_call>{...}</tool_call>, one or several.
inline constexpr std::string_view kHermesOpenTag = "<tool_call>";
inline constexpr std::string_view kHermesCloseTag = "</tool_call>";

// Granite 3: <|tool_call|> then a JSON list of calls to the end of the reply.
inline constexpr std::string_view kGraniteCallMarker = "<|tool_call|>";

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_TOOLS_TOOL_CALL_MARKERS_H_
