/* hetero C ABI. Pure C99 (also valid C++); every symbol is prefixed hetero_.
 *
 * Conventions (docs/C_API.md has the whole reference):
 * - Every fallible function returns a hetero_status and writes results through
 *   out-parameters; on failure hetero_last_error() holds a message for this thread.
 * - Handles are opaque. Each has a create and a destroy function; destroying NULL does
 *   nothing.
 * - Option structs start with struct_size; fill them with their *_default() function
 *   first, so that a program built against this header keeps working when fields are
 *   added at the end.
 * - Strings the library returns belong to the handle they came from and stay valid until
 *   it is destroyed, unless stated otherwise. Strings passed in are copied when needed.
 * - No C++ exception ever leaves the library.
 */
#ifndef HETERO_C_H_
#define HETERO_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define HETERO_C_API __declspec(dllimport)
#else
#define HETERO_C_API __attribute__((visibility("default")))
#endif

/* Incremented on every incompatible change of this header. */
#define HETERO_ABI_VERSION 2

/* The ABI version the loaded library implements; compare with HETERO_ABI_VERSION.
 * Thread-safe. */
HETERO_C_API uint32_t hetero_abi_version(void);

/* "MAJOR.MINOR.PATCH" of the loaded library; a static string, never freed.
 * Thread-safe. */
HETERO_C_API const char* hetero_version_string(void);

/* ---- Status ------------------------------------------------------------------------ */

typedef enum hetero_status {
  HETERO_OK = 0,
  HETERO_INVALID_ARGUMENT = 1, /* a NULL or malformed argument, a bad option value, or a
                                  corrupt or truncated model file (the message gives the offset) */
  HETERO_NOT_FOUND = 2,        /* a file or name that does not exist */
  HETERO_UNSUPPORTED = 3,      /* a model, format or feature hetero does not implement */
  HETERO_OUT_OF_MEMORY = 4,    /* host memory, or KV cache memory exhausted */
  HETERO_DEVICE_ERROR = 5,     /* a GPU or driver failure */
  HETERO_TIMEOUT = 6,          /* the run's timeout_ms passed */
  HETERO_CANCELLED = 7,        /* hetero_session_cancel, or a callback asked to stop */
  HETERO_BUSY = 8,             /* the engine's queue or session limit is full, or the session is running */
  HETERO_INTERNAL = 9          /* a bug in hetero; the message says where */
} hetero_status;

/* A static name such as "HETERO_NOT_FOUND" ("HETERO_UNKNOWN_STATUS" for other values).
 * Thread-safe. */
HETERO_C_API const char* hetero_status_name(hetero_status status);

/* The message of the last failure of a hetero_* call on this thread ("" if none). Valid
 * until the next failing call on this thread; a success does not clear it, so test the
 * status, not the message. Thread-safe (thread-local). */
HETERO_C_API const char* hetero_last_error(void);

/* ---- Logging ------------------------------------------------------------------------ */

typedef enum hetero_log_level {
  HETERO_LOG_DEBUG = 0,
  HETERO_LOG_INFO = 1,
  HETERO_LOG_WARNING = 2,
  HETERO_LOG_ERROR = 3
} hetero_log_level;

/* Receives one message (`length` bytes of UTF-8, not NUL-terminated), from any thread. */
typedef void (*hetero_log_callback)(hetero_log_level level, const char* message, size_t length, void* user_data);

/* The library writes nothing to stdout or stderr by itself: its messages (such as the
 * notice that no GPU was found) go to the callback installed here, for levels at or above
 * `min_level`; NULL (the default) drops them. Thread-safe. */
HETERO_C_API void hetero_set_log_callback(hetero_log_callback callback, void* user_data, hetero_log_level min_level);

/* A ready-made callback: "hetero: <level>: <message>" lines on stderr. */
HETERO_C_API void hetero_log_to_stderr(hetero_log_level level, const char* message, size_t length, void* user_data);

/* ---- Scheduling (the C mirror of include/hetero/scheduler.h) ------------------------- */

/* HETERO_STAGE_EMBED: hetero_engine_embed's forward passes. A policy that does not know it
 * leaves the placement as it comes (the CPU). */
