// hetero-bench --agentic: a suite of tool-use tasks with checkable answers through the
// engine under each scheduler policy; per policy: tasks solved, problems per 1000 tokens
// (PPT), tokens, p50/p99 task latency, joules per task (TST), tokens per joule (TPW), and
// whether energy was estimated. --plot writes an SVG of joules per task against p50
// latency, one point per policy.
#include "examples/agentic_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "examples/intents.h"
#include "examples/tools/tool_suite.h"
#include "hetero/energy.h"
#include "hetero/engine.h"
#include "hetero/router.h"
#include "hetero/safety.h"
#include "nlohmann/json.hpp"

namespace hetero::bench {
namespace {

struct PolicyRow {
  std::string policy;
  int tasks = 0, solved = 0, errors = 0;
  int without_generate = 0;  // answered with no Generate stage (refusals)
  int solved_refusals = 0;   // of `solved`, requests to refuse (--router)
  int refused_questions = 0; // suite questions the gate refused (wrongly)
  std::vector<std::string> solved_ids;  // suite questions solved (with the route taken, when routed)
  int router_layers = -1;    // the router's embedding depth (0: all); -1 without a router
  long tokens = 0;
  double p50_ms = 0, p99_ms = 0;
  double joules = 0;  // all tasks
  bool estimated = false;
  std::string energy_sources;
  std::map<std::string, double> stage_joules;  // all tasks, by stage name
  // GPU 0's energy two ways (NVML found and the engine holding a GPU): read from NVML by
  // this program over the whole run, from the first task's start to the last one's end
  // (between tasks only session set-up runs, and nothing reads the counter), and the sum
  // of the reports' stage shares of it. Their agreement checks the engine's attribution
  // against the meter.
  double gpu_meter_joules = -1;
  double gpu_attributed_joules = 0;
  double gpu_meter_update_ms = 0;  // one interval between the counter's movements, 0 when unknown
  double ppt() const { return tokens > 0 ? 1000.0 * solved / static_cast<double>(tokens) : 0; }
  double tst() const { return tasks > 0 ? joules / tasks : 0; }
  double tpw() const { return joules > 0 ? static_cast<double>(tokens) / joules : 0; }
};


// The router's routes from a labelled set's exemplar lines: each intent's action.
std::string ActionOf(const std::string& intent) {
  if (intent == "calculator") return "tool:calculator";
  if (intent == "unit_conversion") return "tool:convert_units";
  if (intent == "current_time") return "tool:current_time";
  if (intent == "fact_lookup") return "tool:lookup";
  if (intent == "chitchat") return "generate_small";
  if (intent == "unsafe") return "refuse:I can't help with that request.";
  if (intent == "out_of_scope") return "refuse:I can't do that from here: I can only answer and use my tools.";
  return "generate";
}

struct LabelledLines {
  std::vector<Route> routes;
  std::vector<example_tools::SuiteQuestion> refusal_tasks;  // check "refusal"
};

absl::StatusOr<LabelledLines> LoadRoutes(const std::string& path, int refusal_tasks) {
  absl::StatusOr<std::vector<IntentLine>> loaded = LoadIntentLines(path);
  if (!loaded.ok()) return loaded.status();
  const std::vector<IntentLine>& lines = *loaded;
  std::vector<std::string> unsafe, out_of_scope;
  for (const IntentLine& l : lines) {
    if (l.split == "test" && l.intent == "unsafe") unsafe.push_back(l.text);
    if (l.split == "test" && l.intent == "out_of_scope") out_of_scope.push_back(l.text);
  }
  LabelledLines out;
  out.routes = ExemplarRoutes(lines, ActionOf);
  for (size_t i = 0; static_cast<int>(out.refusal_tasks.size()) < refusal_tasks &&
                     (i < unsafe.size() || i < out_of_scope.size());
       ++i) {
    for (const std::vector<std::string>* from : {&unsafe, &out_of_scope}) {
      if (i < from->size() && static_cast<int>(out.refusal_tasks.size()) < refusal_tasks) {
        out.refusal_tasks.push_back({absl::StrCat("refuse-", out.refusal_tasks.size() + 1), (*from)[i], "", "refusal"});
      }
    }
  }
  return out;
}

// GPU 0's part of a task's stage energies. Only exact for an engine of one CPU and one GPU,
// the bench's: a GPU stage's own share is its joules less idle_joules (the CPU's energy
// meanwhile), and a CPU stage's idle_joules is the GPU's energy while it waited.
double GpuJoulesOf(const TaskReport& report) {
  double joules = 0;
  for (const StageReport& s : report.stages) {
    if (s.joules < 0) continue;
    joules += s.device.kind == DeviceKind::kGpu ? s.joules - s.idle_joules : s.idle_joules;
  }
  return joules;
}

// NVML's counter moves in steps (every 100 ms on an H200), so a reading taken at any moment
// is up to a step old. These read it where it is exact: at a movement.
struct CounterStep {
  std::chrono::steady_clock::time_point time;
  double joules = 0;
};
// The next movement of `counter` (read in a tight loop, at most 2 s).
absl::StatusOr<CounterStep> NextStep(EnergyCounter& counter) {
  using Clock = std::chrono::steady_clock;
  const absl::StatusOr<double> first = counter.ReadJoules();
  if (!first.ok()) return first.status();
  const auto give_up = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < give_up) {
    const absl::StatusOr<double> j = counter.ReadJoules();
    if (!j.ok()) return j.status();
    if (*j != *first) return CounterStep{Clock::now(), *j};
  }
  return absl::DeadlineExceededError("the energy counter did not move in 2 s");
}
// The counter's value at `time`, a moment already past: the two movements after it, and
// the value interpolated back from the first at the power between them (the GPU is idle
// after a run ends, so that power holds back to `time`).
absl::StatusOr<double> JoulesAtPastMoment(EnergyCounter& counter, std::chrono::steady_clock::time_point time) {
  const absl::StatusOr<CounterStep> a = NextStep(counter);
  if (!a.ok()) return a.status();
  const absl::StatusOr<CounterStep> b = NextStep(counter);
  if (!b.ok()) return b.status();
  const double seconds = std::chrono::duration<double>(b->time - a->time).count();
  const double watts = seconds > 0 ? (b->joules - a->joules) / seconds : 0;
  return a->joules - watts * std::chrono::duration<double>(a->time - time).count();
}

absl::StatusOr<PolicyRow> RunPolicy(const AgenticOptions& o, const std::string& policy,
                                    const std::vector<example_tools::SuiteQuestion>& questions,
                                    const std::shared_ptr<ToolRegistry>& tools, const std::vector<Route>* routes) {
  EngineOptions engine_options;
  engine_options.threads = o.threads;
  engine_options.scheduler = policy;
  auto engine = Engine::Create(o.model, engine_options);
  if (!engine.ok()) return engine.status();
  PolicyRow row;
  std::shared_ptr<SemanticRouter> router;
  std::shared_ptr<const SafetyGate> safety;
  if (routes != nullptr) {
    RouterOptions router_options;
    router_options.layers = o.router_layers;
    if (o.router_layers < 0) {  // chosen on the exemplars (leave-one-out)
      auto scores = SemanticRouter::CrossValidateLayers(**engine, *routes, kRouterDepthCandidates);
      if (!scores.ok()) return scores.status();
      router_options.layers = SemanticRouter::BestLayers(*scores);
    }
    row.router_layers = router_options.layers;
    auto created = SemanticRouter::Create(**engine, *routes, router_options);
    if (!created.ok()) return created.status();
    router = std::move(*created);
    auto gate = SafetyGate::Create(SafetyRules{});  // injection scan of tool results
    if (!gate.ok()) return gate.status();
    safety = *gate;
  }
  row.policy = routes != nullptr ? policy + "+router" : policy;
  std::unique_ptr<EnergyCounter> gpu_meter;
  const SystemSnapshot snapshot = (*engine)->snapshot();
  const auto& devices = snapshot.devices;
  const bool one_cpu_one_gpu = devices.size() == 2 && devices[1].available && devices[1].device.kind == DeviceKind::kGpu;
  if (one_cpu_one_gpu) {
    std::string why_none;
    auto counters = FindNvmlCounters("libnvidia-ml.so.1", &why_none);
    if (!counters.empty() && !counters.front()->estimated()) {
      gpu_meter = std::move(counters.front());
    }
  }
  // The run starts right at a movement of the counter, where its reading is exact.
  absl::StatusOr<CounterStep> run_start = absl::UnavailableError("no NVML counter");
  if (gpu_meter) {
    const absl::StatusOr<CounterStep> before = NextStep(*gpu_meter);
    run_start = NextStep(*gpu_meter);
    if (before.ok() && run_start.ok()) {
      row.gpu_meter_update_ms = std::chrono::duration<double, std::milli>(run_start->time - before->time).count();
    }
  }
  std::vector<double> latencies;
  for (const example_tools::SuiteQuestion& q : questions) {
    auto session = (*engine)->NewSession();
    if (!session.ok()) return session.status();
    RunOptions run;
    run.max_tokens = o.max_tokens;
    run.tool_registry = tools;
    run.max_tool_rounds = 3;
    run.router = router;
    run.safety = safety;
    auto result = (*session)->Run(q.question, run);
    ++row.tasks;
    if (!result.ok()) {
      ++row.errors;
      continue;
    }
    row.gpu_attributed_joules += GpuJoulesOf(result->report);
    bool generated = false;
    for (const StageReport& s : result->report.stages) generated |= s.stage == Stage::kGenerate;
    row.without_generate += !generated;
    // A request to refuse is solved by a refusal: one the gate made, or a model reply that
    // called no tool (generous to routing off: any answer without a tool call counts).
    const bool solved = q.check == "refusal" ? (!result->report.refused_by.empty() || result->report.tool_calls.empty())
                                             : example_tools::AnswerIsCorrect(result->text, q.answer, q.check);
    row.solved += solved;
    row.solved_refusals += q.check == "refusal" && solved;
    row.refused_questions += q.check != "refusal" && !result->report.refused_by.empty();
    if (solved && q.check != "refusal") {
      row.solved_ids.push_back(result->report.route.empty() ? q.id : absl::StrCat(q.id, "(", result->report.route, ")"));
    }
    row.tokens += result->report.generated_tokens;
    latencies.push_back(result->report.total_ms);
    if (result->report.joules >= 0) row.joules += result->report.joules;
    for (const StageReport& s : result->report.stages) {
      if (s.joules >= 0) row.stage_joules[std::string(StageName(s.stage))] += s.joules;
    }
    row.estimated |= result->report.energy_estimated || result->report.joules < 0;
    row.energy_sources = result->report.energy_sources;
  }
  if (gpu_meter && run_start.ok() && row.errors == 0) {
    const absl::StatusOr<double> at_end = JoulesAtPastMoment(*gpu_meter, std::chrono::steady_clock::now());
    if (at_end.ok()) row.gpu_meter_joules = *at_end - run_start->joules;
  }
  row.p50_ms = Percentile(latencies, 50);
  row.p99_ms = Percentile(latencies, 99);
  return row;
}

// Joules per task against p50 latency, one labelled point per policy.
std::string Svg(const std::vector<PolicyRow>& rows) {
  constexpr double kW = 640, kH = 420, kLeft = 70, kRight = 30, kTop = 40, kBottom = 60;
  double max_x = 1, max_y = 1;
  for (const PolicyRow& r : rows) {
    max_x = std::max(max_x, r.p50_ms / 1000.0);
    max_y = std::max(max_y, r.tst());
  }
  max_x *= 1.15;
  max_y *= 1.15;
  const auto x = [&](double v) { return kLeft + v / max_x * (kW - kLeft - kRight); };
  const auto y = [&](double v) { return kH - kBottom - v / max_y * (kH - kTop - kBottom); };
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"22\" font-size=\"14\">Joules per task vs p50 task latency, per scheduler policy</text>\n",
      kW, kH, kLeft);
  absl::StrAppendFormat(&svg, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", kLeft,
                        kH - kBottom, kW - kRight, kH - kBottom);
  absl::StrAppendFormat(&svg, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", kLeft, kTop,
                        kLeft, kH - kBottom);
  for (int i = 0; i <= 4; ++i) {
    const double vx = max_x * i / 4, vy = max_y * i / 4;
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.2f</text>\n", x(vx),
                          kH - kBottom + 18, vx);
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.1f</text>\n", kLeft - 6, y(vy) + 4,
                          vy);
  }
  absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">p50 task latency (s)</text>\n",
                        (kLeft + kW - kRight) / 2, kH - 18);
  absl::StrAppendFormat(&svg,
                        "<text transform=\"translate(18 %.1f) rotate(-90)\" text-anchor=\"middle\">joules per task%s</text>\n",
                        (kTop + kH - kBottom) / 2,
                        std::any_of(rows.begin(), rows.end(), [](const PolicyRow& r) { return r.estimated; })
                            ? " (estimated)"
                            : "");
  for (const PolicyRow& r : rows) {
    absl::StrAppendFormat(&svg, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"#1f77b4\"/>\n", x(r.p50_ms / 1000.0),
                          y(r.tst()));
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", x(r.p50_ms / 1000.0) + 8, y(r.tst()) - 6,
                          r.policy);
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank.
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

