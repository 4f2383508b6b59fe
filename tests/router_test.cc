// SemanticRouter on the default model: a query equal to an example routes to its route with
// score ~1 and names a runner-up; a threshold above every score falls back to the default
// route (keeping the best route for the report); bad routes and queries are refused by name;
// leave-one-out cross-validation of the embedding depth on the examples.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/engine.h"
#include "hetero/router.h"
#include "tests/support/default_model.h"
#include "tests/support/status_matchers.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;
using ::testing::HasSubstr;

class RouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
    EngineOptions o;
    o.threads = 1;
    o.measure_energy = false;
    auto engine = Engine::Create(kDefaultModelPath, o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
  }
  static std::vector<Route> Routes() {
    return {{"math", {"What is 12 times 7?", "Add 3 and 4.", "Compute 15 percent of 80."}, "tool:calculator"},
            {"travel", {"Book me a flight to Paris.", "Reserve a hotel room in Rome for two nights."}, "refuse:I cannot book travel."},
            {"chat", {"Hello, how are you today?", "Thanks a lot, that was helpful!"}, "generate_small"}};
  }
  std::unique_ptr<Engine> engine_;
};

TEST_F(RouterTest, ExamplesRouteToTheirRoute) {
  auto router = SemanticRouter::Create(*engine_, Routes());
  ASSERT_TRUE(router.ok()) << router.status();
  auto d = (*router)->DecideAll({"Compute 15 percent of 80.", "Book me a flight to Paris.", "Hello, how are you today?"});
  ASSERT_TRUE(d.ok()) << d.status();
  const char* expected[] = {"math", "travel", "chat"};
  const char* actions[] = {"tool:calculator", "refuse:I cannot book travel.", "generate_small"};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*d)[i].route, expected[i]);
    EXPECT_EQ((*d)[i].best, expected[i]);
    EXPECT_EQ((*d)[i].action, actions[i]);
    EXPECT_NEAR((*d)[i].score, 1.0, 1e-4);
    EXPECT_FALSE((*d)[i].runner_up.empty());
    EXPECT_NE((*d)[i].runner_up, expected[i]);
    EXPECT_LT((*d)[i].runner_up_score, (*d)[i].score);
    EXPECT_FALSE((*d)[i].below_threshold);
    EXPECT_GT((*d)[i].ms, 0);
  }
  EXPECT_EQ(engine_->stats().kv_used_tokens, 0);
}

TEST_F(RouterTest, BelowTheThresholdTheDefaultRouteApplies) {
  RouterOptions o;
  o.threshold = 0.5;
  o.default_route = "fallback";
  auto router = SemanticRouter::Create(*engine_, Routes(), o);
  ASSERT_TRUE(router.ok());
  auto exact = (*router)->Decide("What is 12 times 7?");
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->route, "math");
  o.threshold = 1.01;  // above any cosine
  router = SemanticRouter::Create(*engine_, Routes(), o);
  ASSERT_TRUE(router.ok());
  auto d = (*router)->Decide("What is 12 times 7?");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->below_threshold);
  EXPECT_EQ(d->route, "fallback");
  EXPECT_EQ(d->action, "generate");
  EXPECT_EQ(d->best, "math") << "the report keeps what scored best";
  // A default route that is registered brings its own action.
  o.default_route = "chat";
  router = SemanticRouter::Create(*engine_, Routes(), o);
  d = (*router)->Decide("What is 12 times 7?");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->route, "chat");
  EXPECT_EQ(d->action, "generate_small");
}

TEST_F(RouterTest, RefusesBadRoutesAndQueries) {
  auto bad = [&](std::vector<Route> routes) { return SemanticRouter::Create(*engine_, std::move(routes)).status(); };
  EXPECT_THAT(bad({}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad({{"", {"x"}, "generate"}}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad({{"a", {"x"}, "generate"}, {"a", {"y"}, "generate"}}).message(), HasSubstr("'a' is registered twice"));
  EXPECT_THAT(bad({{"a", {}, "generate"}}).message(), HasSubstr("'a' has no example utterances"));
  EXPECT_THAT(bad({{"a", {""}, "generate"}}).message(), HasSubstr("empty example"));
  EXPECT_THAT(bad({{"a", {"x"}, "fly"}}).message(), HasSubstr("unknown action 'fly'"));
  EXPECT_THAT(bad({{"a", {"x"}, "tool:"}}).message(), HasSubstr("unknown action 'tool:'"));
  auto router = SemanticRouter::Create(*engine_, Routes());
  ASSERT_TRUE(router.ok());
  EXPECT_THAT((*router)->Decide(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EmbedOptions negative;
  negative.layers = -1;
  EXPECT_THAT(engine_->Embed({"x"}, negative), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Leave-one-out on the examples: a held-out example is routed by the others alone.
TEST_F(RouterTest, CrossValidationRoutesEachExampleByTheOthers) {
  // Twins: each held-out example has an identical one left in its own route (cosine 1), so
  // every one routes right; "chat" has a single example and is not a query.
  const std::vector<Route> twins = {{"math", {"What is 12 times 7?", "What is 12 times 7?"}, "generate"},
                                    {"travel", {"Book me a flight to Paris.", "Book me a flight to Paris."}, "generate"},
                                    {"chat", {"Hello, how are you today?"}, "generate"}};
  auto scores = SemanticRouter::CrossValidateLayers(*engine_, twins, {0, 4});
  ASSERT_TRUE(scores.ok()) << scores.status();
  ASSERT_EQ(scores->size(), 2u);
  EXPECT_EQ((*scores)[0].layers, 0);
  EXPECT_EQ((*scores)[1].layers, 4);
  for (const LayerScore& s : *scores) {
    EXPECT_EQ(s.total, 4);
    EXPECT_EQ(s.correct, 4);
  }
  // One text in both routes: held out of either, its twin in the other route wins, so at
  // most the two other examples can be right.
  const std::vector<Route> crossed = {{"a", {"Book me a flight to Paris.", "What is 12 times 7?"}, "generate"},
                                      {"b", {"What is 12 times 7?", "Thanks a lot, that was helpful!"}, "generate"}};
  scores = SemanticRouter::CrossValidateLayers(*engine_, crossed, {0});
  ASSERT_TRUE(scores.ok()) << scores.status();
  EXPECT_EQ((*scores)[0].total, 4);
  EXPECT_LE((*scores)[0].correct, 2);
  EXPECT_THAT(SemanticRouter::CrossValidateLayers(*engine_, twins, {}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SemanticRouter::CrossValidateLayers(*engine_, twins, {-1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
  EXPECT_THAT(SemanticRouter::CrossValidateLayers(*engine_, {}, {0}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(engine_->stats().kv_used_tokens, 0);
}

TEST(RouterLayersTest, BestLayersPrefersAccuracyThenFewerLayers) {
  EXPECT_EQ(SemanticRouter::BestLayers({}), 0);
  EXPECT_EQ(SemanticRouter::BestLayers({{0, 50, 64}, {12, 55, 64}, {6, 40, 64}}), 12);
  EXPECT_EQ(SemanticRouter::BestLayers({{0, 55, 64}, {18, 55, 64}, {9, 55, 64}}), 9);  // a tie: the shallowest
  EXPECT_EQ(SemanticRouter::BestLayers({{0, 56, 64}, {9, 55, 64}}), 0);                 // all layers when better
}

}  // namespace
}  // namespace hetero
