#include <chrono>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "hetero/router.h"
#include "src/runtime/status_macros.h"

namespace hetero {

struct SemanticRouter::Impl {
  Engine* engine = nullptr;
  std::vector<Route> routes;
  RouterOptions options;
  int dim = 0;
  std::vector<float> mean;       // subtracted before comparing (zeros without centering)
  std::vector<float> examples;   // one row per example, centred and unit length
  std::vector<int> example_route;

  // Centres and normalises `v` in place.
  void Prepare(std::vector<float>& v) const {
    double norm = 0;
    for (int k = 0; k < dim; ++k) {
      v[k] -= mean[k];
      norm += static_cast<double>(v[k]) * v[k];
    }
    const float scale = norm > 0 ? static_cast<float>(1.0 / std::sqrt(norm)) : 0.0f;
    for (float& x : v) x *= scale;
  }

  // The index over `vectors` (raw embeddings, example_route set): their mean when
  // centring, then every one centred and scaled to unit length.
  void Index(std::vector<std::vector<float>> vectors) {
    dim = static_cast<int>(vectors.front().size());
    mean.assign(dim, 0.0f);
    if (options.center) {
      std::vector<double> sum(dim, 0.0);
      for (const auto& v : vectors) {
        for (int k = 0; k < dim; ++k) sum[k] += v[k];
      }
      for (int k = 0; k < dim; ++k) mean[k] = static_cast<float>(sum[k] / vectors.size());
    }
    examples.clear();
    examples.reserve(vectors.size() * dim);
    for (auto& v : vectors) {
      Prepare(v);
      examples.insert(examples.end(), v.begin(), v.end());
    }
  }

  RouteDecision Score(std::vector<float> query) const {
    Prepare(query);
    std::vector<double> best(routes.size(), -2.0);
    const size_t n = example_route.size();
    for (size_t i = 0; i < n; ++i) {  // examples x query: one matrix-vector product
      const float* row = examples.data() + i * dim;
      double dot = 0;
      for (int k = 0; k < dim; ++k) dot += static_cast<double>(row[k]) * query[k];
      double& b = best[example_route[i]];
      if (dot > b) b = dot;
    }
    int first = -1, second = -1;
    for (int r = 0; r < static_cast<int>(routes.size()); ++r) {
      if (first < 0 || best[r] > best[first]) {
        second = first;
        first = r;
      } else if (second < 0 || best[r] > best[second]) {
        second = r;
      }
    }
    RouteDecision d;
    d.best = routes[first].name;
    d.score = best[first];
    if (second >= 0) {
      d.runner_up = routes[second].name;
      d.runner_up_score = best[second];
    }
    d.below_threshold = d.score < options.threshold;
    if (d.below_threshold) {
      d.route = options.default_route;
      d.action = "generate";
      for (const Route& r : routes) {
        if (r.name == options.default_route) d.action = r.action;
      }
    } else {
      d.route = routes[first].name;
      d.action = routes[first].action;
    }
    return d;
  }
};

namespace {

absl::Status CheckAction(const Route& route) {
  const std::string& a = route.action;
  if (a == "generate" || a == "generate_small") return absl::OkStatus();
  if (absl::StartsWith(a, "tool:") && a.size() > 5) return absl::OkStatus();
  if (absl::StartsWith(a, "refuse:")) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("route '", route.name, "': unknown action '", a,
                                                 "' (generate, generate_small, tool:<name>, refuse:<message>)"));
}

}  // namespace

SemanticRouter::SemanticRouter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SemanticRouter::~SemanticRouter() = default;

const std::vector<Route>& SemanticRouter::routes() const { return impl_->routes; }

