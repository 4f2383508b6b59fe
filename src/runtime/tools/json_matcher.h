// A byte-level recognizer of the JSON that a tool call may be, for constrained decoding:
// it accepts exactly the prefixes of texts that parse as JSON and validate against the
// grammar (built from compiled schemas), so that every token it allows keeps the output
// completable. The grammar writes object properties in declaration order and allows one
// optional space after ':' and ','; numbers have no exponent.
//
// The state is a small value (copyable, no allocation), so a candidate token is checked
// by copying the state and feeding the token's bytes.
#ifndef HETERO_RUNTIME_TOOLS_JSON_MATCHER_H_
#define HETERO_RUNTIME_TOOLS_JSON_MATCHER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "src/runtime/tools/json_schema.h"

namespace hetero::internal {

struct GrammarNode {
  enum class Kind : uint8_t { kObject, kUnion, kArray, kString, kNumber, kLiterals };
  Kind kind = Kind::kLiterals;
  struct Property {
    std::string quoted_key;  // "\"key\""
    const GrammarNode* value = nullptr;
    bool required = false;
    // When >= 0: the value node is by_choice[i], i being the literal chosen for the
    // property at this index (a tool's arguments schema, selected by its name).
    int select_from = -1;
    std::vector<const GrammarNode*> by_choice;
  };
  std::vector<Property> properties;           // kObject
  std::vector<const GrammarNode*> alternatives;  // kUnion: objects with distinct first keys
  const GrammarNode* items = nullptr;         // kArray
  int min_items = 0, max_items = -1;
  int min_length = 0, max_length = -1;        // kString, code points
  bool integer = false;                       // kNumber
  bool has_min = false, has_max = false;
  double minimum = 0, maximum = 0;
  std::vector<std::string> literals;          // kLiterals: JSON texts (enum values, true, ...)
};

// Owns the nodes of one grammar.
class Grammar {
 public:
  // A tool call object {"name": <one of names>, "arguments": <that tool's schema>}
  // (`arguments_key` is "parameters" for Llama 3.1).
  static std::unique_ptr<Grammar> ToolCall(const std::vector<std::string>& names,
                                           const std::vector<const SchemaNode*>& schemas,
                                           std::string_view arguments_key = "arguments");
  // A list of 1 to max_calls tool call objects (Granite 3's call turn).
  static std::unique_ptr<Grammar> ToolCallList(const std::vector<std::string>& names,
                                               const std::vector<const SchemaNode*>& schemas, int max_calls = 4);
  // The generic reply: {"tool_calls": [call, ...]} (1 to max_calls) or {"response": "..."}.
  // With `calls_only`, the answer form is not allowed (a route that must call a tool).
  static std::unique_ptr<Grammar> GenericReply(const std::vector<std::string>& names,
                                               const std::vector<const SchemaNode*>& schemas, int max_calls = 4,
                                               bool calls_only = false);
  // The value of one schema (tests).
  static std::unique_ptr<Grammar> ForSchema(const SchemaNode& schema);

  const GrammarNode* root() const { return root_; }

 private:
  GrammarNode* New();
  const GrammarNode* FromSchema(const SchemaNode& s);
  const GrammarNode* CallNode(const std::vector<std::string>& names, const std::vector<const SchemaNode*>& schemas,
                              std::string_view arguments_key);
  // An array of 1 to max_calls call objects ("arguments").
  const GrammarNode* CallListNode(const std::vector<std::string>& names, const std::vector<const SchemaNode*>& schemas,
                                  int max_calls);
  std::deque<GrammarNode> nodes_;
  const GrammarNode* root_ = nullptr;
};

class JsonMatcher {
 public:
  static constexpr int kMaxDepth = 16;  // schema nesting (8) plus the call wrappers

  explicit JsonMatcher(const GrammarNode* root);
  // Copies only the live frames: candidate tokens are checked on copies.
  JsonMatcher(const JsonMatcher& other) { *this = other; }
  JsonMatcher& operator=(const JsonMatcher& other);

  // Feeds one byte; false (and the state is then unusable) when no valid text continues
  // with it.
  bool Feed(uint8_t byte);
  bool Feed(std::string_view bytes) {
    for (char c : bytes) {
      if (!Feed(static_cast<uint8_t>(c))) return false;
    }
    return true;
  }
  // The root value is complete (nothing more may follow).
  bool done() const { return depth_ == 0 && started_; }
  bool started() const { return started_; }
  // Inside a string value (not a key, not an enum literal), outside an escape: bytes other
  // than '"' and '\\' only add to the string.
  bool InStringBody() const;
  // Inside a number value: the bytes after it are the parent's (',', '}', ']').
  bool InNumberBody() const;

  // Appends bytes that may be accepted next, a superset of them, except that inside a
  // string value only '"' and ' ' stand for all its bytes (searches for completions).
  void AppendNextByteCandidates(std::string& out) const;

  // The state's bytes, for caching masks per state.
  std::string Key() const;
  // Key without the digits of a number being written (only their count): states that
  // differ only in those digits share it. For searches that may merge such states.
  std::string CoarseKey() const;

 private:
  enum class Mode : uint8_t;
  struct Frame {
    const GrammarNode* node;
    uint8_t mode;
    uint8_t space_ok;   // one optional space may come now
    int16_t next;       // object: first property not yet written; array: items written
    int16_t current;    // object: property being written
    int16_t choice;     // object: literal chosen for a select_from property
    int16_t pos;        // byte position in a key or literal
    int32_t length;     // string: code points so far
    uint64_t alive[2];  // key or literal candidates
  };

  bool StartValue(const GrammarNode* node, uint8_t byte);
  bool FeedTop(uint8_t byte, bool& pop_and_refeed);
  void ChildDone();
  bool NumberViable(bool complete) const;

  Frame frames_[kMaxDepth];
  int depth_ = 0;
  bool started_ = false;
  uint8_t utf8_pending_ = 0;  // continuation bytes still due in a string
  uint8_t escape_ = 0;        // string: 1 after '\', 2..5 inside \uXXXX
  int8_t number_len_ = 0;
  char number_[30];
};

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_TOOLS_JSON_MATCHER_H_
