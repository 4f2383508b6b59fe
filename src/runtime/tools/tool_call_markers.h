// The markers around a Hermes-format tool call (Qwen2.5, Qwen3): what the parser looks for,
// the constraint enforces and the reply stream hides from the user.
#ifndef HETERO_RUNTIME_TOOLS_HERMES_TAGS_H_
#define HETERO_RUNTIME_TOOLS_HERMES_TAGS_H_

#include <string_view>

namespace hetero::internal {

inline constexpr std::string_view kHermesOpenTag = "<tool_call>";
inline constexpr std::string_view kHermesCloseTag = "</tool_call>";

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_TOOLS_HERMES_TAGS_H_
