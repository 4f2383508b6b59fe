// The three stages of a task. Each asks the scheduler for its placement and records a
// StageReport; none picks a device itself.
//  Understand: render the conversation with the chat template, tokenize, reuse the
//    longest prefix the session's KV cache already holds, and leave the rest to prefill.
//  Generate:   prefill the new tokens and decode on the placed device's worker (batched
//    with other sessions), streaming text.
//  ToolCall:   apply the scheduler's KV policy (keep, swap to host, discard), run the
//    caller's tool, append its results; the task then goes back to Understand.
#ifndef HETERO_RUNTIME_STAGES_STAGES_H_
#define HETERO_RUNTIME_STAGES_STAGES_H_

#include <string>

#include "absl/status/status.h"
#include "src/runtime/stages/task_context.h"

namespace hetero {

class UnderstandStage {
 public:
  absl::Status Run(TaskContext& task);
};

class GenerateStage {
 public:
  absl::Status Run(TaskContext& task);
};

class ToolCallStage {
 public:
  absl::Status Run(TaskContext& task);
};

// Understand's gate, run once per task before the first Understand when RunOptions::safety
// or ::router is set: deny rules, then the router. A refusal is left in task.refusal (and
// reported as an Understand stage on the CPU); generate_small and tool:<name> routes set
// task.small_answer and task.route_grammar.
absl::Status RunUnderstandGate(TaskContext& task, const std::string& user_message, const ToolRegistry* registry);

}  // namespace hetero

#endif  // HETERO_RUNTIME_STAGES_STAGES_H_
