// hetero-bench --route (examples/route_bench.cc).
#ifndef HETERO_EXAMPLES_ROUTE_BENCH_H_
#define HETERO_EXAMPLES_ROUTE_BENCH_H_

#include <string>

namespace hetero::bench {

struct RouteBenchOptions {
  std::string dataset;  // JSONL: {"text", "intent", "split": "exemplar"|"test"}
  std::string model;
  int threads = 1;
  int repetitions = 21;  // latency samples of the 32-token query
  int layers = 0;        // EmbedOptions::layers (0: all); -1: chosen by leave-one-out
                         // on the exemplars (SemanticRouter::CrossValidateLayers)
  bool json = false;
};

int RunRouteBench(const RouteBenchOptions& options);

}  // namespace hetero::bench

#endif  // HETERO_EXAMPLES_ROUTE_BENCH_H_
