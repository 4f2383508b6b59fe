#include "src/runtime/tools/json_matcher.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace hetero::internal {

// ---------------------------------------------------------------------------------------
// Grammar construction.

GrammarNode* Grammar::New() { return &nodes_.emplace_back(); }

namespace {
std::string Quote(std::string_view key) { return nlohmann::json(std::string(key)).dump(); }
}  // namespace

const GrammarNode* Grammar::FromSchema(const SchemaNode& s) {
  GrammarNode* n = New();
  if (!s.allowed.empty()) {
    n->kind = GrammarNode::Kind::kLiterals;
    for (const nlohmann::json& v : s.allowed) n->literals.push_back(v.dump());
    return n;
  }
  switch (s.type) {
    case SchemaType::kObject:
      n->kind = GrammarNode::Kind::kObject;
      for (const auto& p : s.properties) {
        GrammarNode::Property gp;
        gp.quoted_key = Quote(p.key);
        gp.value = FromSchema(*p.schema);
        gp.required = p.required;
        n->properties.push_back(std::move(gp));
      }
      break;
    case SchemaType::kArray:
      n->kind = GrammarNode::Kind::kArray;
      n->items = FromSchema(*s.items);
      n->min_items = s.min_items;
      n->max_items = s.max_items;
      break;
    case SchemaType::kString:
      n->kind = GrammarNode::Kind::kString;
      n->min_length = s.min_length;
      n->max_length = s.max_length;
      break;
    case SchemaType::kNumber:
    case SchemaType::kInteger:
      n->kind = GrammarNode::Kind::kNumber;
      n->integer = s.type == SchemaType::kInteger;
      n->has_min = s.minimum.has_value();
      n->has_max = s.maximum.has_value();
      n->minimum = s.minimum.value_or(0);
      n->maximum = s.maximum.value_or(0);
      break;
    case SchemaType::kBoolean:
      n->kind = GrammarNode::Kind::kLiterals;
      n->literals = {"true", "false"};
      break;
    case SchemaType::kNull:
      n->kind = GrammarNode::Kind::kLiterals;
      n->literals = {"null"};
      break;
  }
  return n;
}

const GrammarNode* Grammar::CallNode(const std::vector<std::string>& names, const std::vector<const SchemaNode*>& schemas,
                                     std::string_view arguments_key) {
  GrammarNode* names_node = New();
  names_node->kind = GrammarNode::Kind::kLiterals;
  for (const std::string& name : names) names_node->literals.push_back(Quote(name));
  GrammarNode* call = New();
  call->kind = GrammarNode::Kind::kObject;
  GrammarNode::Property name_prop;
  name_prop.quoted_key = Quote("name");
  name_prop.value = names_node;
  name_prop.required = true;
  GrammarNode::Property args_prop;
  args_prop.quoted_key = Quote(arguments_key);
  args_prop.required = true;
  args_prop.select_from = 0;
  for (const SchemaNode* s : schemas) args_prop.by_choice.push_back(FromSchema(*s));
  call->properties = {std::move(name_prop), std::move(args_prop)};
  return call;
}

std::unique_ptr<Grammar> Grammar::ToolCall(const std::vector<std::string>& names,
                                           const std::vector<const SchemaNode*>& schemas, std::string_view arguments_key) {
  auto g = std::make_unique<Grammar>();
  g->root_ = g->CallNode(names, schemas, arguments_key);
  return g;
}

const GrammarNode* Grammar::CallListNode(const std::vector<std::string>& names,
                                         const std::vector<const SchemaNode*>& schemas, int max_calls) {
  GrammarNode* calls = New();
  calls->kind = GrammarNode::Kind::kArray;
  calls->items = CallNode(names, schemas, "arguments");
  calls->min_items = 1;
  calls->max_items = max_calls;
  return calls;
}

std::unique_ptr<Grammar> Grammar::ToolCallList(const std::vector<std::string>& names,
                                               const std::vector<const SchemaNode*>& schemas, int max_calls) {
  auto g = std::make_unique<Grammar>();
  g->root_ = g->CallListNode(names, schemas, max_calls);
  return g;
}

