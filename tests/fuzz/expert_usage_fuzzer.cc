// Fuzzes the expert-usage parser (include/hetero/scheduler.h's ParseExpertUsage, the input
// of EngineOptions::expert_usage_path). Properties checked on every input:
//  - parsing never crashes and refuses with InvalidArgument and a message;
//  - what it accepts writes back to JSON that parses to the same counts (round trip);
//  - adding the counts to themselves either doubles every count or refuses an overflow.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "hetero/scheduler.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "expert_usage_fuzzer: property violated: %s\n", what);
    std::abort();
  }
}

bool Same(const hetero::ExpertUsage& a, const hetero::ExpertUsage& b) {
  if (a.layers.size() != b.layers.size()) return false;
  for (size_t i = 0; i < a.layers.size(); ++i) {
    if (a.layers[i].layer != b.layers[i].layer || a.layers[i].evaluations != b.layers[i].evaluations) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<hetero::ExpertUsage> usage = hetero::ParseExpertUsage(text);
  if (!usage.ok()) {
    Check(usage.status().code() == absl::StatusCode::kInvalidArgument, "refusals are InvalidArgument");
    Check(!usage.status().message().empty(), "refusals say why");
    return 0;
  }
  absl::StatusOr<hetero::ExpertUsage> back = hetero::ParseExpertUsage(hetero::ExpertUsageToJson(*usage));
  Check(back.ok() && Same(*back, *usage), "round trip");
  absl::StatusOr<hetero::ExpertUsage> twice = hetero::AddExpertUsage(*usage, *usage);
  if (twice.ok()) {
    Check(twice->layers.size() == usage->layers.size(), "a sum keeps the layers");
    for (size_t i = 0; i < usage->layers.size(); ++i) {
      for (size_t e = 0; e < usage->layers[i].evaluations.size(); ++e) {
        Check(twice->layers[i].evaluations[e] == 2 * usage->layers[i].evaluations[e], "a sum adds");
      }
    }
  } else {
    Check(twice.status().code() == absl::StatusCode::kInvalidArgument, "an overflow is InvalidArgument");
  }
  return 0;
}
