// TaskReport as JSON (hetero::TaskReportJson): the C ABI's report, the server's vendor field.
#include <nlohmann/json.hpp>

#include "hetero/engine.h"

namespace hetero {

std::string TaskReportJson(const TaskReport& r) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageReport& s : r.stages) {
    stages.push_back({{"stage", std::string(StageName(s.stage))},
                      {"device", std::string(DeviceName(s.device))},
                      {"start_ms", s.start_ms},
                      {"end_ms", s.end_ms},
                      {"tokens_in", s.tokens_in},
                      {"tokens_out", s.tokens_out},
                      {"reason", s.reason},
                      {"joules", s.joules},
                      {"idle_joules", s.idle_joules},
                      {"joules_estimated", s.joules_estimated},
                      {"cpu_expert_evaluations", s.cpu_expert_evaluations},
                      {"gpu_expert_evaluations", s.gpu_expert_evaluations},
                      {"expert_bytes_moved", s.expert_bytes_moved},
                      {"expert_wait_ms", s.expert_wait_ms}});
  }
  nlohmann::json calls = nlohmann::json::array();
  for (const ToolCallReport& c : r.tool_calls) {
    calls.push_back({{"round", c.round},
                     {"name", c.name},
                     {"arguments", c.arguments_json},
                     {"outcome", c.outcome},
                     {"detail", c.detail},
                     {"result_bytes", c.result_bytes},
                     {"truncated", c.truncated},
                     {"ms", c.ms},
                     {"duplicate", c.duplicate}});
  }
  const nlohmann::json j = {{"stages", stages},
          {"tool_calls", calls},
          {"prompt_tokens", r.prompt_tokens},
          {"reused_prompt_tokens", r.reused_prompt_tokens},
          {"shared_prompt_tokens", r.shared_prompt_tokens},
          {"route", r.route},
          {"route_action", r.route_action},
          {"route_score", r.route_score},
          {"route_runner_up", r.route_runner_up},
          {"route_runner_up_score", r.route_runner_up_score},
          {"refused_by", r.refused_by},
          {"generated_tokens", r.generated_tokens},
          {"time_to_first_token_ms", r.time_to_first_token_ms},
          {"total_ms", r.total_ms},
          {"stop_reason", r.stop_reason},
          {"tool_format", r.tool_format},
          {"constraint_ms", r.constraint_ms},
          {"constraint_masked_steps", r.constraint_masked_steps},
          {"joules", r.joules},
          {"tokens_per_joule", r.tokens_per_joule},
          {"energy_estimated", r.energy_estimated},
          {"energy_sources", r.energy_sources}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace hetero