std::unique_ptr<Grammar> Grammar::GenericReply(const std::vector<std::string>& names,
                                               const std::vector<const SchemaNode*>& schemas, int max_calls,
                                               bool calls_only) {
  auto g = std::make_unique<Grammar>();
  const GrammarNode* calls = g->CallListNode(names, schemas, max_calls);
  GrammarNode* with_calls = g->New();
  with_calls->kind = GrammarNode::Kind::kObject;
  with_calls->properties.push_back({Quote("tool_calls"), calls, true, -1, {}});
  GrammarNode* text = g->New();
  text->kind = GrammarNode::Kind::kString;
  GrammarNode* with_text = g->New();
  with_text->kind = GrammarNode::Kind::kObject;
  with_text->properties.push_back({Quote("response"), text, true, -1, {}});
  GrammarNode* root = g->New();
  root->kind = GrammarNode::Kind::kUnion;
  root->alternatives = {with_calls, with_text};
  // Without tools, only the answer form.
  g->root_ = names.empty() ? with_text : calls_only ? with_calls : root;
  return g;
}

std::unique_ptr<Grammar> Grammar::ForSchema(const SchemaNode& schema) {
  auto g = std::make_unique<Grammar>();
  g->root_ = g->FromSchema(schema);
  return g;
}

// ---------------------------------------------------------------------------------------
// Matching.

enum class JsonMatcher::Mode : uint8_t {
  kOpen,            // the value's first byte
  kFirstKeyOrClose, // object after '{'
  kKeyStart,        // object after ',' (optional space, then '"')
  kKey,             // inside a key
  kColon,
  kValueStart,      // after ':' (optional space)
  kInValue,         // a child frame is writing the value
  kAfterValue,      // ',' or '}'
  kFirstItemOrClose,
  kItemStart,
  kInItem,
  kAfterItem,
  kStringBody,
  kNumberBody,
  kLiteral,
};

bool JsonMatcher::InStringBody() const {
  return depth_ > 0 && frames_[depth_ - 1].mode == static_cast<uint8_t>(Mode::kStringBody) && escape_ == 0;
}

bool JsonMatcher::InNumberBody() const {
  return depth_ > 0 && frames_[depth_ - 1].mode == static_cast<uint8_t>(Mode::kNumberBody);
}

namespace {

using Mode8 = uint8_t;

bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }

// Candidates for the next key of an object: from `next` on, up to and including the first
// required property (a required one cannot be skipped).
uint64_t KeyCandidates(const GrammarNode& n, int next) {
  uint64_t mask = 0;
  for (int j = next; j < static_cast<int>(n.properties.size()); ++j) {
    mask |= uint64_t{1} << j;
    if (n.properties[j].required) break;
  }
  return mask;
}

bool RequiredRemain(const GrammarNode& n, int next) {
  for (int j = next; j < static_cast<int>(n.properties.size()); ++j) {
    if (n.properties[j].required) return true;
  }
  return false;
}

const std::string& KeyText(const GrammarNode& n, int i) {
  return n.kind == GrammarNode::Kind::kUnion ? n.alternatives[i]->properties[0].quoted_key : n.properties[i].quoted_key;
}

}  // namespace

JsonMatcher::JsonMatcher(const GrammarNode* root) {
  std::memset(frames_, 0, sizeof(frames_));
  std::memset(number_, 0, sizeof(number_));
  frames_[0].node = root;  // pushed on the first byte
}

JsonMatcher& JsonMatcher::operator=(const JsonMatcher& other) {
  if (this == &other) return *this;
  const int live = other.depth_ > 0 ? other.depth_ : 1;  // frame 0 holds the root before the start
  std::memcpy(frames_, other.frames_, sizeof(Frame) * live);
  depth_ = other.depth_;
  started_ = other.started_;
  utf8_pending_ = other.utf8_pending_;
  escape_ = other.escape_;
  number_len_ = other.number_len_;
  std::memcpy(number_, other.number_, sizeof(number_));
  return *this;
}

