// hetero-bench --soak (examples/soak_bench.cc).
#ifndef HETERO_EXAMPLES_SOAK_BENCH_H_
#define HETERO_EXAMPLES_SOAK_BENCH_H_

#include <string>

#include "examples/tools/tool_suite.h"

namespace hetero::bench {

struct SoakOptions {
  std::string model;
  std::string suite = "tests/data/tool_suite.jsonl";
  std::string facts = example_tools::kDefaultFactsPath;
  double seconds = 60;
  int sessions = 4;          // concurrent sessions, one thread each
  int threads = 0;           // CPU threads of the engine; 0: the default
  int max_tokens = 32;       // per Generate stage
  double max_growth = 0.05;  // resident memory growth allowed after warm-up
  bool json = false;
};

// Exit status: 0 when every task ended as intended, the KV accounting returned to zero and
// resident memory grew by at most max_growth after warm-up; 1 otherwise.
int RunSoak(const SoakOptions& options);

}  // namespace hetero::bench

#endif  // HETERO_EXAMPLES_SOAK_BENCH_H_
