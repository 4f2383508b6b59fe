// The engine: one model, its backends (the CPU; the GPU when present), one scheduler, a
// worker per device that batches the decode steps of every session placed on it
// (continuous batching), and sessions, each one conversation with its own KV cache.
//
//   auto engine = hetero::Engine::Create("model.gguf");
//   auto session = (*engine)->NewSession("You are terse.");
//   auto result = (*session)->Run("What is the capital of France?");
//   // result->text, result->report.stages (stage, device, times, tokens)
//
// A task passes through the stages Understand (template, tokenize, prefill, reusing the
// KV of earlier turns), Generate (decode), and, when the model calls a tool and the caller
// handles it, ToolCall (the KV policy chosen by the scheduler, the tool, then Understand of
// the result). Sessions may run concurrently from different threads.
#ifndef HETERO_ENGINE_H_
#define HETERO_ENGINE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/chat.h"
#include "hetero/export.h"
#include "hetero/safety.h"
#include "hetero/sampling.h"
#include "hetero/scheduler.h"
#include "hetero/tokenizer.h"
#include "hetero/tools.h"

namespace hetero {

class SemanticRouter;  // hetero/router.h

// How the CPU backend holds and multiplies weight matrices.
enum class CpuPrecision {
  kAuto,  // native kernels for every format they run fast here, with int8 activations: one
          // pass for a prompt's tokens, and with AVX-512 VNNI two (the remainder too) for
          // generated ones, so greedy decoding follows the model; other formats bf16 (f32
          // without avx512_bf16)
  kF32,   // every matrix dequantized to f32, f32 matmuls: the accuracy reference mode
  kBf16,  // every matrix converted to bf16 at load
  kInt8,  // as kAuto, but generated tokens take one int8 pass everywhere: decode 4-28% faster
          // with VNNI (docs/PERFORMANCE.md), greedy tokens leave the model's sooner
};
// "auto", "int8", "f32" or "bf16"; InvalidArgument lists them. The one parser of the option.
HETERO_EXPORT absl::StatusOr<CpuPrecision> ParseCpuPrecision(std::string_view name);

struct EngineOptions {
  int threads = 0;                               // CPU threads; 0: every logical CPU
  std::string scheduler = "seed";                // a built-in policy (see MakeScheduler)
  std::shared_ptr<Scheduler> custom_scheduler;   // used instead of `scheduler` when set
  std::string calibration_profile;               // `hetero-bench --calibrate` output; empty:
                                                 // $HETERO_PROFILE, else default costs
  int max_queued_tasks = 64;                     // more waiting tasks: Run answers Unavailable
  int max_batch = 16;                            // decode steps batched together per device
  int max_sessions = 64;
  int kv_capacity_tokens = 0;                    // per device; 0: 4 x the context length
  bool share_kv_prefixes = true;                 // sessions starting with the same tokens
                                                 // (a system prompt) share their KV blocks
  std::string cpu_precision = "auto";            // see ParseCpuPrecision
  std::string chat_format;                       // empty: the model's template; else a
                                                 // family name (see ParseChatFormat)
  bool measure_energy = true;                    // joules per stage in every TaskReport
  std::string power_model;                       // JSON (docs/METRICS.md); empty:
                                                 // $HETERO_POWER_MODEL, else defaults
  // The most device memory the model may hold on each GPU (weights, KV pool, scratch);
  // 0: no budget. With a budget, a mixture-of-experts model keeps on the GPU what the
  // scheduler's PlaceExperts chooses and evaluates the other routed experts on the CPU;
  // Engine::Create fails (ResourceExhausted) when the budget cannot hold what the GPU must.
  uint64_t gpu_memory_budget_bytes = 0;
  // A file Engine::SaveExpertUsage wrote on an earlier run of this model: its counts say
  // which routed experts the placement within gpu_memory_budget_bytes should keep on the
  // GPU (the most used per byte), and Engine::expert_usage adds to them. Empty: none (every
  // expert taken as equally used). A missing or unreadable file fails Engine::Create with
  // NotFound; a corrupt one, or one naming layers or expert counts this model does not
  // have, with InvalidArgument.
  std::string expert_usage_path;
};

// How Engine::Embed turns a text's hidden states into one vector.
enum class EmbeddingPooling {
  kMean,       // the mean over its tokens of the final norm's output
  kLastToken,  // the final norm's output at its last token
};

struct EmbedOptions {
  EmbeddingPooling pooling = EmbeddingPooling::kMean;
  // Hidden states after this many layers (then the final norm); 0: all of them. Fewer
  // layers are proportionally faster, and middle layers often separate topics better.
  int layers = 0;
};

struct StageReport {
  Stage stage = Stage::kUnderstand;
  Device device = Device::kCpu;
  double start_ms = 0;   // from the start of the task
  double end_ms = 0;
  int tokens_in = 0;     // prompt tokens encoded (Understand), fed (Generate)
  int tokens_out = 0;    // tokens generated (Generate)
  KvPolicy kv_policy = KvPolicy::kKeep;  // ToolCall
  std::string reason;    // the scheduler's
  // Energy (docs/METRICS.md): this stage's share of its device's energy plus its share of
  // devices held but idle meanwhile (idle_joules, included in joules); -1 when energy is
  // not measured. `joules_estimated`: from a power model, or interpolated over a window
  // shorter than the counter's updates.
  double joules = -1;
  double idle_joules = 0;
  bool joules_estimated = true;
  // Mixture-of-experts models: this stage's routed expert evaluations (token x chosen
  // expert) on each device, and for those a GPU left to the CPU (a GPU memory budget), the
  // bytes their activations moved over the bus and the time the GPU waited for them. Zero
  // for dense models.
  int64_t cpu_expert_evaluations = 0;
  int64_t gpu_expert_evaluations = 0;
  uint64_t expert_bytes_moved = 0;
  double expert_wait_ms = 0;
};

// One tool call of a task: what was asked, and what came of it.
struct ToolCallReport {
  int round = 0;               // 0: the first ToolCall stage of the task
  std::string name;            // as the model wrote it (may be unknown)
  std::string arguments_json;
  // "ok", "parse_error", "unknown_tool", "invalid_arguments", "handler_error", "timeout"
  std::string outcome;
  std::string detail;          // the error, for every outcome but "ok"
  size_t result_bytes = 0;     // the handler's result before truncation
  bool truncated = false;      // the model saw max_tool_result_bytes of it
  double ms = 0;               // the handler's time (the timeout, if it timed out)
  bool duplicate = false;      // the same name and arguments earlier in the same reply:
                               // the handler ran once and both calls got its result
  // RunOptions::safety: the result held instruction-like text (prompt injection), first
  // marker as found; what was done about it follows SafetyRules::tool_results.
  bool injection_flagged = false;
  std::string injection_marker;
};

struct TaskReport {
  std::vector<StageReport> stages;
  // RunOptions::router: the decision for this task's message (empty without a router).
  std::string route;
  std::string route_action;
  double route_score = 0;
  std::string route_runner_up;
  double route_runner_up_score = 0;
  double route_ms = 0;
  // Why the task was answered with a refusal and no Generate work ("deny phrase: ...",
  // "route 'unsafe'", "tool result injection: ..."); empty otherwise.
  std::string refused_by;
  std::vector<ToolCallReport> tool_calls;
  int prompt_tokens = 0;         // the whole conversation, last Understand
  int reused_prompt_tokens = 0;  // of those, already in the session's KV cache
  int shared_prompt_tokens = 0;  // of those, in KV blocks other sessions encoded (a shared
                                 // system prompt; EngineOptions::share_kv_prefixes)
  int generated_tokens = 0;      // over all Generate stages
  double time_to_first_token_ms = 0;
  double total_ms = 0;
  std::string stop_reason;       // of the last Generate ("max_tool_rounds" when the
                                 // model still called tools after the last round)
  std::string tool_format;       // the tool-call format used; empty without a registry
  // Constrained decoding's own cost over all Generate stages: checking sampled tokens,
  // building masks and sampling again (not the first, ordinary sample), and how many
  // steps needed the mask.
  double constraint_ms = 0;
  int constraint_masked_steps = 0;
  // Energy over all stages (TST: joules per task) and output tokens per joule (TPW);
  // -1 and 0 when not measured. `energy_sources` names the counters, each measured or
  // estimated.
  double joules = -1;
  double tokens_per_joule = 0;
  bool energy_estimated = true;
  std::string energy_sources;
};

// One tool call run outside a task, exactly as the ToolCall stage would run it (schema check,
// timeout, truncation to `max_result_bytes` with the note): what the model would read, and
// the report entry.
struct ToolInvocation {
  std::string content;
  ToolCallReport report;
};
HETERO_EXPORT ToolInvocation InvokeTool(const ToolRegistry& registry, const std::string& name,
                                        const std::string& arguments_json, size_t max_result_bytes = 16384);

// The report as one line of JSON (the C ABI's hetero_result_report_json; docs/C_API.md shows
// its shape). Text that is not UTF-8 is replaced, so the JSON is always valid.
HETERO_EXPORT std::string TaskReportJson(const TaskReport& report);

struct RunResult {
  std::string text;  // the final assistant reply (its answer, without the reasoning)
  // Reasoning templates (ChatTemplate::supports_reasoning, Qwen3): the reply's <think>
  // text, kept apart from `text`; empty otherwise.
  std::string reasoning;
  TaskReport report;
  // With RunOptions::logprobs >= 0: each token of the last Generate stage as generated (with
  // tools in the generic format, its envelope's tokens too), in order.
  std::vector<TokenLogprob> logprobs;
  // With RunOptions::return_tool_calls: the calls the model made (ids "call_<round>_<i>");
  // `text` is then whatever text came with them.
  std::vector<ToolCall> tool_calls;
};

// A caller's tool support: whether a reply is a tool call, and running it (returning the
// messages, usually role "tool", to append). The tool-calling layer builds on this.
struct ToolHandler {
  std::function<bool(const std::string& reply)> is_tool_call;
  std::function<absl::StatusOr<std::vector<ChatMessage>>(const std::string& reply)> run;
  double expected_seconds = 1.0;  // a hint for the scheduler's KV policy
};

struct RunOptions {
  int max_tokens = 256;
  SamplingParams sampling;
  // Reasoning templates (Qwen3): false asks for an answer without reasoning, as the
  // template's enable_thinking=False does (an empty <think> block ends the prompt).
  bool enable_thinking = true;
  std::vector<std::string> stop;
  // >= 0: report each generated token's log-probability and this many most likely
  // alternatives (at most kMaxTopLogprobs) in RunResult::logprobs; -1: off (no cost).
  int logprobs = -1;
  std::chrono::milliseconds timeout{0};  // deadline for the whole task; 0: none
  double latency_target_seconds = 0;     // for the `cost` policy; 0: none
  // Text as it is generated (on an engine thread); return false to cancel the task. With a
  // reasoning template (Qwen3) only the answer: the <think> text goes to on_reasoning.
  std::function<bool(std::string_view piece)> on_text;
  // Reasoning templates: the reply's reasoning as it is generated; return false to cancel.
  std::function<bool(std::string_view piece)> on_reasoning;
  // Each generated token as it is chosen (on an engine thread, before its text reaches
  // on_text), with its log-probability when logprobs >= 0 (else 0); return false to cancel.
  // With tools, the tokens of calls and of the reply's envelope as well: every token the
  // model wrote. The end-of-generation token is not passed.
  std::function<bool(int32_t token, float logprob)> on_token;
  ToolHandler tools;                     // unset: replies are final
  int max_tool_rounds = 4;
  // The agent loop (docs/TOOLS.md): when set, the tools are described to the model (the
  // chat template's tool section, or a system prompt for the generic format), calls are
  // parsed, validated and run in parallel with their timeouts, and results go back to the
  // model until it answers or max_tool_rounds is reached; failures become results the
  // model sees. `tools` above is then ignored.
  std::shared_ptr<const ToolRegistry> tool_registry;
  ToolCallFormat tool_format = ToolCallFormat::kAuto;
  // Tool calls are valid by construction: once a call opens, sampling is masked to the
  // registered names and each tool's argument schema.
  bool constrain_tool_calls = true;
  size_t max_tool_result_bytes = 16384;  // longer results are cut, and the model told
  // With tool_registry: end the run at the model's first tool calls and return them
  // (RunResult::tool_calls, stop_reason "tool_calls") instead of running them, as an API
  // server does (its client runs the tools). The turn joins the conversation with its calls.
  bool return_tool_calls = false;
  // With tool_registry: kAuto lets the model answer or call; kRequired holds the first reply
  // to calls (constrained decoding); kNamed to calls of `tool_choice_name` only (OpenAI's
  // tool_choice). At most `max_parallel_calls` calls per reply in the generic format (0: any).
  enum class ToolChoice { kAuto, kRequired, kNamed };
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;
  int max_parallel_calls = 0;
  // A JSON schema (the tool schema subset, docs/TOOLS.md; an object at its root)
  // that the whole reply is held to by constrained decoding, like OpenAI's response_format
  // json_schema: the reply is one JSON value that parses and passes the schema, closed
  // within max_tokens (only a stop string or a cancellation can cut it). Empty: free text.
  // Not with tool_registry yet (Unimplemented).
  std::string response_schema_json;
  bool ignore_end_of_generation = false; // benchmarks: always generate max_tokens
  // Understand on the CPU before any Generate work (docs/UNDERSTAND.md). The safety gate's
  // deny rules and a router's `refuse:` route answer with a refusal and no decoding; a
  // `generate_small` route decodes on the CPU with at most small_answer_tokens; a
  // `tool:<name>` route holds the first reply to a call of that tool (tool_registry needed).
  std::shared_ptr<const SafetyGate> safety;
  std::shared_ptr<SemanticRouter> router;
  int small_answer_tokens = 64;
};

struct EngineStats {
  int sessions = 0;
  int queued_tasks = 0;
  int active_tasks = 0;
  int64_t kv_used_tokens = 0;      // all devices; blocks sessions share count once
  int64_t kv_capacity_tokens = 0;
  int64_t kv_shared_tokens = 0;    // what sharing saves: tokens held by more than one
                                   // session, counted once for each extra holder
  int64_t kv_cached_tokens = 0;    // shared-prefix blocks no session holds, kept for reuse
  int64_t kv_prefix_hit_tokens = 0;  // tokens taken from shared blocks so far (prompts, and
                                     // KV copied back in after a tool call or a device move)
};

class Engine;

// Embeddings with the report of the stage that computed them (device and the placement's
// reason).
struct EmbedResult {
  std::vector<std::vector<float>> embeddings;
  StageReport report;
};

// A raw completion (Engine::Complete): text that continues the prompt as given, with no chat
// template, history or tools, on the device the scheduler places Generate on.
struct CompletionOptions {
  int max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;   // the text ends before the first of these (none empty)
  bool ignore_end_of_generation = false;
  bool add_bos = true;             // the model's BOS first, when its tokenizer asks for one
  bool parse_special = true;       // "<|im_start|>" in the prompt is that control token
  int logprobs = -1;               // as RunOptions::logprobs
  std::chrono::milliseconds timeout{0};  // 0: none; else DeadlineExceeded after it
  // Each piece of text as it becomes final (never half a character, never part of a stop
  // string); return false to cancel (the completion ends Cancelled).
  std::function<bool(std::string_view piece)> on_text;
  // A LoRA adapter loaded with Engine::LoadAdapter, by name, and its scale; empty: none.
  std::string adapter;
  float adapter_scale = 1.0f;
};

struct CompletionResult {
  std::string text;
  std::vector<int32_t> tokens;        // generated, without the token that ended generation
  std::vector<TokenLogprob> logprobs;  // one per token, when logprobs >= 0
  // prompt_tokens, generated_tokens, stop_reason ("end_of_generation", "stop_string",
  // "max_tokens"), time_to_first_token_ms, and two stages: understand (the prefill) and
  // generate, with their device, reason and times.
  TaskReport report;
};

class HETERO_EXPORT Session {
 public:
  ~Session();  // cancels a Run in progress and releases the session's KV cache
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Appends `user_message`, runs the task to its final reply, appends that reply. One Run
  // at a time per session (FailedPrecondition otherwise); Unavailable when the engine's
  // queue is full; Cancelled after Cancel() or on_text returning false; DeadlineExceeded
  // past the timeout. A failed Run leaves the conversation as it was.
  absl::StatusOr<RunResult> Run(const std::string& user_message, const RunOptions& options = {});
  // Runs the assistant's next turn after the conversation as it stands (it ends with a tool
  // result or a user turn, e.g. from Engine::NewSessionWithHistory), with no new user
  // message; the safety gate and router, which read new user text, do not run.
  // FailedPrecondition when the conversation ends with an assistant or system turn.
  absl::StatusOr<RunResult> Continue(const RunOptions& options = {});

