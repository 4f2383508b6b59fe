// hetero-bench --agentic (examples/agentic_bench.cc).
#ifndef HETERO_EXAMPLES_AGENTIC_BENCH_H_
#define HETERO_EXAMPLES_AGENTIC_BENCH_H_

#include <string>
#include <vector>

#include "examples/tools/tool_suite.h"

namespace hetero::bench {

struct AgenticOptions {
  std::string suite;
  std::string policy = "all";  // a scheduler name, or "all"
  std::string model;
  std::string facts = example_tools::kDefaultFactsPath;
  std::string plot;            // SVG path; empty: none
  int threads = 0;
  int max_tokens = 160;
  int limit = 0;               // first N questions; 0: all
  bool json = false;
  // Routing on against off (docs/UNDERSTAND.md): a labelled utterance set whose exemplar
  // lines become the router's routes; its held-out unsafe and out-of-scope lines join the
  // suite as tasks solved by a refusal. Each policy then runs twice, without and with the
  // router and a safety gate.
  std::string router;
  int refusal_tasks = 10;  // held-out unsafe/out-of-scope lines added (alternating; at most --limit)
  int router_layers = 0;   // RouterOptions::layers (0: all); -1: chosen by leave-one-out on the exemplars
};

int RunAgenticBench(const AgenticOptions& options);

// The p-th percentile of `v` by nearest rank (0 when empty); shared by the benchmarks.
double Percentile(std::vector<double> v, double p);

}  // namespace hetero::bench

#endif  // HETERO_EXAMPLES_AGENTIC_BENCH_H_
