// The labelled utterance sets the benchmarks read (tests/data/intents.jsonl): one JSON
// object per line, {"text", "intent", "split": "exemplar"|"test"}.
#ifndef HETERO_EXAMPLES_INTENTS_H_
#define HETERO_EXAMPLES_INTENTS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/router.h"

namespace hetero::bench {

struct IntentLine {
  std::string text, intent, split;
};

// The embedding depths the benchmarks try with --layers auto (0: all layers), for
// SemanticRouter::CrossValidateLayers.
inline const std::vector<int> kRouterDepthCandidates = {3, 6, 9, 12, 15, 18, 21, 24, 27, 0};

// NotFound when the file cannot be read; InvalidArgument naming the line when one is not
// such an object, or when there is no exemplar line.
absl::StatusOr<std::vector<IntentLine>> LoadIntentLines(const std::string& path);

// One route per intent (in name order) holding its exemplar lines, with action_of(intent).
std::vector<Route> ExemplarRoutes(const std::vector<IntentLine>& lines,
                                  const std::function<std::string(const std::string& intent)>& action_of);

}  // namespace hetero::bench

#endif  // HETERO_EXAMPLES_INTENTS_H_
