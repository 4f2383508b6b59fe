#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "hetero/safety.h"

namespace hetero {
namespace {

// Instruction-like text aimed at a model, as tool results should never contain it: chat
// role tags of the common templates, and the classic override phrases.
constexpr const char* kInjectionMarkers[] = {
    R"(<\|(?:im_start|im_end|start_header_id|end_header_id|eot_id|system|user|assistant|endoftext)\|>)",
    R"(\[/?INST\]|<</?SYS>>|</?tool_call>)",
    R"(\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+)?(?:of\s+)?(?:the\s+|your\s+)?(?:previous|prior|above|earlier|preceding|system)\s+(?:instructions?|prompts?|messages?|rules?|directions?))",
    R"(\byou\s+are\s+now\s+(?:a|an|in|no\s+longer)\b)",
    R"(\bnew\s+(?:system\s+)?instructions?\s*:)",
    R"((?:^|\n)\s*(?:system|assistant)\s*:)",
};

class Regex {
 public:
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(const std::string& pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_CASELESS | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      return absl::InvalidArgumentError(absl::StrCat("pattern '", pattern, "' does not compile at offset ", offset, ": ",
                                                     reinterpret_cast<const char*>(message)));
    }
    return std::unique_ptr<Regex>(new Regex(code));
  }
  ~Regex() { pcre2_code_free(code_); }
  // The first match at or after `from`: [begin, end), or begin == npos.
  std::pair<size_t, size_t> Find(const std::string& text, size_t from) const {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_, nullptr);
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), from, 0, match, nullptr);
    std::pair<size_t, size_t> found{std::string::npos, std::string::npos};
    if (rc > 0) {
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
      found = {ov[0], ov[1]};
    }
    pcre2_match_data_free(match);
    return found;
  }

 private:
  explicit Regex(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
};

std::string Lower(const std::string& s) {
  std::string out = s;
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

struct SafetyGate::Impl {
  SafetyRules rules;
  std::vector<std::string> phrases;  // lower case
  std::vector<std::unique_ptr<Regex>> patterns;
  std::vector<std::unique_ptr<Regex>> markers;
};

SafetyGate::SafetyGate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetyGate::~SafetyGate() = default;
const SafetyRules& SafetyGate::rules() const { return impl_->rules; }

absl::StatusOr<std::shared_ptr<const SafetyGate>> SafetyGate::Create(SafetyRules rules) {
  auto impl = std::make_unique<Impl>();
  for (const std::string& p : rules.deny_phrases) {
    if (p.empty()) return absl::InvalidArgumentError("a deny phrase is empty");
    impl->phrases.push_back(Lower(p));
  }
  for (const std::string& p : rules.deny_patterns) {
    if (p.empty()) return absl::InvalidArgumentError("a deny pattern is empty");
    auto regex = Regex::Compile(p);
    if (!regex.ok()) return regex.status();
    impl->patterns.push_back(std::move(*regex));
  }
  for (const char* m : kInjectionMarkers) {
    auto regex = Regex::Compile(m);
    if (!regex.ok()) return absl::InternalError(absl::StrCat("built-in marker: ", regex.status().message()));
    impl->markers.push_back(std::move(*regex));
  }
  impl->rules = std::move(rules);
  return std::shared_ptr<const SafetyGate>(new SafetyGate(std::move(impl)));
}

SafetyVerdict SafetyGate::Check(const std::string& user_message) const {
  SafetyVerdict v;
  const std::string lower = Lower(user_message);
  for (size_t i = 0; i < impl_->phrases.size(); ++i) {
    if (lower.find(impl_->phrases[i]) != std::string::npos) {
      v.denied = true;
      v.rule = absl::StrCat("phrase: ", impl_->rules.deny_phrases[i]);
      return v;
    }
  }
  for (size_t i = 0; i < impl_->patterns.size(); ++i) {
    if (impl_->patterns[i]->Find(user_message, 0).first != std::string::npos) {
      v.denied = true;
      v.rule = absl::StrCat("pattern: ", impl_->rules.deny_patterns[i]);
      return v;
    }
  }
  return v;
}

InjectionScan SafetyGate::ScanToolResult(const std::string& text) const {
  InjectionScan scan;
  scan.stripped = text;
  for (const auto& marker : impl_->markers) {
    std::string out;
    size_t at = 0;
    while (at <= scan.stripped.size()) {
      const auto [begin, end] = marker->Find(scan.stripped, at);
      if (begin == std::string::npos) break;
      if (!scan.flagged) {
        scan.flagged = true;
        scan.marker = scan.stripped.substr(begin, end - begin);
      }
      out.append(scan.stripped, at, begin - at);
      out.append("[removed]");
      at = end > begin ? end : end + 1;  // an empty match must still advance
      if (end == begin && begin < scan.stripped.size()) out.push_back(scan.stripped[begin]);
    }
    if (at < scan.stripped.size()) out.append(scan.stripped, at, std::string::npos);
    if (at > 0) scan.stripped = std::move(out);
  }
  return scan;
}

}  // namespace hetero
