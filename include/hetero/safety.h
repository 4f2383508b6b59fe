// The safety gate of the Understand stage: deny rules checked on the user's message before
// any Generate work (a refused request costs no decoding), and a scan of tool results for
// text aimed at the model (prompt injection: role tags, "ignore previous instructions"),
// which is flagged in the report and, by the host's choice, stripped or refused.
//
//   hetero::SafetyRules rules;
//   rules.deny_phrases = {"credit card numbers"};
//   rules.deny_patterns = {R"(\bbuild\s+a\s+bomb\b)"};
//   auto gate = hetero::SafetyGate::Create(rules);   // RunOptions::safety = *gate
#ifndef HETERO_SAFETY_H_
#define HETERO_SAFETY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/export.h"

namespace hetero {

// What happens to a tool result that carries instruction-like text.
enum class InjectionPolicy {
  kFlag,    // keep it, flag it in the ToolCallReport
  kStrip,   // replace each marker with "[removed]" before the model sees it, and flag it
  kRefuse,  // end the task with the refusal instead of showing it to the model
};

struct SafetyRules {
  std::vector<std::string> deny_phrases;   // case-insensitive substrings
  std::vector<std::string> deny_patterns;  // PCRE2 regular expressions, case-insensitive
  std::string refusal = "I can't help with that request.";
  InjectionPolicy tool_results = InjectionPolicy::kFlag;
};

struct SafetyVerdict {
  bool denied = false;
  std::string rule;  // "phrase: ..." or "pattern: ..."
};

struct InjectionScan {
  bool flagged = false;
  std::string marker;    // the first marker found, as it appears in the text
  std::string stripped;  // the text with every marker replaced (kStrip)
};

class HETERO_EXPORT SafetyGate {
 public:
  // InvalidArgument naming a pattern that does not compile, or an empty phrase or pattern.
  static absl::StatusOr<std::shared_ptr<const SafetyGate>> Create(SafetyRules rules);
  ~SafetyGate();

  SafetyVerdict Check(const std::string& user_message) const;
  InjectionScan ScanToolResult(const std::string& text) const;
  const SafetyRules& rules() const;

  struct Impl;

 private:
  explicit SafetyGate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hetero

#endif  // HETERO_SAFETY_H_