typedef enum hetero_stage {
  HETERO_STAGE_UNDERSTAND = 0,
  HETERO_STAGE_GENERATE = 1,
  HETERO_STAGE_TOOL_CALL = 2,
  HETERO_STAGE_EMBED = 3
} hetero_stage;
/* A device of the engine: the CPU, or a GPU by ordinal: HETERO_DEVICE_GPU is the first GPU,
 * HETERO_DEVICE_GPU_N(n) the n-th (from 0). hetero_engine_device_count and
 * hetero_engine_device list the engine's devices. */
typedef enum hetero_device {
  HETERO_DEVICE_CPU = 0,
  HETERO_DEVICE_GPU = 1,
  HETERO_DEVICE_MAX_ = 0x7fffffff /* not a device: makes every HETERO_DEVICE_GPU_N(n) a value of the type */
} hetero_device;
#define HETERO_DEVICE_GPU_N(n) ((hetero_device)(HETERO_DEVICE_GPU + (n)))
/* While a task waits on a tool: keep its KV cache, park it in host memory, or drop it. */
typedef enum hetero_kv_policy { HETERO_KV_KEEP = 0, HETERO_KV_SWAP_TO_HOST = 1, HETERO_KV_DISCARD = 2 } hetero_kv_policy;

typedef struct hetero_task_state {
  size_t struct_size;
  uint64_t task_id;
  int32_t prompt_tokens;           /* the whole conversation as the model sees it */
  int32_t uncached_prompt_tokens;  /* what prefill still has to encode */
  int32_t max_new_tokens;
  int32_t generated_tokens;
  int32_t kv_tokens;               /* held by the task's session */
  hetero_device kv_device;
  double expected_tool_seconds;    /* ToolCall: the caller's estimate */
  double latency_target_seconds;   /* 0: none */
  /* Appended later (compatible; read them only when struct_size covers them): */
  int32_t small_answer;            /* nonzero: the router asked for a brief answer (rule small-answer) */
  int32_t out_of_memory;           /* nonzero: this round is placed again because ... */
  hetero_device out_of_memory_device; /* ... this device ran out of memory for it (rule out-of-memory) */
} hetero_task_state;

typedef struct hetero_device_state {
  size_t struct_size;
  hetero_device device;
  int32_t available;               /* nonzero when the device can run stages */
  int32_t queued_tasks;
  int32_t active_tasks;
  int64_t kv_capacity_tokens;
  int64_t kv_free_tokens;
  int64_t kv_bytes_per_token;
  double prefill_tokens_per_s;     /* measured (hetero-bench --calibrate) or defaults */
  double decode_tokens_per_s;
  double active_watts;
  double idle_watts;
} hetero_device_state;

typedef struct hetero_placement {
  size_t struct_size;
  hetero_device device;
  hetero_kv_policy kv_policy;      /* read for HETERO_STAGE_TOOL_CALL */
  char reason[128];                /* one line for the report; NUL-terminated */
  /* Appended later (compatible): nonzero keeps this choice against the placement rules
   * (small-answer, out-of-memory); 0 (as it comes) lets them apply. */
  int32_t override_rules;
} hetero_placement;

/* A scheduling policy: called before every stage of every task, from several threads at
 * once (it must be thread-safe), with the task and every device (CPU first, then each GPU).
 * It writes its choice into `placement`, which comes filled with the CPU and
 * HETERO_KV_KEEP. The engine then applies its placement rules (docs/RUNTIME.md), each named
 * in the report's reason: a device that is unavailable or unknown runs the stage on the CPU
 * ("rule device-unavailable"), whatever override_rules says. */
typedef void (*hetero_scheduler_callback)(hetero_stage stage, const hetero_task_state* task,
                                          const hetero_device_state* devices, size_t device_count,
                                          hetero_placement* placement, void* user_data);

/* ---- Engine ------------------------------------------------------------------------ */

typedef struct hetero_engine hetero_engine;