void JsonMatcher::AppendNextByteCandidates(std::string& out) const {
  static constexpr std::string_view kStructural = "\"}]{[,: -.0123456789tfn";
  if (depth_ == 0) {
    out.append(kStructural);
    return;
  }
  const Frame& f = frames_[depth_ - 1];
  const GrammarNode& n = *f.node;
  switch (static_cast<Mode>(f.mode)) {
    case Mode::kStringBody:
      out.append(escape_ == 0 && utf8_pending_ == 0 ? "\" " : "0\x80\xA0\"\\/bfnrtu");
      return;
    case Mode::kKey:
      for (uint64_t m = f.alive[0]; m != 0; m &= m - 1) {
        const std::string& key = KeyText(n, __builtin_ctzll(m));
        if (f.pos < static_cast<int>(key.size())) out.push_back(key[f.pos]);
      }
      return;
    case Mode::kLiteral:
      for (int i = 0; i < static_cast<int>(n.literals.size()); ++i) {
        if (((f.alive[i / 64] >> (i % 64)) & 1) && f.pos < static_cast<int>(n.literals[i].size())) {
          out.push_back(n.literals[i][f.pos]);
        }
      }
      out.append(kStructural);  // a complete literal lets its parent read the byte
      return;
    default:
      out.append(kStructural);
      return;
  }
}

std::string JsonMatcher::Key() const {
  std::string key = CoarseKey();
  key.append(number_, number_len_);
  return key;
}

std::string JsonMatcher::CoarseKey() const {
  // Frames are zeroed when pushed, so their padding bytes are deterministic too.
  std::string key(reinterpret_cast<const char*>(frames_), sizeof(Frame) * depth_);
  const char tail[] = {static_cast<char>(depth_), static_cast<char>(started_), static_cast<char>(utf8_pending_),
                       static_cast<char>(escape_), static_cast<char>(number_len_)};
  key.append(tail, sizeof(tail));
  return key;
}

bool JsonMatcher::NumberViable(bool complete) const {
  const GrammarNode& n = *frames_[depth_ - 1].node;
  const double lo = n.has_min ? n.minimum : -std::numeric_limits<double>::infinity();
  const double hi = n.has_max ? n.maximum : std::numeric_limits<double>::infinity();
  std::string_view t(number_, number_len_);
  const bool neg = !t.empty() && t[0] == '-';
  if (neg) t.remove_prefix(1);
  const size_t dot = t.find('.');
  const std::string_view int_part = t.substr(0, dot);
  const std::string_view frac = dot == std::string_view::npos ? std::string_view() : t.substr(dot + 1);
  // Syntax: -?(0|[1-9][0-9]*)(\.[0-9]+)?
  for (char ch : int_part) {
    if (!IsDigit(static_cast<uint8_t>(ch))) return false;
  }
  for (char ch : frac) {
    if (!IsDigit(static_cast<uint8_t>(ch))) return false;  // a second '.'
  }
  if (int_part.size() > 1 && int_part[0] == '0') return false;
  if (dot != std::string_view::npos && (int_part.empty() || n.integer)) return false;
  if (int_part.size() + frac.size() > 17) return false;
  if (complete && (int_part.empty() || (dot != std::string_view::npos && frac.empty()))) return false;
  // The interval of values that completions of this prefix can reach ([a, b] for
  // positives; mirrored for negatives), tested against [lo, hi].
  const auto meets = [&](double a, double b) {
    if (neg) {
      const double na = -b, nb = -a;
      return nb >= lo && na <= hi;
    }
    return b >= lo && a <= hi;
  };
  if (int_part.empty()) return meets(0, std::numeric_limits<double>::infinity());
  const double i = std::strtod(std::string(int_part).c_str(), nullptr);
  if (complete) {
    const double v = std::strtod(std::string(t).c_str(), nullptr);
    const double value = neg ? -v : v;
    return value >= lo && value <= hi;
  }
  if (dot != std::string_view::npos) {
    const double v = std::strtod(std::string(t).c_str(), nullptr);
    return meets(v, v + std::pow(10.0, -static_cast<double>(frac.size())));
  }
  if (int_part == "0") return meets(0, n.integer ? 0 : 1);
  // More integer digits, or (numbers) a fraction.
  double scale = 1;
  for (size_t k = int_part.size(); k <= 17; ++k, scale *= 10) {
    const double a = i * scale, b = (i + 1) * scale - (n.integer ? 1 : 0);
    if (meets(a, b)) return true;
  }
  return false;
}

