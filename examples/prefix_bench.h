// hetero-bench --prefix-sharing (examples/prefix_bench.cc).
#ifndef HETERO_EXAMPLES_PREFIX_BENCH_H_
#define HETERO_EXAMPLES_PREFIX_BENCH_H_

#include <string>

namespace hetero::bench {

struct PrefixBenchOptions {
  std::string model;
  int sessions = 8;      // sessions with one system prompt, alive together
  int max_tokens = 16;   // per answer
  int threads = 1;       // CPU threads of the engine
  int repetitions = 3;   // whole runs per setting; medians over them
  bool json = false;
};

// Runs the same sessions with EngineOptions::share_kv_prefixes off and on, side by side.
int RunPrefixBench(const PrefixBenchOptions& options);

}  // namespace hetero::bench

#endif  // HETERO_EXAMPLES_PREFIX_BENCH_H_