typedef struct hetero_engine_options {
  size_t struct_size;      /* sizeof(hetero_engine_options) */
  const char* model_path;  /* NULL: $HETERO_MODEL, then models/SmolLM2-135M-Instruct.Q4_1.gguf */
  int32_t threads;         /* CPU threads; 0: every logical CPU */
  const char* scheduler;   /* a built-in policy: "seed" (default), "all-cpu", "all-gpu", "cost" */
  int32_t max_sessions;    /* 0: the library default (64) */
  /* A policy of the caller's, used instead of `scheduler` when not NULL; `scheduler_name`
   * names it in reports. `scheduler_user_data` must stay valid until every session of the
   * engine is destroyed. */
  hetero_scheduler_callback scheduler_callback;
  void* scheduler_user_data;
  const char* scheduler_name;
  /* The most device memory the model may hold on each GPU, bytes; 0: no budget (see
   * EngineOptions::gpu_memory_budget_bytes in include/hetero/engine.h). */
  uint64_t gpu_memory_budget_bytes;
  /* A file hetero_engine_save_expert_usage wrote on an earlier run of this model: which
   * experts of a mixture-of-experts model the placement within the budget keeps on the GPU
   * (the most used). NULL or "": none. A missing or unreadable file fails
   * hetero_engine_create with NOT_FOUND; a corrupt or misfit one with INVALID_ARGUMENT. */
  const char* expert_usage_path;
} hetero_engine_options;

/* Fills `options` with the defaults (and struct_size). */
HETERO_C_API void hetero_engine_options_default(hetero_engine_options* options);

/* Loads the model and starts the engine. `options` may be NULL (defaults). Thread-safe.
 * NOT_FOUND: no model file; INVALID_ARGUMENT: bad options, or a corrupt or truncated file
 * (the message gives the byte offset); UNSUPPORTED: an architecture or weight type hetero
 * does not run. */
HETERO_C_API hetero_status hetero_engine_create(const hetero_engine_options* options, hetero_engine** out_engine);

/* Releases the handle. Sessions created from it keep the model and workers alive until
 * they are destroyed too. Do not call it while another thread uses the handle. */
HETERO_C_API void hetero_engine_destroy(hetero_engine* engine);

/* ---- Devices ---------------------------------------------------------------------- */

/* How many devices the engine has: the CPU, then each GPU it knows of, available or not
 * (a machine without a GPU lists one, unavailable, with the reason). 0 for NULL.
 * Thread-safe. */
HETERO_C_API size_t hetero_engine_device_count(const hetero_engine* engine);
/* Device `index` (0 is the CPU) as the scheduler sees it now. `state->struct_size` must be
 * set (sizeof(hetero_device_state)); `state->device` says which device it is. Its name
 * ("cpu", "gpu", "gpu:1", ...) goes into `name` and its description (the backend, or why it
 * is unavailable) into `description`, each NUL-terminated and cut to its capacity; either
 * may be NULL with capacity 0. INVALID_ARGUMENT for a NULL engine or state, a struct_size
 * too small, or an index past the last device. Thread-safe. */
HETERO_C_API hetero_status hetero_engine_device(const hetero_engine* engine, size_t index, hetero_device_state* state,
                                                char* name, size_t name_capacity, char* description,
                                                size_t description_capacity);

/* ---- Embeddings (docs/UNDERSTAND.md) --------------------------------------------- */

/* Floats per embedding (the model's hidden size); 0 for NULL. */
HETERO_C_API int32_t hetero_engine_embedding_dimension(const hetero_engine* engine);
/* Unit-length embeddings of `count` NUL-terminated UTF-8 texts from the model's hidden
 * states, computed where the scheduler places HETERO_STAGE_EMBED (the built-in policies: the
 * CPU) in batches, between the steps of running sessions: the mean over each
 * text's tokens (the last token when last_token != 0) of the final norm's output after the
 * first `layers` layers (0: all). Cosine similarity is then the dot product. Writes
 * count x hetero_engine_embedding_dimension floats into `out`, text by text.
 * INVALID_ARGUMENT for a NULL engine, texts or text, count < 1, negative layers, an empty
 * text, or `out_floats` below count x dimension (nothing written); OUT_OF_MEMORY when the
 * KV cache has no room. Thread-safe. */
