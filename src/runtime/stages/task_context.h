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
#include "src/runtime/device_registry.h"
#include "src/runtime/device_worker.h"
#include "src/runtime/placer.h"
#include "src/runtime/session_kv.h"
#include "src/runtime/tools/json_matcher.h"
#include "src/runtime/tools/tool_call_constraint.h"
#include "src/runtime/tools/tool_prompt.h"

namespace hetero {

// What the stages use of the engine, all below them: its devices, the placement (the
// policy with its rules), the template and the tokenizer. The engine owns these; stages only
// call down, never back into the engine.
class StageServices {
 public:
  StageServices(DeviceRegistry& devices, Placer& placer, const ChatTemplate& chat, const Tokenizer& tokenizer)
      : devices_(devices), placer_(placer), chat_(chat), tokenizer_(tokenizer) {}
  Placement Place(Stage stage, const TaskState& task) { return placer_.Place(stage, task); }
  SystemSnapshot Snapshot() const { return placer_.Snapshot(); }
  Placement PlaceWith(Stage stage, const TaskState& task, const SystemSnapshot& system) {
    return placer_.PlaceWith(stage, task, system);
  }
  DeviceRegistry& devices() { return devices_; }
  DeviceWorker& Worker(Device device) { return devices_.Worker(device); }
  const ChatTemplate& chat_template() const { return chat_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  // Every token's bytes, for constrained decoding (built on first use).
  std::shared_ptr<const internal::VocabBytes> vocab_bytes() {
    MutexLock lock(&mu_);
    if (vocab_bytes_ == nullptr) vocab_bytes_ = std::make_shared<const internal::VocabBytes>(tokenizer_);
    return vocab_bytes_;
  }

 private:
  DeviceRegistry& devices_;
  Placer& placer_;
  const ChatTemplate& chat_;
  const Tokenizer& tokenizer_;
  Mutex mu_;
  std::shared_ptr<const internal::VocabBytes> vocab_bytes_ ABSL_GUARDED_BY(mu_);
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

  // Set after a device ran out of memory for this task (TaskState::out_of_memory_device):
  // the placement rules move later stages off it.
  std::optional<Device> out_of_memory_device;
  std::string out_of_memory_message;

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
