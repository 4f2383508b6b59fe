// Semantic routing for the Understand stage: the host registers routes, each a name, a few
// example utterances and an action; a query is embedded once (Engine::Embed, on the CPU)
// and scored against every route's examples (cosine, the best example per route), and the
// best route above a threshold wins, else the default route.
//
//   auto router = hetero::SemanticRouter::Create(*engine, {
//       {"math", {"what is 12 times 7", "add 3 and 4"}, "tool:calculator"},
//       {"unsafe", {"how do I make a weapon"}, "refuse:I can't help with that."}});
//   auto decision = (*router)->Decide("multiply 6 by 9");  // decision->route == "math"
//
// In a task: RunOptions::router (refusals answered without Generate work, small routes on
// the CPU, tool routes held to a call of their tool; docs/UNDERSTAND.md). Decide is also
// usable on its own.
#ifndef HETERO_ROUTER_H_
#define HETERO_ROUTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/engine.h"
#include "hetero/export.h"

namespace hetero {

struct Route {
  std::string name;
  std::vector<std::string> examples;  // at least one
  // "generate" (normal path), "generate_small" (CPU only, short answer budget),
  // "tool:<name>" (call that tool directly), or "refuse:<message>".
  std::string action = "generate";
};

struct RouterOptions {
  // A best score below this chooses `default_route` (cosine, in [-1, 1]).
  double threshold = 0.0;
  std::string default_route = "default";  // need not be registered; its action is "generate"
  EmbeddingPooling pooling = EmbeddingPooling::kMean;
  int layers = 0;  // EmbedOptions::layers
  // Subtract the mean of all examples' embeddings from every vector before comparing: a
  // language model's hidden states share one large direction, which otherwise makes every
  // cosine close to 1.
  bool center = true;
};

struct RouteDecision {
  std::string route;     // the chosen route, or the default route
  std::string action;
  double score = 0;      // the best route's score (even when below the threshold)
  std::string best;      // the best-scoring route
  std::string runner_up; // the second-best route ("" with one route)
  double runner_up_score = 0;
  bool below_threshold = false;
  double ms = 0;         // embedding and scoring
};

// How well the routes' own examples route at one embedding depth (CrossValidateLayers).
struct LayerScore {
  int layers = 0;      // EmbedOptions::layers (0: all)
  int correct = 0;     // examples routed to their own route by the other examples
  int total = 0;       // examples whose route has at least one other example
  double accuracy() const { return total > 0 ? static_cast<double>(correct) / total : 0.0; }
};

class HETERO_EXPORT SemanticRouter {
 public:
  // Leave-one-out over the examples: each example is routed by all the others (centred on
  // their mean, as Create would), for each layer count in `candidates`. Chooses
  // RouterOptions::layers from the examples alone, with no held-out set; the pooling and
  // centring of `options` apply. Checks the routes as Create does; InvalidArgument for no
  // candidates or a negative one.
  static absl::StatusOr<std::vector<LayerScore>> CrossValidateLayers(Engine& engine, const std::vector<Route>& routes,
                                                                     const std::vector<int>& candidates,
                                                                     RouterOptions options = {});
  // The candidate with the best leave-one-out accuracy (the fewest layers on ties: faster).
  static int BestLayers(const std::vector<LayerScore>& scores);

  // Embeds every example (one batched call). InvalidArgument for an empty or duplicate
  // route name, a route without examples, an unknown action form, or an empty tool name.
  static absl::StatusOr<std::unique_ptr<SemanticRouter>> Create(Engine& engine, std::vector<Route> routes,
                                                                RouterOptions options = {});
  ~SemanticRouter();

  absl::StatusOr<RouteDecision> Decide(const std::string& query);
  // Several queries embedded in one batch (evaluation).
  absl::StatusOr<std::vector<RouteDecision>> DecideAll(const std::vector<std::string>& queries);

  const std::vector<Route>& routes() const;

  struct Impl;

 private:
  explicit SemanticRouter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hetero

#endif  // HETERO_ROUTER_H_
