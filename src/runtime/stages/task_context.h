// What the stages of one task share: the session's conversation and KV state, the engine's
// services (scheduler, devices, template, tokenizer), the options and the report.
#ifndef HETERO_RUNTIME_STAGES_TASK_CONTEXT_H_
#define HETERO_RUNTIME_STAGES_TASK_CONTEXT_H_

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hetero/chat.h"
#include "hetero/engine.h"
#include "hetero/scheduler.h"
#include "hetero/tokenizer.h"
#include "src/runtime/backend.h"
#include "src/runtime/device_worker.h"
#include "src/runtime/tools/json_matcher.h"
#include "src/runtime/tools/tool_call_constraint.h"
#include "src/runtime/tools/tool_prompt.h"

namespace hetero {

// The engine services stages call (implemented by the engine).
class StageServices {
 public:
  virtual ~StageServices() = default;
  // The scheduler's placement, with unavailable devices replaced by the CPU (noticed once).
  virtual Placement Place(Stage stage, const TaskState& task) = 0;
  virtual DeviceWorker& Worker(Device device) = 0;
  virtual const ChatTemplate& chat_template() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  // Every token's bytes, for constrained decoding (built on first use).
  virtual std::shared_ptr<const internal::VocabBytes> vocab_bytes() = 0;
};

// A session's KV state: which backend sequence holds which tokens.
struct SessionKv {
  Device device = Device::kCpu;
  std::optional<SequenceId> seq;         // none: nothing cached
  std::vector<int32_t> tokens;           // the tokens that sequence holds
  std::optional<SavedSequence> swapped;  // KV parked in host memory during a tool call
};

struct TaskContext {
  StageServices* services = nullptr;
  uint64_t task_id = 0;
  Clock::time_point start;
  const RunOptions* options = nullptr;
  std::optional<Clock::time_point> deadline;
  const std::atomic<bool>* cancelled = nullptr;
  std::vector<ChatMessage>* messages = nullptr;  // the conversation, including the new turn
  internal::GeneratedTurns* generated = nullptr;  // its assistant turns as generated with tools (set)
  SessionKv* kv = nullptr;
  TaskReport report;

  // Set after a device ran out of memory for this task: every later stage runs on the CPU,
  // and this (why) ends their reasons.
  std::optional<std::string> force_cpu;

  // The Understand gate (RunOptions::safety, router): a `generate_small` route (CPU,
  // short budget), and for a `tool:<name>` route the grammar of the first reply.
  bool small_answer = false;
  std::optional<std::string> refusal;  // set: the task answers this, with no more Generate
  std::string route;
  std::shared_ptr<const internal::Grammar> route_grammar;
  // RunOptions::response_schema_json, compiled: the grammar the whole reply is held to.
  std::shared_ptr<const internal::Grammar> response_grammar;
  int max_tokens() const {
    return small_answer ? std::min(options->max_tokens, options->small_answer_tokens) : options->max_tokens;
  }

  // Set by Understand for Generate.
  std::vector<int32_t> prompt_tokens;
  size_t reused_tokens = 0;
  Placement generate_placement;
  // Tools (RunOptions::tool_registry): the format in use, the grammar that constrains
  // calls (null when unconstrained), the round, and Generate's reply parsed.
  ToolCallFormat tool_format = ToolCallFormat::kGeneric;
  std::shared_ptr<const internal::Grammar> tool_grammar;
  // Generic format: the answer-only grammar ({"response": ...}), used for the last round
  // and after a round that only repeated earlier calls.
  std::shared_ptr<const internal::Grammar> answer_grammar;
  bool answer_only = false;
  int tool_round = 0;
  ParsedReply parsed;

  // Set by Generate.
  std::string reply;
  std::vector<TokenLogprob> token_logprobs;  // RunOptions::logprobs >= 0

  double MsSinceStart(Clock::time_point t) const {
    return std::chrono::duration<double, std::milli>(t - start).count();
  }
  TaskState State() const;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_STAGES_TASK_CONTEXT_H_