  // Ends the Run in progress (from any thread); its KV cache is released.
  void Cancel();

  // Runs from the next one on apply the engine's LoRA adapter `name` (Engine::LoadAdapter)
  // scaled by `scale` (1: as trained; 0 gives the base model's results); an empty name
  // removes it. The KV the session holds was computed without it, so it is released and the
  // next run encodes the conversation again; sessions share cached prompt blocks only with
  // sessions of the same adapter and scale. Runs with an adapter are placed on devices that
  // apply adapters (the CPU; rule "device-unavailable" otherwise). NotFound for a name not
  // loaded; InvalidArgument for a scale that is not finite; FailedPrecondition during a Run.
  absl::Status SetAdapter(const std::string& name, float scale = 1.0f);
  // The adapter's name ("" for none) and scale.
  std::pair<std::string, float> adapter() const;

  // The conversation so far (do not call during a Run).
  std::vector<ChatMessage> messages() const;
  // Tokens this session holds in a KV cache (0 after release or eviction).
  int kv_tokens() const;

  // The session's state as bytes: its conversation (and the turns as generated with tools)
  // and its KV cache, in a versioned, checksummed format that does not depend on the device
  // or on the weights' quantization (docs/RUNTIME.md "Session state"). Engine::RestoreSession
  // continues it elsewhere with the same greedy tokens and no prefill of the saved tokens.
  // There is no sampler state to save: each Run seeds its own sampler. FailedPrecondition
  // during a Run.
  absl::StatusOr<std::string> SaveState();
  // SaveState into a file (written whole, then renamed into place).
  absl::Status SaveStateToFile(const std::string& path);