namespace {

// Checks the routes; their examples in order, and each one's route index.
absl::Status CollectExamples(const std::vector<Route>& routes, std::vector<std::string>& texts,
                             std::vector<int>& example_route) {
  if (routes.empty()) return absl::InvalidArgumentError("a router needs at least one route");
  absl::flat_hash_set<std::string> names;
  for (int r = 0; r < static_cast<int>(routes.size()); ++r) {
    const Route& route = routes[r];
    if (route.name.empty()) return absl::InvalidArgumentError(absl::StrCat("route ", r, " has no name"));
    if (!names.insert(route.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("route '", route.name, "' is registered twice"));
    }
    if (route.examples.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("route '", route.name, "' has no example utterances"));
    }
    HETERO_RETURN_IF_ERROR(CheckAction(route));
    for (const std::string& e : route.examples) {
      if (e.empty()) return absl::InvalidArgumentError(absl::StrCat("route '", route.name, "' has an empty example"));
      texts.push_back(e);
      example_route.push_back(r);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SemanticRouter>> SemanticRouter::Create(Engine& engine, std::vector<Route> routes,
                                                                       RouterOptions options) {
  std::vector<std::string> texts;
  auto impl = std::make_unique<Impl>();
  HETERO_RETURN_IF_ERROR(CollectExamples(routes, texts, impl->example_route));
  EmbedOptions embed;
  embed.pooling = options.pooling;
  embed.layers = options.layers;
  HETERO_ASSIGN_OR_RETURN(std::vector<std::vector<float>> vectors, engine.Embed(texts, embed));
  impl->options = std::move(options);
  impl->Index(std::move(vectors));
  impl->engine = &engine;
  impl->routes = std::move(routes);
  return std::unique_ptr<SemanticRouter>(new SemanticRouter(std::move(impl)));
}

absl::StatusOr<std::vector<LayerScore>> SemanticRouter::CrossValidateLayers(Engine& engine,
                                                                            const std::vector<Route>& routes,
                                                                            const std::vector<int>& candidates,
                                                                            RouterOptions options) {
  if (candidates.empty()) return absl::InvalidArgumentError("CrossValidateLayers needs at least one layer count");
  for (int c : candidates) {
    if (c < 0) return absl::InvalidArgumentError(absl::StrCat("layer count ", c, " is negative"));
  }
  std::vector<std::string> texts;
  std::vector<int> example_route;
  HETERO_RETURN_IF_ERROR(CollectExamples(routes, texts, example_route));
  std::vector<int> per_route(routes.size(), 0);
  for (int r : example_route) ++per_route[r];
  // One index reused by every fold: only its examples change.
  Impl fold;
  fold.routes = routes;
  fold.options = options;
  fold.options.threshold = -2.0;  // the best route, always
  std::vector<LayerScore> scores;
  for (int layers : candidates) {
    EmbedOptions embed;
    embed.pooling = options.pooling;
    embed.layers = layers;
    HETERO_ASSIGN_OR_RETURN(std::vector<std::vector<float>> vectors, engine.Embed(texts, embed));
    LayerScore score;
    score.layers = layers;
    for (size_t held = 0; held < texts.size(); ++held) {
      if (per_route[example_route[held]] < 2) continue;  // nothing left to match it
      fold.example_route.clear();
      std::vector<std::vector<float>> others;
      for (size_t i = 0; i < texts.size(); ++i) {
        if (i == held) continue;
        others.push_back(vectors[i]);
        fold.example_route.push_back(example_route[i]);
      }
      fold.Index(std::move(others));
      const RouteDecision d = fold.Score(vectors[held]);
      score.correct += d.best == routes[example_route[held]].name;
      ++score.total;
    }
    scores.push_back(score);
  }
  return scores;
}

int SemanticRouter::BestLayers(const std::vector<LayerScore>& scores) {
  const LayerScore* best = nullptr;
  const auto depth = [](int layers) { return layers == 0 ? std::numeric_limits<int>::max() : layers; };
  for (const LayerScore& s : scores) {
    if (best == nullptr || s.correct * best->total > best->correct * s.total ||
        (s.correct * best->total == best->correct * s.total && depth(s.layers) < depth(best->layers))) {
      best = &s;
    }
  }
  return best == nullptr ? 0 : best->layers;
}

absl::StatusOr<std::vector<RouteDecision>> SemanticRouter::DecideAll(const std::vector<std::string>& queries) {
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < queries.size(); ++i) {
    if (queries[i].empty()) return absl::InvalidArgumentError(absl::StrCat("query ", i, " is empty"));
  }
  EmbedOptions embed;
  embed.pooling = impl_->options.pooling;
  embed.layers = impl_->options.layers;
  HETERO_ASSIGN_OR_RETURN(std::vector<std::vector<float>> vectors, impl_->engine->Embed(queries, embed));
  std::vector<RouteDecision> out;
  out.reserve(vectors.size());
  for (auto& v : vectors) out.push_back(impl_->Score(std::move(v)));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (RouteDecision& d : out) d.ms = ms / static_cast<double>(out.size());
  return out;
}

absl::StatusOr<RouteDecision> SemanticRouter::Decide(const std::string& query) {
  HETERO_ASSIGN_OR_RETURN(std::vector<RouteDecision> d, DecideAll({query}));
  return d.front();
}

}  // namespace hetero
