// Greedy runs whose generated token ids the tests compare: a fixed number of tokens (end of
// generation ignored), with each token's id in RunResult::logprobs.
#ifndef HETERO_TESTS_SUPPORT_GREEDY_RUN_H_
#define HETERO_TESTS_SUPPORT_GREEDY_RUN_H_

#include <cstdint>
#include <vector>

#include "hetero/engine.h"

namespace hetero::testing {

inline RunOptions GreedyRun(int tokens) {
  RunOptions r;
  r.max_tokens = tokens;
  r.ignore_end_of_generation = true;
  r.logprobs = 0;  // the token ids
  return r;
}

inline std::vector<int32_t> GeneratedTokens(const RunResult& r) {
  std::vector<int32_t> ids;
  for (const TokenLogprob& t : r.logprobs) ids.push_back(t.token);
  return ids;
}

}  // namespace hetero::testing

#endif  // HETERO_TESTS_SUPPORT_GREEDY_RUN_H_
