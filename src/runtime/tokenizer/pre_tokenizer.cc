#include "src/runtime/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace hetero {
namespace {

// The expressions of each pre-tokenizer, as published in the models' tokenizer.json, with
// one change: `\s` is spelled out as Unicode's White_Space set. PCRE2's UCP `\s` also
// matches U+180E (MONGOLIAN VOWEL SEPARATOR), which the reference engines (Oniguruma in
// Hugging Face tokenizers, Python's regex) do not count as space.
#define HETERO_WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define HETERO_SPACE "[" HETERO_WS "]"
#define HETERO_NOT_SPACE "[^" HETERO_WS "]"
constexpr char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" HETERO_WS "\\p{L}\\p{N}]+|" HETERO_SPACE "+(?!" HETERO_NOT_SPACE ")";
constexpr char kLlama3Pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" HETERO_WS "\\p{L}\\p{N}]+[\\r\\n]*|"
    HETERO_SPACE "*[\\r\\n]+|" HETERO_SPACE "+(?!" HETERO_NOT_SPACE ")|" HETERO_SPACE "+";
constexpr char kQwen2Pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" HETERO_WS "\\p{L}\\p{N}]+[\\r\\n]*|"
    HETERO_SPACE "*[\\r\\n]+|" HETERO_SPACE "+(?!" HETERO_NOT_SPACE ")|" HETERO_SPACE "+";
#undef HETERO_NOT_SPACE
#undef HETERO_SPACE
#undef HETERO_WS

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return std::string(reinterpret_cast<const char*>(buffer));
}

// Per-thread JIT stack: the default 32 KiB machine-stack area is too small for long runs
// of whitespace under the lookahead patterns.
pcre2_match_context* ThreadMatchContext() {
  struct Holder {
    pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    Holder() {
      if (stack != nullptr && context != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
    }
    ~Holder() {
      pcre2_match_context_free(context);
      pcre2_jit_stack_free(stack);
    }
  };
  thread_local Holder holder;
  return holder.context;
}

}  // namespace

struct PreTokenizer::Pattern {
  std::string source;
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Pattern() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(absl::string_view name) {
  if (name == "smollm") return FromPatterns("smollm", {R"(\p{N})", kGpt2Pattern}, false);
  if (name == "gpt-2") return FromPatterns("gpt-2", {kGpt2Pattern}, false);
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") {
    return FromPatterns(std::string(name), {kLlama3Pattern}, true);
  }
  if (name == "qwen2") return FromPatterns("qwen2", {kQwen2Pattern}, false);
  if (name == "default" || name.empty()) {
    return FromPatterns("default",
                        {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Pattern, R"(\p{N}+)", "[0-9][0-9][0-9]"}, false);
  }
  return absl::UnimplementedError(absl::StrCat(
      "pre-tokenizer '", name,
      "' (tokenizer.ggml.pre) is not supported; supported: smollm, llama-bpe, qwen2, gpt-2, default"));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromPatterns(
    std::string name, const std::vector<std::string>& patterns, bool ignore_merges) {
  auto pre = std::unique_ptr<PreTokenizer>(new PreTokenizer());
  pre->name_ = std::move(name);
  pre->ignore_merges_ = ignore_merges;
  for (const std::string& source : patterns) {
    auto pattern = std::make_unique<Pattern>();
    pattern->source = source;
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    pattern->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
    if (pattern->code == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("pre-tokenizer pattern '", source,
                                                     "' does not compile at offset ", error_offset,
                                                     ": ", Pcre2Message(error)));
    }
    pattern->jit = pcre2_jit_compile(pattern->code, PCRE2_JIT_COMPLETE) == 0;
    pre->patterns_.push_back(std::move(pattern));
  }
  return pre;
}

absl::Status PreTokenizer::SplitWith(const Pattern& pattern, absl::string_view piece,
                                     std::vector<absl::string_view>& out) const {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(pattern.code, nullptr);
  if (match == nullptr) return absl::ResourceExhaustedError("pre-tokenizer: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  size_t start = 0;       // where the next search begins
  size_t emitted = 0;     // end of the last piece emitted
  absl::Status status;
  while (start < piece.size()) {
    int rc = pattern.jit ? pcre2_jit_match(pattern.code, subject, piece.size(), start, 0, match,
                                           ThreadMatchContext())
                         : PCRE2_ERROR_JIT_BADOPTION;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_JIT_BADOPTION) {
      // Fall back to the interpreter, which keeps its backtracking state on the heap.
      rc = pcre2_match(pattern.code, subject, piece.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       match, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      status = absl::ResourceExhaustedError(
          absl::StrCat("pre-tokenizer '", name_, "': regex match failed: ", Pcre2Message(rc)));
      break;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t begin = ovector[0];
    size_t end = ovector[1];
    if (begin > emitted) {
      out.push_back(piece.substr(emitted, begin - emitted));
      emitted = begin;
    }
    if (end == begin) {
      // An empty match: step over one code point so the search advances.
      end = begin + 1;
      while (end < piece.size() && (static_cast<uint8_t>(piece[end]) & 0xC0) == 0x80) ++end;
      start = end;
      continue;
    }
    out.push_back(piece.substr(begin, end - begin));
    emitted = end;
    start = end;
  }
  if (status.ok() && emitted < piece.size()) out.push_back(piece.substr(emitted));
  pcre2_match_data_free(match);
  return status;
}

absl::Status PreTokenizer::Split(absl::string_view text, std::vector<absl::string_view>& pieces) const {
  if (text.empty()) return absl::OkStatus();
  std::vector<absl::string_view> current = {text};
  std::vector<absl::string_view> next;
  for (size_t p = 0; p < patterns_.size(); ++p) {
    next.clear();
    for (absl::string_view piece : current) {
      absl::Status s = SplitWith(*patterns_[p], piece, next);
      if (!s.ok()) return s;
    }
    current.swap(next);
  }
  pieces.insert(pieces.end(), current.begin(), current.end());
  return absl::OkStatus();
}

}  // namespace hetero
