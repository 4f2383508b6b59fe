// hetero-agent: a question through Understand -> Generate -> ToolCall -> ... on a model with
// the example tools (calculator, unit converter, clock, fact lookup), printing the answer,
// each stage (device, time, tokens) and each tool call. With --suite, runs a question file
// and reports valid-call rate, task success and tokens per solved task, constrained and
// (with --compare) unconstrained.
//
//   hetero-agent [-m MODEL] [-t THREADS] [-n TOKENS] [--no-constrain] [--format F]
//                [--tool-choice auto|required] [--no-think] [--facts FILE] ["question"]
//   hetero-agent --suite tests/data/tool_suite.jsonl [--compare] [--json] [--limit N]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "examples/tools/tool_suite.h"
#include "hetero/engine.h"
#include "hetero/log.h"
#include "nlohmann/json.hpp"

namespace {

constexpr char kDefaultQuestion[] = "What is 12.5 times 8, minus 3?";

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

struct Options {
  std::string model;
  std::string question = kDefaultQuestion;
  std::string suite;
  std::string facts = hetero::example_tools::kDefaultFactsPath;
  int threads = 0;
  int max_tokens = 160;
  int limit = 0;
  bool constrain = true;
  bool compare = false;
  bool json = false;
  hetero::ToolCallFormat format = hetero::ToolCallFormat::kAuto;
  bool require_tool_call = false;  // --tool-choice required: the first reply calls tools
  bool think = true;               // --no-think: reasoning templates answer without it
};

double GenerateMs(const hetero::TaskReport& report) {
  double ms = 0;
  for (const hetero::StageReport& s : report.stages) {
    if (s.stage == hetero::Stage::kGenerate) ms += s.end_ms - s.start_ms;
  }
  return ms;
}

void PrintReport(const std::string& question, const hetero::RunResult& r) {
  if (!r.reasoning.empty()) std::printf("reasoning: %s\n", r.reasoning.c_str());
  std::printf("question: %s\nanswer:   %s\n\n", question.c_str(), r.text.c_str());
  std::printf("%-10s %-4s %9s %9s %6s %6s  %s\n", "stage", "dev", "start ms", "end ms", "in", "out", "reason");
  for (const hetero::StageReport& s : r.report.stages) {
    std::printf("%-10s %-4s %9.1f %9.1f %6d %6d  %s\n", std::string(hetero::StageName(s.stage)).c_str(),
                std::string(hetero::DeviceName(s.device)).c_str(), s.start_ms, s.end_ms, s.tokens_in, s.tokens_out,
                s.reason.c_str());
  }
  for (const hetero::ToolCallReport& c : r.report.tool_calls) {
    std::printf("tool call (round %d): %s(%s) -> %s%s%s, %.1f ms%s\n", c.round, c.name.c_str(), c.arguments_json.c_str(),
                c.outcome.c_str(), c.detail.empty() ? "" : ": ", c.detail.c_str(), c.ms,
                c.duplicate ? " (repeated in the same reply: ran once)" : "");
  }
  std::printf("\nformat %s, %d prompt tokens, %d generated, %.0f ms in all (%s)\n", r.report.tool_format.c_str(),
              r.report.prompt_tokens, r.report.generated_tokens, r.report.total_ms, r.report.stop_reason.c_str());
  if (r.report.joules >= 0) {
    std::printf("energy: %.2f J (%.2f tokens/J), %s: %s\n", r.report.joules, r.report.tokens_per_joule,
                r.report.energy_estimated ? "estimated" : "measured", r.report.energy_sources.c_str());
  }
  const double generate_ms = GenerateMs(r.report);
  if (r.report.constraint_ms > 0 && generate_ms > 0) {
    std::printf("constrained decoding: %.1f ms of %.0f ms in Generate (%.2f%%), %d of %d steps masked\n",
                r.report.constraint_ms, generate_ms, 100.0 * r.report.constraint_ms / generate_ms,
                r.report.constraint_masked_steps, r.report.generated_tokens);
  }
}

struct SuiteScore {
  int questions = 0, solved = 0, calls = 0, valid_calls = 0, tool_tasks = 0;
  long generated_tokens = 0;
  double seconds = 0;
  double generate_ms = 0, constraint_ms = 0;  // decode time, and the constraint's share of it
  long masked_steps = 0;
};

absl::StatusOr<SuiteScore> RunSuite(hetero::Engine& engine, const Options& o, bool constrain,
                                    std::vector<nlohmann::json>& details) {
  auto tools = hetero::example_tools::MakeSuiteTools(o.facts, /*fixed_clock=*/true);
  if (!tools.ok()) return tools.status();
  auto questions = hetero::example_tools::LoadSuite(o.suite);
  if (!questions.ok()) return questions.status();
  SuiteScore score;
  const auto start = std::chrono::steady_clock::now();
  for (const hetero::example_tools::SuiteQuestion& q : *questions) {
    if (o.limit > 0 && score.questions >= o.limit) break;
    auto session = engine.NewSession();
    if (!session.ok()) return session.status();
    hetero::RunOptions run;
    run.max_tokens = o.max_tokens;
    run.tool_registry = *tools;
    run.tool_format = o.format;
    run.constrain_tool_calls = constrain;
    run.max_tool_rounds = 3;
    auto result = (*session)->Run(q.question, run);
    ++score.questions;
    nlohmann::json d = {{"id", q.id}, {"constrained", constrain}};
    if (!result.ok()) {
      d["error"] = std::string(result.status().message());
      details.push_back(d);
      continue;
    }
    const bool ok = hetero::example_tools::AnswerIsCorrect(result->text, q.answer, q.check);
    score.solved += ok;
    score.generated_tokens += result->report.generated_tokens;
    score.generate_ms += GenerateMs(result->report);
    score.constraint_ms += result->report.constraint_ms;
    score.masked_steps += result->report.constraint_masked_steps;
    if (!result->report.tool_calls.empty()) ++score.tool_tasks;
    for (const hetero::ToolCallReport& c : result->report.tool_calls) {
      ++score.calls;
      score.valid_calls += c.outcome != "parse_error" && c.outcome != "unknown_tool" && c.outcome != "invalid_arguments";
    }
    d["answer"] = result->text;
    d["solved"] = ok;
    d["tool_calls"] = result->report.tool_calls.size();
    nlohmann::json calls = nlohmann::json::array();
    for (const hetero::ToolCallReport& c : result->report.tool_calls) {
      calls.push_back({{"round", c.round}, {"name", c.name}, {"arguments", c.arguments_json}, {"outcome", c.outcome},
                       {"detail", c.detail}});
    }
    d["calls"] = calls;
    d["generated_tokens"] = result->report.generated_tokens;
    details.push_back(d);
  }
  score.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return score;
}

nlohmann::json ScoreJson(const SuiteScore& s) {
  return {{"questions", s.questions},
          {"solved", s.solved},
          {"success_rate", s.questions ? static_cast<double>(s.solved) / s.questions : 0.0},
          {"tasks_with_tool_calls", s.tool_tasks},
          {"tool_calls", s.calls},
          {"valid_calls", s.valid_calls},
          {"valid_call_rate", s.calls ? static_cast<double>(s.valid_calls) / s.calls : 0.0},
          {"generated_tokens", s.generated_tokens},
          {"tokens_per_solved_task", s.solved ? static_cast<double>(s.generated_tokens) / s.solved : 0.0},
          {"generate_ms", s.generate_ms},
          {"constraint_ms", s.constraint_ms},
          {"constraint_share_of_generate", s.generate_ms > 0 ? s.constraint_ms / s.generate_ms : 0.0},
          {"constraint_masked_steps", s.masked_steps},
          {"seconds", s.seconds}};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool question_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) std::exit(Fail("option " + a + " needs a value"));
      return argv[++i];
    };
    auto number = [&](int& out) {
      const std::string v = value();
      if (!absl::SimpleAtoi(v, &out) || out < 0) std::exit(Fail("option " + a + ": '" + v + "' is not a count"));
    };
    if (a == "-m") {
      o.model = value();
    } else if (a == "-t") {
      number(o.threads);
    } else if (a == "-n") {
      number(o.max_tokens);
    } else if (a == "--limit") {
      number(o.limit);
    } else if (a == "--no-constrain") {
      o.constrain = false;
    } else if (a == "--compare") {
      o.compare = true;
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--suite") {
      o.suite = value();
    } else if (a == "--facts") {
      o.facts = value();
    } else if (a == "--format") {
      const std::string f = value();
      if (f == "auto") {
        o.format = hetero::ToolCallFormat::kAuto;
      } else if (f == "hermes") {
        o.format = hetero::ToolCallFormat::kHermes;
      } else if (f == "llama3") {
        o.format = hetero::ToolCallFormat::kLlama3;
      } else if (f == "generic") {
        o.format = hetero::ToolCallFormat::kGeneric;
      } else if (f == "granite") {
        o.format = hetero::ToolCallFormat::kGranite;
      } else {
        return Fail("unknown format '" + f + "' (auto, hermes, llama3, granite, generic)");
      }
    } else if (a == "--tool-choice") {
      const std::string c = value();
      if (c != "auto" && c != "required") return Fail("unknown tool choice '" + c + "' (auto, required)");
      o.require_tool_call = c == "required";
    } else if (a == "--no-think") {
      o.think = false;
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: hetero-agent [-m MODEL] [-t THREADS] [-n TOKENS] [--no-constrain] [--format auto|hermes|llama3|granite|generic]\n"
          "                    [--tool-choice auto|required] [--no-think] [--facts FILE] [\"question\"]\n"
          "       hetero-agent --suite FILE [--compare] [--json] [--limit N] [--facts FILE]\n");
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      return Fail("unknown option '" + a + "' (try --help)");
    } else {
      if (question_given) return Fail("one question at a time (quote it)");
      o.question = a;
      question_given = true;
    }
  }
  hetero::SetLogCallback(hetero::LogToStderr, hetero::LogLevel::kWarning);
  hetero::EngineOptions engine_options;
  engine_options.threads = o.threads;
  engine_options.scheduler = "seed";
  auto engine = hetero::Engine::Create(o.model, engine_options);
  if (!engine.ok()) return Fail(std::string(engine.status().message()));

  if (o.suite.empty()) {
    auto tools = hetero::example_tools::MakeSuiteTools(o.facts, /*fixed_clock=*/false);
    if (!tools.ok()) return Fail(std::string(tools.status().message()));
    auto session = (*engine)->NewSession();
    if (!session.ok()) return Fail(std::string(session.status().message()));
    hetero::RunOptions run;
    run.max_tokens = o.max_tokens;
    run.tool_registry = *tools;
    run.tool_format = o.format;
    run.constrain_tool_calls = o.constrain;
    run.enable_thinking = o.think;
    if (o.require_tool_call) run.tool_choice = hetero::RunOptions::ToolChoice::kRequired;
    auto result = (*session)->Run(o.question, run);
    if (!result.ok()) return Fail(std::string(result.status().message()));
    PrintReport(o.question, *result);
    return 0;
  }

  std::vector<nlohmann::json> details;
  nlohmann::json out;
  for (bool constrain : o.compare ? std::vector<bool>{true, false} : std::vector<bool>{o.constrain}) {
    auto score = RunSuite(**engine, o, constrain, details);
    if (!score.ok()) return Fail(std::string(score.status().message()));
    const nlohmann::json s = ScoreJson(*score);
    out[constrain ? "constrained" : "unconstrained"] = s;
    if (!o.json) {
      std::printf("%-13s %d questions: solved %d (%.0f%%); %d tool calls, %d valid (%.1f%%); %.1f tokens per solved task; constraint %.2f%% of Generate; %.1f s\n",
                  constrain ? "constrained" : "unconstrained", score->questions, score->solved,
                  100.0 * s["success_rate"].get<double>(), score->calls, score->valid_calls,
                  100.0 * s["valid_call_rate"].get<double>(), s["tokens_per_solved_task"].get<double>(),
                  100.0 * s["constraint_share_of_generate"].get<double>(), score->seconds);
    }
  }
  if (o.json) {
    out["questions"] = details;
    std::printf("%s\n", out.dump(2).c_str());
  }
  return 0;
}
