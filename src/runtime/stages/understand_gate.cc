// Understand's gate (RunOptions::safety, RunOptions::router): before any Generate work.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hetero/router.h"
#include "src/runtime/log_internal.h"
#include "src/runtime/stages/stages.h"
#include "src/runtime/tools/tool_call_constraint.h"
#include "src/runtime/status_macros.h"

namespace hetero {

absl::Status RunUnderstandGate(TaskContext& task, const std::string& user_message, const ToolRegistry* registry) {
  const RunOptions& options = *task.options;
  if (options.safety == nullptr && options.router == nullptr) return absl::OkStatus();
  const auto start = Clock::now();
  std::string reason;
  if (options.safety != nullptr) {
    const SafetyVerdict verdict = options.safety->Check(user_message);
    if (verdict.denied) {
      task.refusal = options.safety->rules().refusal;
      task.report.refused_by = absl::StrCat("deny ", verdict.rule);
      reason = absl::StrCat("refused by the safety gate (", verdict.rule, ")");
    }
  }
  if (!task.refusal.has_value() && options.router != nullptr) {
    HETERO_ASSIGN_OR_RETURN(RouteDecision d, options.router->Decide(user_message));
    TaskReport& r = task.report;
    r.route = d.route;
    r.route_action = d.action;
    r.route_score = d.score;
    r.route_runner_up = d.runner_up;
    r.route_runner_up_score = d.runner_up_score;
    r.route_ms = d.ms;
    task.route = d.route;
    if (absl::StartsWith(d.action, "refuse:")) {
      task.refusal = d.action.substr(7);
      r.refused_by = absl::StrCat("route '", d.route, "'");
      reason = absl::StrFormat("refused by route '%s' (score %.3f, runner-up '%s' %.3f)", d.route, d.score,
                               d.runner_up, d.runner_up_score);
    } else if (d.action == "generate_small") {
      task.small_answer = true;
    } else if (absl::StartsWith(d.action, "tool:") && registry != nullptr && options.constrain_tool_calls) {
      const std::string name = d.action.substr(5);
      for (size_t i = 0; i < registry->size(); ++i) {
        if (registry->tool(i).name != name) continue;
        const std::vector<std::string> names = {name};
        const std::vector<const internal::SchemaNode*> schemas = {&registry->schema(i).root()};
        task.route_grammar =
            internal::ToolCallGrammar(task.tool_format, names, schemas, /*max_calls=*/1, /*calls_only=*/true);
      }
      if (task.route_grammar == nullptr) {
        internal::Log(LogLevel::kWarning, absl::StrCat("route '", d.route, "' names tool '", name,
                                                       "', which is not registered: the normal path runs"));
      }
    }
  }
  if (task.refusal.has_value()) {
    StageReport stage;
    stage.stage = Stage::kUnderstand;
    stage.device = Device::kCpu;
    stage.reason = reason;
    stage.start_ms = task.MsSinceStart(start);
    stage.end_ms = task.MsSinceStart(Clock::now());
    task.report.stages.push_back(stage);
    task.report.stop_reason = "refused";
  }
  return absl::OkStatus();
}

}  // namespace hetero
