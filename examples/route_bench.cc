// hetero-bench --route DATASET.jsonl: the semantic router on a labelled utterance set
// (tests/data/intents.jsonl). Each intent becomes a route whose examples are its
// "exemplar" lines; the "test" lines are held out. For each configuration (pooling mean or
// last token, centring on or off): accuracy on the held-out lines, per intent for the
// default one. Then the decision latency of a 32-token query (embedding and scoring),
// median of --reps runs, with the engine's threads (-t, default 1). --layers N embeds with
// the first N layers only (EmbedOptions::layers); --layers auto chooses N by leave-one-out
// accuracy on the exemplars (never on the held-out lines).
#include "examples/route_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "examples/intents.h"
#include "hetero/engine.h"
#include "hetero/model.h"
#include "hetero/router.h"
#include "hetero/tokenizer.h"
#include "nlohmann/json.hpp"

namespace hetero::bench {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

}  // namespace

int RunRouteBench(const RouteBenchOptions& o) {
  absl::StatusOr<std::vector<IntentLine>> loaded = LoadIntentLines(o.dataset);
  if (!loaded.ok()) return Fail(std::string(loaded.status().message()));
  const std::vector<IntentLine>& lines = *loaded;
  std::vector<const IntentLine*> tests;
  for (const IntentLine& l : lines) {
    if (l.split == "test") tests.push_back(&l);
  }
  if (tests.empty()) return Fail("the dataset needs test lines");
  EngineOptions engine_options;
  engine_options.threads = o.threads;
  engine_options.measure_energy = false;
  auto engine = Engine::Create(o.model, engine_options);
  if (!engine.ok()) return Fail(std::string(engine.status().message()));
  const std::vector<Route> routes = ExemplarRoutes(lines, [](const std::string&) { return std::string("generate"); });
  std::vector<std::string> queries;
  for (const IntentLine* l : tests) queries.push_back(l->text);
  // Whether each held-out line's best route is its intent, for a router with `ro`.
  const auto held_out_hits = [&](const RouterOptions& ro) -> absl::StatusOr<std::vector<bool>> {
    auto router = SemanticRouter::Create(**engine, routes, ro);
    if (!router.ok()) return router.status();
    auto decisions = (*router)->DecideAll(queries);
    if (!decisions.ok()) return decisions.status();
    std::vector<bool> hits;
    for (size_t i = 0; i < tests.size(); ++i) hits.push_back((*decisions)[i].best == tests[i]->intent);
    return hits;
  };
  const auto share = [&](const std::vector<bool>& hits) {
    return static_cast<double>(std::count(hits.begin(), hits.end(), true)) / static_cast<double>(hits.size());
  };
  int layers = o.layers;
  nlohmann::json layer_report = nlohmann::json::array();
  if (layers < 0) {
    // The depth is chosen on the exemplars alone; the held-out accuracy of every candidate
    // is printed beside it for information, never used to choose.
    auto scores = SemanticRouter::CrossValidateLayers(**engine, routes, kRouterDepthCandidates);
    if (!scores.ok()) return Fail(std::string(scores.status().message()));
    layers = SemanticRouter::BestLayers(*scores);
    if (!o.json) std::printf("layers   leave-one-out on exemplars   held-out (not used to choose)\n");
    for (const LayerScore& s : *scores) {
      RouterOptions ro;
      ro.layers = s.layers;
      absl::StatusOr<std::vector<bool>> hits = held_out_hits(ro);
      if (!hits.ok()) return Fail(std::string(hits.status().message()));
      const double held_out = share(*hits);
      layer_report.push_back({{"layers", s.layers}, {"leave_one_out", s.accuracy()}, {"held_out", held_out}});
      if (!o.json) {
        std::printf("%6s   %5.1f%% (%2d of %2d)%s       %5.1f%%\n", s.layers == 0 ? "all" : std::to_string(s.layers).c_str(),
                    100 * s.accuracy(), s.correct, s.total, s.layers == layers ? " <-" : "   ", 100 * held_out);
      }
    }
    if (!o.json) std::printf("chosen: %s layers\n", layers == 0 ? "all" : std::to_string(layers).c_str());
  }

  nlohmann::json report = {{"dataset", o.dataset}, {"test_lines", tests.size()}, {"routes", routes.size()}};
  if (!layer_report.empty()) report["layer_choice"] = layer_report;
  struct Config {
    const char* name;
    EmbeddingPooling pooling;
    bool center;
  };
  const Config configs[] = {{"mean, centred (default)", EmbeddingPooling::kMean, true},
                            {"mean, raw", EmbeddingPooling::kMean, false},
                            {"last token, centred", EmbeddingPooling::kLastToken, true},
                            {"last token, raw", EmbeddingPooling::kLastToken, false}};
  std::map<std::string, std::pair<int, int>> per_intent;  // default configuration
  for (const Config& c : configs) {
    RouterOptions ro;
    ro.layers = layers;
    ro.pooling = c.pooling;
    ro.center = c.center;
    absl::StatusOr<std::vector<bool>> hits = held_out_hits(ro);
    if (!hits.ok()) return Fail(std::string(hits.status().message()));
    for (size_t i = 0; i < tests.size() && &c == &configs[0]; ++i) {
      per_intent[tests[i]->intent].first += (*hits)[i];
      per_intent[tests[i]->intent].second += 1;
    }
    const int correct = static_cast<int>(std::count(hits->begin(), hits->end(), true));
    const double accuracy = static_cast<double>(correct) / static_cast<double>(tests.size());
    report["accuracy"][c.name] = accuracy;
    if (!o.json) std::printf("accuracy, %-24s %5.1f%% (%d of %zu held-out lines)\n", c.name, 100 * accuracy, correct, tests.size());
  }
  for (const auto& [intent, counts] : per_intent) {
    report["per_intent"][intent] = static_cast<double>(counts.first) / counts.second;
    if (!o.json) std::printf("  %-16s %2d / %2d\n", intent.c_str(), counts.first, counts.second);
  }

  // A 32-token query: held-out lines joined, cut at 32 tokens.
  auto path = ResolveModelPath(o.model);
  auto model = path.ok() ? Model::Load(*path) : path.status();
  auto tokenizer = model.ok() ? Tokenizer::Create(**model) : model.status();
  if (!tokenizer.ok()) return Fail(std::string(tokenizer.status().message()));
  std::string joined;
  for (const IntentLine* l : tests) joined += l->text + " ";
  std::vector<int32_t> ids = *(*tokenizer)->Encode(joined, false, false);
  ids.resize(32);
  const std::string query = *(*tokenizer)->Decode(ids);
  const int query_tokens = static_cast<int>((*tokenizer)->Encode(query, false, false)->size());
  RouterOptions latency_options;
  latency_options.layers = layers;
  auto router = SemanticRouter::Create(**engine, routes, latency_options);
  if (!router.ok()) return Fail(std::string(router.status().message()));
  std::vector<double> ms;
  for (int r = 0; r < std::max(1, o.repetitions); ++r) {
    auto d = (*router)->Decide(query);
    if (!d.ok()) return Fail(std::string(d.status().message()));
    ms.push_back(d->ms);
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  report["decision_ms_median"] = median;
  report["decision_query_tokens"] = query_tokens;
  report["threads"] = o.threads;
  report["layers"] = layers;
  if (o.json) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    std::printf("decision latency, %d-token query, %d thread%s: median %.1f ms (min %.1f, max %.1f, %zu runs)\n",
                query_tokens, o.threads, o.threads == 1 ? "" : "s", median, ms.front(), ms.back(), ms.size());
  }
  return 0;
}

}  // namespace hetero::bench