HETERO_C_API hetero_status hetero_engine_embed(hetero_engine* engine, const char* const* texts, int32_t count,
                                               int32_t last_token, int32_t layers, float* out, size_t out_floats);

/* Token ids of `text` (NUL-terminated UTF-8; invalid bytes become byte tokens) in the
 * loaded model's vocabulary: the model's BOS first when add_bos != 0 (INVALID_ARGUMENT if it
 * has none), and the text of control tokens such as "<|im_start|>" matched as those tokens
 * when parse_special != 0 (else tokenized as plain text). Sets *out_count to the number of
 * ids and writes them when `capacity` holds them all; call with out_tokens NULL and
 * capacity 0 to learn the count. INVALID_ARGUMENT for a NULL engine, text or out_count, and
 * for out_tokens NULL with capacity > 0 or a capacity below the count (nothing written;
 * *out_count still set). Thread-safe. */
HETERO_C_API hetero_status hetero_engine_tokenize(const hetero_engine* engine, const char* text, int32_t add_bos,
                                                  int32_t parse_special, int32_t* out_tokens, size_t capacity,
                                                  size_t* out_count);
/* The text `count` token ids stand for (control tokens as their text unless
 * skip_special != 0). Sets *out_length to its length in bytes and writes it with a NUL
 * after it when `capacity` holds length + 1; call with out_text NULL and capacity 0 to
 * learn the length. The bytes are those of the tokens: ids that end inside a character
 * give bytes that are not valid UTF-8, and a token may stand for a NUL byte (use
 * *out_length, not strlen). INVALID_ARGUMENT for a NULL engine or out_length, tokens NULL
 * with count > 0, an id outside [0, hetero_engine_vocab_size) (naming its index), and
 * out_text NULL with capacity > 0 or a capacity below length + 1 (nothing written;
 * *out_length still set). Thread-safe. */
HETERO_C_API hetero_status hetero_engine_detokenize(const hetero_engine* engine, const int32_t* tokens, size_t count,
                                                    int32_t skip_special, char* out_text, size_t capacity,
                                                    size_t* out_length);
/* The number of ids in the loaded model's vocabulary; 0 for NULL. Thread-safe. */
HETERO_C_API int32_t hetero_engine_vocab_size(const hetero_engine* engine);

/* ---- Tools ------------------------------------------------------------------------- */

struct hetero_result;

/* Where a tool handler writes its answer; valid only during the handler call. */
typedef struct hetero_tool_reply hetero_tool_reply;

/* Called on a library thread, possibly concurrently with itself, with the call's
 * arguments as a JSON object text (already validated against the tool's schema). It
 * must set a result or an error on `reply` before returning; a handler that sets
 * neither gives the model an error. A handler still running when its timeout passes is
 * abandoned (the model is told it timed out) but not interrupted: `user_data` must stay
 * valid until every handler call has returned, even after the run ended. */
typedef void (*hetero_tool_handler)(const char* arguments_json, hetero_tool_reply* reply, void* user_data);

/* The text the model sees as the tool's result (copied; `length` bytes, need not be
 * NUL-terminated). INVALID_ARGUMENT for a NULL reply, or NULL text with a nonzero length.
 * Of set_result and set_error, the last call wins. */
HETERO_C_API hetero_status hetero_tool_reply_set_result(hetero_tool_reply* reply, const char* text, size_t length);
/* The tool failed: the model sees "error: <name> failed: <message>". */
HETERO_C_API hetero_status hetero_tool_reply_set_error(hetero_tool_reply* reply, const char* message);

typedef struct hetero_tool {
  size_t struct_size;           /* sizeof(hetero_tool) */
  const char* name;             /* 1-64 of [A-Za-z0-9_-] */
  const char* description;
  const char* parameters_json;  /* a JSON schema of type "object" (subset: docs/TOOLS.md) */
  hetero_tool_handler handler;
  void* user_data;              /* passed to handler */
  uint32_t timeout_ms;          /* 0: 10000 */
} hetero_tool;

HETERO_C_API void hetero_tool_default(hetero_tool* tool);

/* A set of tools, shared by the runs that use it. Not thread-safe while being built
 * (hetero_tools_add); safe to use from several runs at once afterwards. */
