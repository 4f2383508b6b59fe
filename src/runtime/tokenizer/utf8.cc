#include "src/runtime/tokenizer/utf8.h"

namespace hetero {
namespace {

// Valid second-byte range for each lead byte (RFC 3629 table): rules out overlong forms,
// surrogates and code points past U+10FFFF.
bool SecondByteOk(uint8_t lead, uint8_t second) {
  switch (lead) {
    case 0xE0: return second >= 0xA0 && second <= 0xBF;
    case 0xED: return second >= 0x80 && second <= 0x9F;
    case 0xF0: return second >= 0x90 && second <= 0xBF;
    case 0xF4: return second >= 0x80 && second <= 0x8F;
    default: return second >= 0x80 && second <= 0xBF;
  }
}

// Sequence length announced by a lead byte, 0 for bytes that cannot start one.
size_t LeadLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

size_t ValidUtf8SequenceLength(absl::string_view s) {
  if (s.empty()) return 0;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = LeadLength(p[0]);
  if (n == 0 || n > s.size()) return 0;
  if (n == 1) return 1;
  if (!SecondByteOk(p[0], p[1])) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (!IsContinuation(p[i])) return 0;
  }
  return n;
}

std::vector<Utf8Segment> SplitValidUtf8(absl::string_view text) {
  std::vector<Utf8Segment> out;
  size_t run_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = ValidUtf8SequenceLength(text.substr(i));
    if (n > 0) {
      i += n;
      continue;
    }
    if (i > run_start) out.push_back({text.substr(run_start, i - run_start), true});
    out.push_back({text.substr(i, 1), false});
    ++i;
    run_start = i;
  }
  if (i > run_start) out.push_back({text.substr(run_start, i - run_start), true});
  return out;
}

bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = ValidUtf8SequenceLength(text.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void AppendUtf8Lossy(absl::string_view bytes, std::string& out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const size_t n = ValidUtf8SequenceLength(bytes.substr(i));
    if (n > 0) {
      out.append(bytes.data() + i, n);
      i += n;
      continue;
    }
    // The maximal subpart: a lead byte plus the continuation bytes that still fit it.
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data() + i);
    const size_t want = LeadLength(p[0]);
    size_t len = 1;
    if (want > 1 && i + 1 < bytes.size() && SecondByteOk(p[0], p[1])) {
      len = 2;
      while (len < want && i + len < bytes.size() && IsContinuation(p[len])) ++len;
    }
    out += "\xEF\xBF\xBD";
    i += len;
  }
}

size_t IncompleteUtf8Suffix(absl::string_view s) {
  // A sequence is at most 4 bytes, so only the last 3 bytes can be an unfinished one.
  const size_t max_back = s.size() < 3 ? s.size() : 3;
  for (size_t back = 1; back <= max_back; ++back) {
    const auto lead = static_cast<uint8_t>(s[s.size() - back]);
    if (IsContinuation(lead)) continue;
    const size_t n = LeadLength(lead);
    if (n <= back) return 0;  // complete (or an invalid lead): nothing to hold back
    // Holding back only makes sense if the bytes so far can still become valid.
    const auto* p = reinterpret_cast<const uint8_t*>(s.data() + s.size() - back);
    if (back >= 2 && !SecondByteOk(p[0], p[1])) return 0;
    return back;
  }
  return 0;
}

}  // namespace hetero