bool JsonMatcher::Feed(uint8_t byte) {
  if (depth_ == 0) {
    if (started_) return false;  // the root is complete: nothing may follow
    started_ = true;
    const GrammarNode* root = frames_[0].node;
    std::memset(&frames_[0], 0, sizeof(Frame));
    frames_[0].node = root;
    frames_[0].mode = static_cast<Mode8>(Mode::kOpen);
    depth_ = 1;
  }
  for (;;) {
    bool refeed = false;
    const int depth_before = depth_;
    if (!FeedTop(byte, refeed)) return false;
    if (refeed) {
      // The top value ended before this byte: the parent reads it.
      --depth_;
      if (depth_ == 0) return false;
      ChildDone();
      continue;
    }
    if (depth_ > depth_before) continue;  // a child frame was pushed: it reads the byte
    return true;
  }
}

// Completes the top frame (popped already by the caller) into its parent.
void JsonMatcher::ChildDone() {
  Frame& parent = frames_[depth_ - 1];
  const Frame& child = frames_[depth_];
  if (parent.node->kind == GrammarNode::Kind::kObject) {
    if (child.node->kind == GrammarNode::Kind::kLiterals) {
      // The literal that matched: the alive one whose length is the bytes read.
      for (int i = 0; i < static_cast<int>(child.node->literals.size()); ++i) {
        if (((child.alive[i / 64] >> (i % 64)) & 1) && static_cast<int>(child.node->literals[i].size()) == child.pos) {
          parent.choice = static_cast<int16_t>(i);
        }
      }
    }
    parent.mode = static_cast<Mode8>(Mode::kAfterValue);
    parent.next = static_cast<int16_t>(parent.current + 1);
  } else if (parent.node->kind == GrammarNode::Kind::kArray) {
    parent.mode = static_cast<Mode8>(Mode::kAfterItem);
    ++parent.next;
  }
}