typedef struct hetero_tools hetero_tools;

HETERO_C_API hetero_status hetero_tools_create(hetero_tools** out_tools);
/* Runs that use the set keep it alive until they end. */
HETERO_C_API void hetero_tools_destroy(hetero_tools* tools);
/* Copies `tool`. INVALID_ARGUMENT naming the problem: a NULL or bad or duplicate name, a
 * NULL parameters_json or handler, a schema that is not JSON or uses an unsupported
 * keyword (named with its path). A NULL description is an empty one. */
HETERO_C_API hetero_status hetero_tools_add(hetero_tools* tools, const hetero_tool* tool);

/* Runs one call of a tool exactly as the agent loop would (arguments validated against
 * the schema, the handler on its own thread with the tool's timeout, the result cut to
 * 16384 bytes) without a model: for testing tools. The result's text is what the model
 * would read; its report has one tool_calls entry with the outcome ("ok",
 * "unknown_tool", "invalid_arguments", "parse_error", "handler_error", "timeout"). Only a
 * NULL argument fails; the tool's own failures are outcomes. */
HETERO_C_API hetero_status hetero_tools_invoke(const hetero_tools* tools, const char* name, const char* arguments_json,
                                               struct hetero_result** out_result);

/* ---- Sessions and runs --------------------------------------------------------------- */

typedef struct hetero_session hetero_session;

/* A conversation. `system_prompt` may be NULL (the model's default). Thread-safe on the
 * engine. */
HETERO_C_API hetero_status hetero_session_create(hetero_engine* engine, const char* system_prompt,
                                                 hetero_session** out_session);
/* The session's state (its conversation and KV cache; versioned, checksummed, independent
 * of the device and of the weights' quantization; docs/RUNTIME.md "Session state") in a
 * buffer the library allocates: *out_bytes (free it with hetero_bytes_free) of *out_size
 * bytes. hetero_engine_restore_session continues it in another engine or process with the
 * same greedy tokens and no prefill of the saved tokens. INVALID_ARGUMENT for NULL
 * arguments; BUSY while a run is in progress on the session. */
HETERO_C_API hetero_status hetero_session_save_state(hetero_session* session, uint8_t** out_bytes, size_t* out_size);
/* The same, written to the file `path` (whole, then renamed into place). */
HETERO_C_API hetero_status hetero_session_save_state_file(hetero_session* session, const char* path);
/* Frees what hetero_session_save_state returned; NULL is a no-op. */
HETERO_C_API void hetero_bytes_free(uint8_t* bytes);
/* A new session from saved state (`size` bytes at `bytes`, or the file `path`).
 * INVALID_ARGUMENT for NULL arguments, corrupt, truncated or unknown-version state, or
 * state of a model of another shape or vocabulary (the message says which); NOT_FOUND for a
 * file that cannot be read; BUSY at the session limit. Thread-safe on the engine. */
HETERO_C_API hetero_status hetero_engine_restore_session(hetero_engine* engine, const uint8_t* bytes, size_t size,
                                                         hetero_session** out_session);
HETERO_C_API hetero_status hetero_engine_restore_session_file(hetero_engine* engine, const char* path,
                                                              hetero_session** out_session);
/* ---- Mixture-of-experts usage ------------------------------------------------------- */

/* Writes how often each routed expert was chosen (the options' expert_usage_path counts
 * plus every choice since load; JSON, docs/RUNTIME.md "Expert placement") to `path`, whole
 * or not at all, for a later engine's expert_usage_path. A dense model writes no layers.
 * INVALID_ARGUMENT for NULL or empty arguments or a path that cannot be written; NOT_FOUND
 * when its directory does not exist; OUT_OF_MEMORY when the disk is full. Thread-safe. */
HETERO_C_API hetero_status hetero_engine_save_expert_usage(const hetero_engine* engine, const char* path);

/* ---- LoRA adapters -------------------------------------------------------------------- */