  struct State;

 private:
  friend class Engine;
  explicit Session(std::shared_ptr<State> state) : state_(std::move(state)) {}
  absl::StatusOr<RunResult> RunTurn(const std::string* user_message, const RunOptions& options);
  std::shared_ptr<State> state_;
};

class HETERO_EXPORT Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const std::string& model_path,
                                                        const EngineOptions& options = {});
  ~Engine();  // sessions still alive keep the engine's model and workers alive
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  absl::StatusOr<std::unique_ptr<Session>> NewSession(const std::string& system_prompt = "");
  // A session whose conversation starts with `history` (an API server's request brings the
  // whole conversation each time). Blocks of a shared prefix still cached from earlier
  // sessions are reused by its first run. InvalidArgument for a message with an empty role.
  absl::StatusOr<std::unique_ptr<Session>> NewSessionWithHistory(const std::vector<ChatMessage>& history);
  // A session continuing from Session::SaveState's bytes (or a file of them), its KV in the
  // CPU's memory until the scheduler places its next run. InvalidArgument for corrupt,
  // truncated or unknown-version state, naming what is wrong; FailedPrecondition for state
  // of a model of another shape or vocabulary; ResourceExhausted as NewSession.
  absl::StatusOr<std::unique_ptr<Session>> RestoreSession(std::string_view state);
  absl::StatusOr<std::unique_ptr<Session>> RestoreSessionFromFile(const std::string& path);

  // Unit-length embeddings of `texts` (n_embd floats each) from the loaded model's hidden
  // states, computed on the CPU in batches (several texts per forward pass), beside any
  // sessions running. Texts are tokenized as plain text (no template, no special tokens),
  // with BOS where the model asks for it. Cosine similarity is the dot product.
  absl::StatusOr<std::vector<std::vector<float>>> Embed(const std::vector<std::string>& texts,
                                                        const EmbedOptions& options = {});
  // A raw completion of `prompt` (tokenized with CompletionOptions::add_bos and
  // ::parse_special) or of token ids, through the same decode loop and device workers as
  // Session::Run, batched with the sessions running. InvalidArgument for an empty prompt,
  // bad sampling parameters, an empty stop string or max_tokens < 1.
  absl::StatusOr<CompletionResult> Complete(const std::string& prompt, const CompletionOptions& options = {});
  absl::StatusOr<CompletionResult> CompleteTokens(const std::vector<int32_t>& prompt,
                                                  const CompletionOptions& options = {});
  // Loads a LoRA adapter in llama.cpp's GGUF adapter format (convert_lora_to_gguf.py) for
  // Session::SetAdapter and CompletionOptions::adapter to name; it stays loaded as long as
  // the engine. NotFound for a missing file; InvalidArgument (naming the file and the key or
  // tensor) for a file that is not a LoRA adapter, adapts another architecture, or does not
  // fit this model's tensors; Unimplemented for tensors hetero cannot adapt (the embedding
  // lookup, experts, norms); AlreadyExists for a name in use; InvalidArgument for an empty name.
  absl::Status LoadAdapter(const std::string& name, const std::string& path);
  // The loaded adapters' names, sorted.
  std::vector<std::string> adapters() const;
  // Floats per embedding (the model's hidden size).
  int embedding_dimension() const;
  // The loaded model's tokenizer, for token ids in and out (thread-safe; lives as long as
  // the engine).
  const Tokenizer& tokenizer() const;
  // The chat template sessions render conversations with (thread-safe; as long as the engine).
  const ChatTemplate& chat_template() const;
  // The same for token ids.
  // Embed and EmbedTokens with the stage's report. Stage::kEmbed is placed by the scheduler
  // like every stage (the built-in policies choose the CPU, the one backend that embeds).
  absl::StatusOr<EmbedResult> EmbedWithReport(const std::vector<std::string>& texts, const EmbedOptions& options = {});
  absl::StatusOr<EmbedResult> EmbedTokensWithReport(const std::vector<std::vector<int32_t>>& tokens,
                                                    const EmbedOptions& options = {});
  absl::StatusOr<std::vector<std::vector<float>>> EmbedTokens(const std::vector<std::vector<int32_t>>& tokens,
                                                              const EmbedOptions& options = {});
  EngineStats stats() const;
  // How often each routed expert of a mixture-of-experts model was chosen: the counts of
  // EngineOptions::expert_usage_path plus every choice each device's router made since
  // load. Empty for a dense model.
  ExpertUsage expert_usage() const;
  // Writes expert_usage() to `path` (JSON, include/hetero/scheduler.h), whole or not at
  // all, for a later engine's EngineOptions::expert_usage_path.
  absl::Status SaveExpertUsage(const std::string& path) const;
  std::string scheduler_name() const;
  // One line per device: available or why not, and the costs the scheduler uses.
  std::string DescribeDevices() const;
  // The engine's devices as the scheduler sees them now (the CPU first, then each GPU with
  // its ordinal), available or not.
  SystemSnapshot snapshot() const;

  struct Impl;

 private:
  explicit Engine(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // sessions share it, so it outlives the last of them
};

}  // namespace hetero

#endif  // HETERO_ENGINE_H_