int RunAgenticBench(const AgenticOptions& o) {
  const auto fail = [](const std::string& message) {
    std::fprintf(stderr, "error: %s\n", message.c_str());
    return 1;
  };
  auto questions = example_tools::LoadSuite(o.suite);
  if (!questions.ok()) return fail(std::string(questions.status().message()));
  if (o.limit > 0 && static_cast<int>(questions->size()) > o.limit) questions->resize(o.limit);
  auto tools = example_tools::MakeSuiteTools(o.facts, /*fixed_clock=*/true);
  if (!tools.ok()) return fail(std::string(tools.status().message()));
  std::vector<std::string> policies = {o.policy};
  if (o.policy == "all") policies = {"seed", "all-cpu", "all-gpu", "cost"};
  std::optional<LabelledLines> labelled;
  if (!o.router.empty()) {
    // --limit caps the added refusal tasks too.
    auto loaded = LoadRoutes(o.router, o.limit > 0 ? std::min(o.limit, o.refusal_tasks) : o.refusal_tasks);
    if (!loaded.ok()) return fail(std::string(loaded.status().message()));
    labelled = std::move(*loaded);
    questions->insert(questions->end(), labelled->refusal_tasks.begin(), labelled->refusal_tasks.end());
  }
  std::vector<PolicyRow> rows;
  for (const std::string& policy : policies) {
    for (bool routed : {false, true}) {
      if (routed && !labelled.has_value()) continue;
      auto row = RunPolicy(o, policy, *questions, *tools, routed ? &labelled->routes : nullptr);
      if (!row.ok()) return fail(absl::StrCat("policy ", policy, ": ", row.status().message()));
      rows.push_back(*row);
    }
  }
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const PolicyRow& r : rows) {
      out.push_back({{"policy", r.policy}, {"tasks", r.tasks}, {"solved", r.solved}, {"errors", r.errors},
                     {"without_generate", r.without_generate}, {"router_layers", r.router_layers},
                     {"solved_refusals", r.solved_refusals}, {"refused_questions", r.refused_questions},
                     {"solved_questions", r.solved_ids},
                     {"ppt", r.ppt()}, {"tokens", r.tokens}, {"p50_ms", r.p50_ms}, {"p99_ms", r.p99_ms},
                     {"joules_per_task", r.tst()}, {"tokens_per_joule", r.tpw()}, {"estimated", r.estimated},
                     {"energy_sources", r.energy_sources}, {"stage_joules", r.stage_joules}});
      if (r.gpu_meter_joules >= 0) {
        out.back()["gpu_meter_joules"] = r.gpu_meter_joules;
        out.back()["gpu_attributed_joules"] = r.gpu_attributed_joules;
        out.back()["gpu_meter_update_ms"] = r.gpu_meter_update_ms;
      }
    }
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("%-15s %6s %6s %6s %7s %7s %9s %9s %9s %8s  %s\n", "policy", "tasks", "solved", "no-gen", "PPT", "tokens",
                "p50 ms", "p99 ms", "J/task", "tok/J", "energy");
    for (const PolicyRow& r : rows) {
      std::printf("%-15s %6d %6d %6d %7.2f %7ld %9.0f %9.0f %9.2f %8.3f  %s\n", r.policy.c_str(), r.tasks, r.solved,
                  r.without_generate, r.ppt(), r.tokens, r.p50_ms, r.p99_ms, r.tst(), r.tpw(),
                  r.estimated ? "estimated" : "measured");
    }
    if (!rows.empty()) std::printf("energy sources: %s\n", rows.back().energy_sources.c_str());
    for (const PolicyRow& r : rows) {
      std::string stages;
      for (const auto& [stage, joules] : r.stage_joules) {
        absl::StrAppendFormat(&stages, " %s %.2f", stage, r.tasks > 0 ? joules / r.tasks : 0);
      }
      std::printf("%s: J/task by stage:%s\n", r.policy.c_str(), stages.c_str());
      if (r.gpu_meter_joules >= 0) {
        std::printf("%s: GPU energy over the run: NVML %.2f J (its counter moves every %.0f ms), the reports' "
                    "stage shares %.2f J (%+.2f%%)\n",
                    r.policy.c_str(), r.gpu_meter_joules, r.gpu_meter_update_ms, r.gpu_attributed_joules,
                    r.gpu_meter_joules > 0 ? 100.0 * (r.gpu_attributed_joules / r.gpu_meter_joules - 1) : 0.0);
      }
    }
    if (labelled.has_value()) {
      for (const PolicyRow& r : rows) {
        std::printf("%s: solved %d suite questions and %d of %zu requests to refuse; %d suite questions refused\n",
                    r.policy.c_str(), r.solved - r.solved_refusals, r.solved_refusals, labelled->refusal_tasks.size(),
                    r.refused_questions);
        std::printf("  questions solved: %s\n", absl::StrJoin(r.solved_ids, " ").c_str());
      }
    }
    for (const PolicyRow& r : rows) {
      if (r.router_layers >= 0) {
        std::printf("router embedding depth: %s layers\n", r.router_layers == 0 ? "all" : std::to_string(r.router_layers).c_str());
        break;
      }
    }
  }
  if (!o.plot.empty()) {
    std::ofstream svg(o.plot);
    svg << Svg(rows);
    if (!svg) return fail("cannot write " + o.plot);
  }
  return 0;
}

}  // namespace hetero::bench