/* Loads a LoRA adapter in llama.cpp's GGUF adapter format (convert_lora_to_gguf.py) under
 * `name`, for sessions to apply (hetero_session_set_adapter); it stays loaded as long as the
 * engine (docs/RUNTIME.md "LoRA adapters"). INVALID_ARGUMENT for NULL or empty arguments, a
 * name already loaded, or a file that is not a LoRA adapter of this model (the message
 * names the key or tensor); NOT_FOUND for a missing file; UNSUPPORTED for tensors hetero
 * cannot adapt (the embedding lookup, experts, norms). Thread-safe on the engine. */
HETERO_C_API hetero_status hetero_engine_load_adapter(hetero_engine* engine, const char* name, const char* path);
/* Runs of the session from the next one on apply the engine's adapter `name` scaled by
 * `scale` (1: as trained; 0: the base model); NULL or "" removes it. The session's KV cache
 * was computed without it and is released: the next run encodes the conversation again.
 * Runs with an adapter are placed on the CPU (the CUDA module does not apply adapters).
 * NOT_FOUND for a name not loaded; INVALID_ARGUMENT for a NULL session or a scale that is not
 * finite; BUSY while a run is in progress on the session. */
HETERO_C_API hetero_status hetero_session_set_adapter(hetero_session* session, const char* name, float scale);

/* Frees the session and its KV cache. No thread may be inside hetero_session_run on it:
 * to stop a run, call hetero_session_cancel and wait for the run to return first. */
HETERO_C_API void hetero_session_destroy(hetero_session* session);
/* Ends the run in progress, from any thread (the run returns CANCELLED); OK and nothing
 * happens when none runs. INVALID_ARGUMENT for NULL. */
HETERO_C_API hetero_status hetero_session_cancel(hetero_session* session);

/* Receives generated answer text as it is produced (never tool-call markup), on a library
 * thread; `text` is `length` bytes of UTF-8 and not NUL-terminated. Return 0 to go on,
 * anything else to cancel the run (it returns CANCELLED). */
typedef int (*hetero_text_callback)(const char* text, size_t length, void* user_data);

/* Receives each generated token's id as it is chosen, on a library thread, before its text
 * reaches the text callback, with its log-probability when run.logprobs is set (else 0);
 * with tools, the tokens of calls and of the reply's envelope too. Return 0 to go on,
 * anything else to cancel the run (CANCELLED). */
typedef int (*hetero_token_callback)(int32_t token, float logprob, void* user_data);

typedef struct hetero_run_options {
  size_t struct_size;             /* sizeof(hetero_run_options) */
  int32_t max_tokens;             /* per Generate stage; default 256 */
  float temperature;              /* 0: greedy (default) */
  int32_t top_k;                  /* 0: off */
  float top_p;                    /* 1: off */
  uint64_t seed;
  uint32_t timeout_ms;            /* for the whole run; 0: none */
  hetero_text_callback on_text;   /* NULL: no streaming */
  void* on_text_user_data;
  const hetero_tools* tools;      /* NULL: no tools */
  int32_t max_tool_rounds;        /* default 4 */
  int32_t constrain_tool_calls;   /* nonzero (default): calls are valid by construction */
  /* Added in 0.1 after constrain_tool_calls; a caller built before has their defaults. The
   * penalties apply first, then top_k, min_p, top_p and the temperature draw. */
  float min_p;                    /* drop tokens below min_p x the top probability, [0, 1); 0: off */
  float repetition_penalty;       /* > 0; above 1 divides positive (multiplies negative) logits
                                     of tokens seen in the window; 1 (default): off */
  float frequency_penalty;        /* subtracted per occurrence in the window; 0: off */
  float presence_penalty;         /* subtracted once for any occurrence in the window; 0: off */
  int32_t penalty_window;         /* most recent tokens the penalties look at, >= 0; default 64 */
  const char* const* stop;        /* stop_count stop strings (NUL-terminated UTF-8, not empty); */
  size_t stop_count;              /*  a reply ends before the first one, which is not shown */
  const char* response_schema_json; /* NULL or "": free text. Else a JSON schema (the tool
                                       schema subset, an object at its root) the
                                       whole reply is held to: one JSON value that parses and
                                       passes it, closed within max_tokens. Not with tools
                                       (UNSUPPORTED); a bad schema is INVALID_ARGUMENT */
  int32_t logprobs;               /* nonzero: each generated token's log-probability (below) */
  int32_t top_logprobs;           /* with logprobs: this many most likely alternatives, 0 to 20 */
  hetero_token_callback on_token; /* NULL: no token stream */
  void* on_token_user_data;
  /* Added with reasoning templates (Qwen3): nonzero asks for an answer without reasoning
   * (the template's enable_thinking=False); 0 (default): the model may reason. */
  int32_t disable_thinking;
} hetero_run_options;