bool JsonMatcher::FeedTop(uint8_t c, bool& refeed) {
  Frame& f = frames_[depth_ - 1];
  const GrammarNode& n = *f.node;
  const auto push = [&](const GrammarNode* child) {
    if (depth_ == kMaxDepth) return false;
    Frame& nf = frames_[depth_++];
    std::memset(&nf, 0, sizeof(Frame));
    nf.node = child;
    nf.mode = static_cast<Mode8>(Mode::kOpen);
    return true;
  };
  const auto finish = [&]() {  // the top value ended with this byte
    --depth_;
    if (depth_ > 0) ChildDone();
  };
  switch (static_cast<Mode>(f.mode)) {
    case Mode::kOpen:
      switch (n.kind) {
        case GrammarNode::Kind::kObject:
        case GrammarNode::Kind::kUnion:
          if (c != '{') return false;
          f.mode = static_cast<Mode8>(Mode::kFirstKeyOrClose);
          return true;
        case GrammarNode::Kind::kArray:
          if (c != '[') return false;
          f.mode = static_cast<Mode8>(Mode::kFirstItemOrClose);
          return true;
        case GrammarNode::Kind::kString:
          if (c != '"') return false;
          f.mode = static_cast<Mode8>(Mode::kStringBody);
          escape_ = 0;
          utf8_pending_ = 0;
          return true;
        case GrammarNode::Kind::kNumber:
          if (c != '-' && !IsDigit(c)) return false;
          number_len_ = 0;
          number_[number_len_++] = static_cast<char>(c);
          f.mode = static_cast<Mode8>(Mode::kNumberBody);
          if (!NumberViable(false)) return false;
          return true;
        case GrammarNode::Kind::kLiterals: {
          const int count = static_cast<int>(n.literals.size());
          for (int i = 0; i < count; ++i) f.alive[i / 64] |= uint64_t{1} << (i % 64);
          f.mode = static_cast<Mode8>(Mode::kLiteral);
          f.pos = 0;
          return FeedTop(c, refeed);
        }
      }
      return false;

    case Mode::kFirstKeyOrClose:
    case Mode::kKeyStart: {
      const bool first = static_cast<Mode>(f.mode) == Mode::kFirstKeyOrClose;
      if (!first && c == ' ' && f.space_ok) {
        f.space_ok = 0;
        return true;
      }
      if (first && c == '}') {
        if (n.kind == GrammarNode::Kind::kUnion || RequiredRemain(n, f.next)) return false;
        finish();
        return true;
      }
      if (c != '"') return false;
      uint64_t alive = n.kind == GrammarNode::Kind::kUnion
                           ? (n.alternatives.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << n.alternatives.size()) - 1)
                           : KeyCandidates(n, f.next);
      if (alive == 0) return false;
      f.alive[0] = alive;
      f.pos = 1;
      f.mode = static_cast<Mode8>(Mode::kKey);
      return true;
    }

    case Mode::kKey: {
      uint64_t alive = 0;
      int done_index = -1;
      for (uint64_t m = f.alive[0]; m != 0; m &= m - 1) {
        const int i = __builtin_ctzll(m);
        const std::string& key = KeyText(n, i);
        if (f.pos < static_cast<int>(key.size()) && static_cast<uint8_t>(key[f.pos]) == c) {
          alive |= uint64_t{1} << i;
          if (f.pos + 1 == static_cast<int>(key.size())) done_index = i;
        }
      }
      if (alive == 0) return false;
      ++f.pos;
      f.alive[0] = alive;
      if (done_index >= 0) {  // keys are quoted: a complete one is no other's prefix
        if (n.kind == GrammarNode::Kind::kUnion) {
          f.node = n.alternatives[done_index];
          f.current = 0;
        } else {
          f.current = static_cast<int16_t>(done_index);
        }
        f.mode = static_cast<Mode8>(Mode::kColon);
      }
      return true;
    }

    case Mode::kColon:
      if (c != ':') return false;
      f.mode = static_cast<Mode8>(Mode::kValueStart);
      f.space_ok = 1;
      return true;

    case Mode::kValueStart: {
      if (c == ' ' && f.space_ok) {
        f.space_ok = 0;
        return true;
      }
      const GrammarNode::Property& p = n.properties[f.current];
      const GrammarNode* value = p.select_from >= 0 ? p.by_choice[f.choice] : p.value;
      f.mode = static_cast<Mode8>(Mode::kInValue);
      return push(value);
    }

    case Mode::kAfterValue:
      if (c == ',') {
        if (KeyCandidates(n, f.next) == 0) return false;
        f.mode = static_cast<Mode8>(Mode::kKeyStart);
        f.space_ok = 1;
        return true;
      }
      if (c == '}') {
        if (RequiredRemain(n, f.next)) return false;
        finish();
        return true;
      }
      return false;

    case Mode::kFirstItemOrClose:
      if (c == ']') {
        if (n.min_items > 0) return false;
        finish();
        return true;
      }
      if (n.max_items == 0) return false;
      f.mode = static_cast<Mode8>(Mode::kInItem);
      return push(n.items);

    case Mode::kItemStart:
      if (c == ' ' && f.space_ok) {
        f.space_ok = 0;
        return true;
      }
      f.mode = static_cast<Mode8>(Mode::kInItem);
      return push(n.items);

    case Mode::kAfterItem:
      if (c == ',') {
        if (n.max_items >= 0 && f.next >= n.max_items) return false;
        f.mode = static_cast<Mode8>(Mode::kItemStart);
        f.space_ok = 1;
        return true;
      }
      if (c == ']') {
        if (f.next < n.min_items) return false;
        finish();
        return true;
      }
      return false;

    case Mode::kStringBody: {
      if (escape_ == 1) {  // after '\'
        if (c == 'u') {
          escape_ = 2;
          return true;
        }
        if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') return false;
        escape_ = 0;
        return true;
      }
      if (escape_ >= 2) {  // \uXXXX: surrogates (D800-DFFF) are refused, so no pairs to track
        const bool hex = IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        if (!hex) return false;
        if (escape_ == 2) f.pos = (c == 'd' || c == 'D') ? 1 : 0;
        if (escape_ == 3 && f.pos == 1 && !(IsDigit(c) && c < '8')) return false;
        escape_ = escape_ == 5 ? 0 : escape_ + 1;
        return true;
      }
      if (utf8_pending_ > 0) {
        // The first continuation byte after E0/ED/F0/F4 has a narrower range (no overlong
        // forms, no surrogates, nothing past U+10FFFF), as JSON parsers require.
        uint8_t lo = 0x80, hi = 0xBF;
        if (f.pos == 0xE0) lo = 0xA0;
        if (f.pos == 0xED) hi = 0x9F;
        if (f.pos == 0xF0) lo = 0x90;
        if (f.pos == 0xF4) hi = 0x8F;
        if (c < lo || c > hi) return false;
        f.pos = 0;
        --utf8_pending_;
        return true;
      }
      if (c == '"') {
        if (f.length < n.min_length) return false;
        finish();
        return true;
      }
      if (c < 0x20) return false;
      if (n.max_length >= 0 && f.length >= n.max_length) return false;
      // Without a maximum only "at least min_length" matters: counting no further keeps
      // the state (and its cached mask) the same along a free string.
      const bool count = n.max_length >= 0 || f.length < n.min_length;
      if (c == '\\') {
        escape_ = 1;
      } else if (c >= 0x80) {
        if (c >= 0xC2 && c <= 0xDF) {
          utf8_pending_ = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
          utf8_pending_ = 2;
        } else if (c >= 0xF0 && c <= 0xF4) {
          utf8_pending_ = 3;
        } else {
          return false;
        }
        f.pos = (c == 0xE0 || c == 0xED || c == 0xF0 || c == 0xF4) ? c : 0;
      }
      if (count) ++f.length;
      return true;
    }

    case Mode::kNumberBody: {
      if (IsDigit(c) || c == '.') {
        if (number_len_ >= static_cast<int>(sizeof(number_)) - 1) return false;
        number_[number_len_++] = static_cast<char>(c);
        if (!NumberViable(false)) return false;
        return true;
      }
      if (!NumberViable(true)) return false;
      refeed = true;
      return true;
    }

    case Mode::kLiteral: {
      uint64_t alive[2] = {0, 0};
      bool any = false, all_complete = true, some_complete = false;
      const int count = static_cast<int>(n.literals.size());
      for (int i = 0; i < count; ++i) {
        if (!((f.alive[i / 64] >> (i % 64)) & 1)) continue;
        const std::string& lit = n.literals[i];
        if (static_cast<int>(lit.size()) == f.pos) some_complete = true;
        if (f.pos < static_cast<int>(lit.size()) && static_cast<uint8_t>(lit[f.pos]) == c) {
          alive[i / 64] |= uint64_t{1} << (i % 64);
          any = true;
          if (static_cast<int>(lit.size()) != f.pos + 1) all_complete = false;
        }
      }
      if (!any) {
        if (!some_complete) return false;
        // Keep only the complete literal (for the choice), then let the parent read c.
        for (int i = 0; i < count; ++i) {
          if (static_cast<int>(n.literals[i].size()) != f.pos) f.alive[i / 64] &= ~(uint64_t{1} << (i % 64));
        }
        refeed = true;
        return true;
      }
      f.alive[0] = alive[0];
      f.alive[1] = alive[1];
      ++f.pos;
      if (all_complete) finish();
      return true;
    }

    case Mode::kInValue:
    case Mode::kInItem:
      return false;  // unreachable: the child frame is on top
  }
  return false;
}

}  // namespace hetero::internal