HETERO_C_API void hetero_run_options_default(hetero_run_options* options);

/* The outcome of a run: the final answer and the task report. Immutable; thread-safe. */
typedef struct hetero_result hetero_result;

/* Appends `user_message` to the conversation and runs it (Understand, Generate, and with
 * tools the agent loop) to the final answer. `options` may be NULL (defaults). One run at
 * a time per session (BUSY otherwise). On failure the conversation is as it was and
 * *out_result is NULL. */
HETERO_C_API hetero_status hetero_session_run(hetero_session* session, const char* user_message,
                                              const hetero_run_options* options, hetero_result** out_result);

HETERO_C_API void hetero_result_destroy(hetero_result* result);
/* The final answer (UTF-8, NUL-terminated); "" for NULL. With a reasoning template
 * (Qwen3) the reply's <think> text is not part of it: see hetero_result_reasoning. */
HETERO_C_API const char* hetero_result_text(const hetero_result* result);
/* The reply's reasoning (the text of its leading <think> block) where the model's chat
 * template keeps reasoning apart (Qwen3), else ""; "" for NULL. */
HETERO_C_API const char* hetero_result_reasoning(const hetero_result* result);
/* The task report as a JSON object: stages (stage, device, start_ms, end_ms, tokens_in,
 * tokens_out, reason, joules, idle_joules, joules_estimated, cpu_expert_evaluations,
 * gpu_expert_evaluations, expert_bytes_moved, expert_wait_ms), tool_calls (round, name,
 * arguments, outcome, detail, result_bytes, truncated, ms, duplicate), prompt_tokens,
 * reused_prompt_tokens, shared_prompt_tokens (from KV blocks other sessions encoded),
 * route, route_action, route_score, route_runner_up, route_runner_up_score, refused_by
 * (the Understand gate's decision; empty without one), generated_tokens,
 * time_to_first_token_ms, total_ms, stop_reason,
 * tool_format, constraint_ms, constraint_masked_steps, joules, tokens_per_joule,
 * energy_estimated, energy_sources. "{}" for NULL. */
HETERO_C_API const char* hetero_result_report_json(const hetero_result* result);
/* Shortcuts into the report; 0 for NULL. */
HETERO_C_API int32_t hetero_result_generated_tokens(const hetero_result* result);
HETERO_C_API int32_t hetero_result_tool_call_count(const hetero_result* result);

/* Log-probabilities (run.logprobs nonzero): one entry per token of the last Generate stage
 * as generated (with tools in the generic format, the reply envelope's tokens too). Each is
 * the natural log of the token's probability under the model's distribution at that step,
 * the log-softmax of the logits before penalties, temperature, truncation or a constraint.
 * The count is 0 without run.logprobs or for NULL. */
HETERO_C_API size_t hetero_result_logprob_count(const hetero_result* result);
/* Entry `index`: the token and its log-probability. INVALID_ARGUMENT for a NULL argument or
 * an index past the count. */
HETERO_C_API hetero_status hetero_result_logprob(const hetero_result* result, size_t index, int32_t* out_token,
                                                 float* out_logprob);
/* The alternatives at entry `index`: run.top_logprobs of them (0 for a bad index or NULL),
 * rank 0 the most likely (ties: lower id first). INVALID_ARGUMENT for a NULL argument, or
 * an index or rank past its count. */
HETERO_C_API size_t hetero_result_top_logprob_count(const hetero_result* result, size_t index);
HETERO_C_API hetero_status hetero_result_top_logprob(const hetero_result* result, size_t index, size_t rank,
                                                     int32_t* out_token, float* out_logprob);

#ifdef __cplusplus
}
#endif

#endif /* HETERO_C_H_ */
