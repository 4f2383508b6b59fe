/* The C ABI from C: NULL and invalid arguments give the right status and a message that
 * names the function; option structs are checked by size; tools report their failures
 * (error, slow, no result) as outcomes; a run on the default model streams the answer
 * and returns a report; create/destroy cycles (run under LeakSanitizer by CTest).
 *   capi_test [MODEL]   (exit 77, skipped, when the model is missing) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hetero.h"

static int failures = 0;

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                          \
    }                                                                      \
  } while (0)

/* The status is `want` and the thread's message contains `text`. */
static void expect(hetero_status got, hetero_status want, const char* text, int line) {
  if (got != want) {
    fprintf(stderr, "line %d: got %s, want %s (%s)\n", line, hetero_status_name(got), hetero_status_name(want),
            hetero_last_error());
    ++failures;
  } else if (text != NULL && strstr(hetero_last_error(), text) == NULL) {
    fprintf(stderr, "line %d: message '%s' lacks '%s'\n", line, hetero_last_error(), text);
    ++failures;
  }
}
#define EXPECT(call, want, text) expect((call), (want), (text), __LINE__)

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* Tools: one answers, one fails, one is slow, one forgets to answer. */
static void add_handler(const char* arguments, hetero_tool_reply* reply, void* user_data) {
  int* calls = (int*)user_data;
  ++*calls;
  double a = 0, b = 0;
  const char* pa = strstr(arguments, "\"a\":");
  const char* pb = strstr(arguments, "\"b\":");
  if (pa != NULL) a = strtod(pa + 4, NULL);
  if (pb != NULL) b = strtod(pb + 4, NULL);
  char text[64];
  snprintf(text, sizeof text, "%g", a + b);
  hetero_tool_reply_set_result(reply, text, strlen(text));
}
static void failing_handler(const char* arguments, hetero_tool_reply* reply, void* user_data) {
  (void)arguments;
  (void)user_data;
  hetero_tool_reply_set_error(reply, "the disk is on fire");
}
static void slow_handler(const char* arguments, hetero_tool_reply* reply, void* user_data) {
  (void)arguments;
  (void)user_data;
  sleep_ms(400);
  hetero_tool_reply_set_result(reply, "late", 4);
}
static void silent_handler(const char* arguments, hetero_tool_reply* reply, void* user_data) {
  (void)arguments;
  (void)reply;
  (void)user_data;
}

static const char* kAddSchema =
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"number\"}, \"b\": {\"type\": \"number\"}},"
    " \"required\": [\"a\", \"b\"]}";
static const char* kEmptySchema = "{\"type\": \"object\", \"properties\": {}}";

static hetero_tools* make_tools(int* add_calls) {
  hetero_tools* tools = NULL;
  EXPECT(hetero_tools_create(&tools), HETERO_OK, NULL);
  hetero_tool t;
  hetero_tool_default(&t);
  t.name = "add";
  t.description = "Adds two numbers a and b.";
  t.parameters_json = kAddSchema;
  t.handler = add_handler;
  t.user_data = add_calls;
  EXPECT(hetero_tools_add(tools, &t), HETERO_OK, NULL);
  t.name = "broken";
  t.description = "Always fails.";
  t.parameters_json = kEmptySchema;
  t.handler = failing_handler;
  EXPECT(hetero_tools_add(tools, &t), HETERO_OK, NULL);
  t.name = "slow";
  t.handler = slow_handler;
  t.timeout_ms = 100;
  EXPECT(hetero_tools_add(tools, &t), HETERO_OK, NULL);
  t.name = "silent";
  t.handler = silent_handler;
  t.timeout_ms = 0;
  EXPECT(hetero_tools_add(tools, &t), HETERO_OK, NULL);
  return tools;
}

/* The outcome of one invocation, from the report JSON. */
static void expect_invoke(hetero_tools* tools, const char* name, const char* args, const char* outcome,
                          const char* text, int line) {
  hetero_result* r = NULL;
  hetero_status s = hetero_tools_invoke(tools, name, args, &r);
  if (s != HETERO_OK || r == NULL) {
    fprintf(stderr, "line %d: invoke %s: %s (%s)\n", line, name, hetero_status_name(s), hetero_last_error());
    ++failures;
    return;
  }
  char want[96];
  snprintf(want, sizeof want, "\"outcome\":\"%s\"", outcome);
  if (strstr(hetero_result_report_json(r), want) == NULL) {
    fprintf(stderr, "line %d: %s(%s): report %s lacks %s\n", line, name, args, hetero_result_report_json(r), want);
    ++failures;
  }
  if (strstr(hetero_result_text(r), text) == NULL) {
    fprintf(stderr, "line %d: %s(%s): result '%s' lacks '%s'\n", line, name, args, hetero_result_text(r), text);
    ++failures;
  }
  CHECK(hetero_result_tool_call_count(r) == 1);
  hetero_result_destroy(r);
}
#define EXPECT_INVOKE(tools, name, args, outcome, text) expect_invoke(tools, name, args, outcome, text, __LINE__)

static void test_arguments_and_tools(void) {
  CHECK(hetero_abi_version() == HETERO_ABI_VERSION);
  CHECK(strcmp(hetero_status_name(HETERO_NOT_FOUND), "HETERO_NOT_FOUND") == 0);
  CHECK(strcmp(hetero_status_name((hetero_status)999), "HETERO_UNKNOWN_STATUS") == 0);

  /* NULL out-parameters and handles. */
  EXPECT(hetero_engine_create(NULL, NULL), HETERO_INVALID_ARGUMENT, "hetero_engine_create: out_engine is NULL");
  hetero_session* session = (hetero_session*)1;
  EXPECT(hetero_session_create(NULL, NULL, &session), HETERO_INVALID_ARGUMENT, "engine is NULL");
  CHECK(session == NULL);
  EXPECT(hetero_session_create(NULL, NULL, NULL), HETERO_INVALID_ARGUMENT, "out_session is NULL");
  hetero_result* result = (hetero_result*)1;
  EXPECT(hetero_session_run(NULL, "hi", NULL, &result), HETERO_INVALID_ARGUMENT, "session is NULL");
  CHECK(result == NULL);
  EXPECT(hetero_session_run(NULL, "hi", NULL, NULL), HETERO_INVALID_ARGUMENT, "out_result is NULL");
  EXPECT(hetero_session_cancel(NULL), HETERO_INVALID_ARGUMENT, "hetero_session_cancel: session is NULL");
  EXPECT(hetero_tools_create(NULL), HETERO_INVALID_ARGUMENT, "out_tools is NULL");
  EXPECT(hetero_tools_add(NULL, NULL), HETERO_INVALID_ARGUMENT, "tools is NULL");
  EXPECT(hetero_tools_invoke(NULL, "x", "{}", &result), HETERO_INVALID_ARGUMENT, "tools is NULL");
  EXPECT(hetero_tool_reply_set_result(NULL, "x", 1), HETERO_INVALID_ARGUMENT, "reply is NULL");
  EXPECT(hetero_tool_reply_set_error(NULL, "x"), HETERO_INVALID_ARGUMENT, "reply is NULL");
  CHECK(strcmp(hetero_result_text(NULL), "") == 0);
  CHECK(strcmp(hetero_result_reasoning(NULL), "") == 0);
  CHECK(strcmp(hetero_result_report_json(NULL), "{}") == 0);
  CHECK(hetero_result_generated_tokens(NULL) == 0);
  hetero_engine_destroy(NULL);
  hetero_session_destroy(NULL);
  hetero_tools_destroy(NULL);
  hetero_result_destroy(NULL);
  hetero_engine_options_default(NULL);
  hetero_run_options_default(NULL);
  hetero_tool_default(NULL);

  /* Option structs: a missing or oversized struct_size is refused. */
  hetero_engine_options eo;
  memset(&eo, 0, sizeof eo);
  hetero_engine* engine = (hetero_engine*)1;
  EXPECT(hetero_engine_create(&eo, &engine), HETERO_INVALID_ARGUMENT, "struct_size 0");
  CHECK(engine == NULL);
  hetero_engine_options_default(&eo);
  eo.struct_size = sizeof eo + 8;
  EXPECT(hetero_engine_create(&eo, &engine), HETERO_INVALID_ARGUMENT, "call the *_default function first");
  hetero_engine_options_default(&eo);
  eo.threads = -1;
  EXPECT(hetero_engine_create(&eo, &engine), HETERO_INVALID_ARGUMENT, "threads");
  hetero_engine_options_default(&eo);
  eo.model_path = "/nonexistent/model.gguf";
  EXPECT(hetero_engine_create(&eo, &engine), HETERO_NOT_FOUND, "/nonexistent/model.gguf");
  CHECK(engine == NULL);
  char corrupt[] = "/tmp/hetero_capi_test_XXXXXX";
  const int fd = mkstemp(corrupt);
  if (fd >= 0) {
    FILE* f = fdopen(fd, "wb");
    fputs("GGUF but not really a model file", f);
    fclose(f);
    eo.model_path = corrupt;
    EXPECT(hetero_engine_create(&eo, &engine), HETERO_INVALID_ARGUMENT, "offset");
    CHECK(engine == NULL);
    remove(corrupt);
  }
  hetero_engine_options_default(&eo);
  eo.scheduler = "bogus";
  eo.model_path = "/nonexistent/model.gguf";
  CHECK(hetero_engine_create(&eo, &engine) != HETERO_OK);

  /* Tools: registration errors, then each outcome through hetero_tools_invoke. */
  int add_calls = 0;
  hetero_tools* tools = make_tools(&add_calls);
  hetero_tool t;
  hetero_tool_default(&t);
  EXPECT(hetero_tools_add(tools, &t), HETERO_INVALID_ARGUMENT, "tool->name is NULL");
  t.name = "add";
  t.parameters_json = kAddSchema;
  EXPECT(hetero_tools_add(tools, &t), HETERO_INVALID_ARGUMENT, "tool->handler is NULL");
  t.handler = add_handler;
  EXPECT(hetero_tools_add(tools, &t), HETERO_INVALID_ARGUMENT, "add");  /* duplicate */
  t.name = "patterned";
  t.parameters_json = "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"string\", \"pattern\": \"^a\"}}}";
  EXPECT(hetero_tools_add(tools, &t), HETERO_INVALID_ARGUMENT, "'pattern' is not supported");
  t.parameters_json = "{\"type\": ";
  EXPECT(hetero_tools_add(tools, &t), HETERO_INVALID_ARGUMENT, NULL);
  t.name = "bad name!";
  t.parameters_json = kEmptySchema;
  EXPECT(hetero_tools_add(tools, &t), HETERO_INVALID_ARGUMENT, NULL);

  EXPECT_INVOKE(tools, "add", "{\"a\": 2.5, \"b\": 4}", "ok", "6.5");
  CHECK(add_calls == 1);
  EXPECT_INVOKE(tools, "add", "{\"a\": \"two\", \"b\": 4}", "invalid_arguments", "invalid arguments for add");
  EXPECT_INVOKE(tools, "add", "[1, 2]", "parse_error", "not a JSON object");
  EXPECT_INVOKE(tools, "nope", "{}", "unknown_tool", "add, broken, slow, silent");
  EXPECT_INVOKE(tools, "broken", "{}", "handler_error", "the disk is on fire");
  EXPECT_INVOKE(tools, "slow", "{}", "timeout", "did not answer within 100 ms");
  EXPECT_INVOKE(tools, "silent", "{}", "handler_error", "neither a result nor an error");
  CHECK(add_calls == 1);
  hetero_tools_destroy(tools);
  sleep_ms(500); /* the abandoned slow handler finishes before the process checks leaks */
}

/* Streaming: collects the text; returns nonzero to cancel once `cancel_after` bytes came. */
typedef struct {
  char text[8192];
  size_t length;
  size_t cancel_after;
} stream_t;

static int on_text(const char* text, size_t length, void* user_data) {
  stream_t* s = (stream_t*)user_data;
  if (s->length + length < sizeof s->text) {
    memcpy(s->text + s->length, text, length);
    s->length += length;
    s->text[s->length] = '\0';
  }
  return s->cancel_after > 0 && s->length >= s->cancel_after;
}

/* A policy of our own: everything on the CPU; counts its calls per stage. */
typedef struct {
  int calls[3];
  int saw_cpu_first;
} policy_t;

static void cpu_policy(hetero_stage stage, const hetero_task_state* task, const hetero_device_state* devices,
                       size_t device_count, hetero_placement* placement, void* user_data) {
  policy_t* p = (policy_t*)user_data;
  if ((int)stage >= 0 && (int)stage < 3) __atomic_add_fetch(&p->calls[stage], 1, __ATOMIC_RELAXED);
  if (device_count > 0 && devices[0].device == HETERO_DEVICE_CPU && devices[0].available &&
      task->struct_size == sizeof *task) {
    p->saw_cpu_first = 1;
  }
  placement->device = HETERO_DEVICE_CPU;
  snprintf(placement->reason, sizeof placement->reason, "c-policy %s",
           stage == HETERO_STAGE_GENERATE ? "generate" : "other");
}

/* An engine on `model` with 2 threads and at most `max_sessions` sessions (0: the default). */
static hetero_engine* open_engine(const char* model, int32_t max_sessions) {
  hetero_engine_options options;
  hetero_engine_options_default(&options);
  options.model_path = model;
  options.threads = 2;
  options.max_sessions = max_sessions;
  hetero_engine* engine = NULL;
  EXPECT(hetero_engine_create(&options, &engine), HETERO_OK, NULL);
  return engine;
}

static void test_runs(const char* model) {
  policy_t policy = {{0, 0, 0}, 0};
  hetero_engine_options eo;
  hetero_engine_options_default(&eo);
  eo.model_path = model;
  eo.threads = 2;
  eo.scheduler_callback = cpu_policy;
  eo.scheduler_user_data = &policy;
  eo.scheduler_name = "c-policy";
  hetero_engine* engine = NULL;
  EXPECT(hetero_engine_create(&eo, &engine), HETERO_OK, NULL);
  if (engine == NULL) return;

  hetero_session* session = NULL;
  EXPECT(hetero_session_create(engine, NULL, &session), HETERO_OK, NULL);
  hetero_run_options ro;
  hetero_run_options_default(&ro);
  ro.max_tokens = 24;
  stream_t stream = {{0}, 0, 0};
  ro.on_text = on_text;
  ro.on_text_user_data = &stream;
  hetero_result* result = NULL;
  EXPECT(hetero_session_run(session, "What is the capital of France? Answer in one word.", &ro, &result), HETERO_OK, NULL);
  CHECK(result != NULL);
  if (result != NULL) {
    CHECK(strlen(hetero_result_text(result)) > 0);
    CHECK(strcmp(stream.text, hetero_result_text(result)) == 0); /* streamed = final, no tools */
    CHECK(strcmp(hetero_result_reasoning(result), "") == 0);    /* SmolLM2's template does not reason */
    CHECK(hetero_result_generated_tokens(result) > 0);
    CHECK(strstr(hetero_result_report_json(result), "\"stage\":\"understand\"") != NULL);
    CHECK(strstr(hetero_result_report_json(result), "\"stage\":\"generate\"") != NULL);
    CHECK(strstr(hetero_result_report_json(result), "\"reason\":\"c-policy generate\"") != NULL);
    CHECK(strstr(hetero_result_report_json(result), "\"shared_prompt_tokens\":0") != NULL); /* first session */
    CHECK(strstr(hetero_result_report_json(result), "\"route\":\"\"") != NULL);            /* no router */
    hetero_result_destroy(result);
  }
  CHECK(policy.calls[HETERO_STAGE_UNDERSTAND] >= 1 && policy.calls[HETERO_STAGE_GENERATE] >= 1);
  CHECK(policy.saw_cpu_first);

  /* Bad run options. */
  hetero_run_options bad = ro;
  bad.max_tokens = 0;
  EXPECT(hetero_session_run(session, "hi", &bad, &result), HETERO_INVALID_ARGUMENT, "max_tokens");
  bad = ro;
  bad.top_p = 0;
  EXPECT(hetero_session_run(session, "hi", &bad, &result), HETERO_INVALID_ARGUMENT, "top_p");
  EXPECT(hetero_session_run(session, NULL, &ro, &result), HETERO_INVALID_ARGUMENT, "user_message is NULL");

  /* A streaming callback that asks to stop cancels the run; the session goes on. */
  stream_t stop = {{0}, 0, 1};
  ro.on_text_user_data = &stop;
  ro.max_tokens = 64;
  EXPECT(hetero_session_run(session, "Tell me a story about a fox.", &ro, &result), HETERO_CANCELLED, NULL);
  CHECK(result == NULL);
  ro.on_text = NULL;
  ro.max_tokens = 8;
  EXPECT(hetero_session_run(session, "Say hello.", &ro, &result), HETERO_OK, NULL);
  hetero_result_destroy(result);

  /* An agent run with tools: whatever the model does, the run ends and reports. */
  int add_calls = 0;
  hetero_tools* tools = make_tools(&add_calls);
  hetero_run_options agent;
  hetero_run_options_default(&agent);
  agent.max_tokens = 96;
  agent.max_tool_rounds = 2;
  agent.tools = tools;
  hetero_session* agent_session = NULL;
  EXPECT(hetero_session_create(engine, NULL, &agent_session), HETERO_OK, NULL);
  EXPECT(hetero_session_run(agent_session, "Use the add tool: what is 2.5 plus 4?", &agent, &result), HETERO_OK, NULL);
  if (result != NULL) {
    const char* report = hetero_result_report_json(result);
    CHECK(strstr(report, "\"tool_format\":\"generic\"") != NULL);
    /* Constrained calls are always well-formed. */
    CHECK(strstr(report, "\"outcome\":\"parse_error\"") == NULL);
    CHECK(strstr(report, "\"outcome\":\"invalid_arguments\"") == NULL);
    CHECK(strstr(report, "\"outcome\":\"unknown_tool\"") == NULL);
    printf("agent answer: %s (%d tool calls, add ran %d times)\n", hetero_result_text(result),
           hetero_result_tool_call_count(result), add_calls);
    hetero_result_destroy(result);
  }
  hetero_session_destroy(agent_session);
  hetero_tools_destroy(tools);

  /* Past max_sessions: BUSY. */
  hetero_engine* small_engine = open_engine(model, 1);
  if (small_engine != NULL) {
    hetero_session* first = NULL;
    hetero_session* second = NULL;
    EXPECT(hetero_session_create(small_engine, NULL, &first), HETERO_OK, NULL);
    EXPECT(hetero_session_create(small_engine, NULL, &second), HETERO_BUSY, "the maximum is 1");
    CHECK(second == NULL);
    hetero_session_destroy(first);
    EXPECT(hetero_session_create(small_engine, NULL, &second), HETERO_OK, NULL);
    hetero_session_destroy(second);
    hetero_engine_destroy(small_engine);
  }

  /* Embeddings: unit length, a text equal to itself, another one less similar; bad input. */
  {
    const int32_t dim = hetero_engine_embedding_dimension(engine);
    CHECK(dim == 576);
    CHECK(hetero_engine_embedding_dimension(NULL) == 0);
    const char* texts[3] = {"What is 12 times 7?", "What is 12 times 7?", "Book me a flight to Paris."};
    float* vectors = (float*)calloc((size_t)(3 * dim), sizeof(float));
    EXPECT(hetero_engine_embed(engine, texts, 3, 0, 0, vectors, (size_t)(3 * dim)), HETERO_OK, NULL);
    double norm = 0, same = 0, other = 0;
    for (int32_t k = 0; k < dim; ++k) {
      norm += (double)vectors[k] * vectors[k];
      same += (double)vectors[k] * vectors[dim + k];
      other += (double)vectors[k] * vectors[2 * dim + k];
    }
    CHECK(fabs(norm - 1.0) < 1e-4);
    CHECK(fabs(same - 1.0) < 1e-4);
    CHECK(other < same - 0.01);
    EXPECT(hetero_engine_embed(engine, texts, 1, 1, 6, vectors, (size_t)dim), HETERO_OK, NULL); /* last token, 6 layers */
    EXPECT(hetero_engine_embed(engine, texts, 3, 0, 0, vectors, (size_t)(3 * dim - 1)), HETERO_INVALID_ARGUMENT,
           "3 embeddings need 1728");
    EXPECT(hetero_engine_embed(engine, texts, 1, 0, 0, NULL, 0), HETERO_INVALID_ARGUMENT, "out holds 0 floats");
    EXPECT(hetero_engine_embed(NULL, texts, 1, 0, 0, vectors, (size_t)dim), HETERO_INVALID_ARGUMENT, "engine is NULL");
    EXPECT(hetero_engine_embed(engine, NULL, 1, 0, 0, vectors, (size_t)dim), HETERO_INVALID_ARGUMENT, "texts is NULL");
    EXPECT(hetero_engine_embed(engine, texts, 0, 0, 0, vectors, (size_t)dim), HETERO_INVALID_ARGUMENT, "at least 1");
    EXPECT(hetero_engine_embed(engine, texts, 1, 0, -1, vectors, (size_t)dim), HETERO_INVALID_ARGUMENT, "negative");
    const char* bad[2] = {"fine", NULL};
    EXPECT(hetero_engine_embed(engine, bad, 2, 0, 0, vectors, (size_t)(2 * dim)), HETERO_INVALID_ARGUMENT,
           "texts[1] is NULL");
    const char* empty[1] = {""};
    EXPECT(hetero_engine_embed(engine, empty, 1, 0, 0, vectors, (size_t)dim), HETERO_INVALID_ARGUMENT, "no tokens");
    free(vectors);
  }

  /* Create/destroy cycles. */
  for (int i = 0; i < 20; ++i) {
    hetero_session* s = NULL;
    EXPECT(hetero_session_create(engine, "You are terse.", &s), HETERO_OK, NULL);
    hetero_session_destroy(s);
  }
  hetero_session_destroy(session);
  hetero_engine_destroy(engine);
  sleep_ms(500); /* abandoned slow handlers, if the model called one */
}

/* Counts the token stream; stops it after `stop_after` tokens when that is positive. */
typedef struct {
  int count;
  int stop_after;
} token_count_t;
static int count_tokens(int32_t token, float logprob, void* user_data) {
  token_count_t* c = (token_count_t*)user_data;
  (void)logprob;
  if (token < 0) return 1;
  ++c->count;
  return c->stop_after > 0 && c->count >= c->stop_after;
}

/* Tokens in and out, every error path; the sampler's options and stop strings. */
static void test_tokens_and_sampling(const char* model) {
  hetero_engine* engine = open_engine(model, 0);
  if (engine == NULL) return;
  const int32_t vocab = hetero_engine_vocab_size(engine);
  CHECK(vocab == 49152);
  CHECK(hetero_engine_vocab_size(NULL) == 0);

  size_t count = 99;
  EXPECT(hetero_engine_tokenize(engine, "Hello world!", 0, 1, NULL, 0, &count), HETERO_OK, NULL);
  CHECK(count == 3);
  int32_t ids[8] = {0};
  EXPECT(hetero_engine_tokenize(engine, "Hello world!", 0, 1, ids, 8, &count), HETERO_OK, NULL);
  CHECK(count == 3 && ids[0] == 19556 && ids[1] == 905 && ids[2] == 17); /* as hetero-tokenize prints */
  int32_t small[2] = {-1, -1};
  EXPECT(hetero_engine_tokenize(engine, "Hello world!", 0, 1, small, 2, &count), HETERO_INVALID_ARGUMENT,
         "capacity 2 is below the 3 ids");
  CHECK(count == 3 && small[0] == -1); /* nothing written, the count still told */
  /* Special text: one control token, or plain text without parse_special. */
  EXPECT(hetero_engine_tokenize(engine, "<|im_start|>", 0, 1, ids, 8, &count), HETERO_OK, NULL);
  CHECK(count == 1);
  EXPECT(hetero_engine_tokenize(engine, "<|im_start|>", 0, 0, ids, 8, &count), HETERO_OK, NULL);
  CHECK(count > 1);
  EXPECT(hetero_engine_tokenize(NULL, "x", 0, 1, ids, 8, &count), HETERO_INVALID_ARGUMENT, "engine is NULL");
  EXPECT(hetero_engine_tokenize(engine, NULL, 0, 1, ids, 8, &count), HETERO_INVALID_ARGUMENT, "text is NULL");
  EXPECT(hetero_engine_tokenize(engine, "x", 0, 1, ids, 8, NULL), HETERO_INVALID_ARGUMENT, "out_count is NULL");
  EXPECT(hetero_engine_tokenize(engine, "x", 0, 1, NULL, 8, &count), HETERO_INVALID_ARGUMENT, "out_tokens");
  EXPECT(hetero_engine_tokenize(engine, "\xff\xfe bytes", 0, 1, ids, 8, &count), HETERO_OK, NULL); /* byte tokens */
  CHECK(count > 0);

  const int32_t hello[3] = {19556, 905, 17};
  size_t length = 99;
  EXPECT(hetero_engine_detokenize(engine, hello, 3, 0, NULL, 0, &length), HETERO_OK, NULL);
  CHECK(length == 12);
  char text[32];
  memset(text, 'z', sizeof text);
  EXPECT(hetero_engine_detokenize(engine, hello, 3, 0, text, 12, &length), HETERO_INVALID_ARGUMENT, "and its NUL");
  CHECK(length == 12 && text[0] == 'z');
  EXPECT(hetero_engine_detokenize(engine, hello, 3, 0, text, sizeof text, &length), HETERO_OK, NULL);
  CHECK(length == 12 && strcmp(text, "Hello world!") == 0);
  EXPECT(hetero_engine_detokenize(engine, NULL, 0, 0, text, sizeof text, &length), HETERO_OK, NULL);
  CHECK(length == 0 && text[0] == '\0');
  const int32_t bad[3] = {19556, vocab, 17};
  EXPECT(hetero_engine_detokenize(engine, bad, 3, 0, text, sizeof text, &length), HETERO_INVALID_ARGUMENT,
         "tokens[1] is 49152, outside the vocabulary");
  const int32_t negative[1] = {-5};
  EXPECT(hetero_engine_detokenize(engine, negative, 1, 0, text, sizeof text, &length), HETERO_INVALID_ARGUMENT,
         "tokens[0] is -5");
  EXPECT(hetero_engine_detokenize(engine, NULL, 2, 0, text, sizeof text, &length), HETERO_INVALID_ARGUMENT, "tokens");
  EXPECT(hetero_engine_detokenize(engine, hello, 3, 0, NULL, 5, &length), HETERO_INVALID_ARGUMENT, "out_text");
  EXPECT(hetero_engine_detokenize(engine, hello, 3, 0, text, sizeof text, NULL), HETERO_INVALID_ARGUMENT,
         "out_length is NULL");
  EXPECT(hetero_engine_detokenize(NULL, hello, 3, 0, text, sizeof text, &length), HETERO_INVALID_ARGUMENT,
         "engine is NULL");
  /* A control token: its text, or nothing with skip_special. */
  int32_t im_start = -1;
  EXPECT(hetero_engine_tokenize(engine, "<|im_start|>", 0, 1, &im_start, 1, &count), HETERO_OK, NULL);
  EXPECT(hetero_engine_detokenize(engine, &im_start, 1, 0, text, sizeof text, &length), HETERO_OK, NULL);
  CHECK(strcmp(text, "<|im_start|>") == 0);
  EXPECT(hetero_engine_detokenize(engine, &im_start, 1, 1, text, sizeof text, &length), HETERO_OK, NULL);
  CHECK(length == 0);

  /* The sampler's options: defaults match the C++ ones; bad values name themselves. */
  hetero_run_options ro;
  hetero_run_options_default(&ro);
  CHECK(ro.min_p == 0.0f && ro.repetition_penalty == 1.0f && ro.frequency_penalty == 0.0f &&
        ro.presence_penalty == 0.0f && ro.penalty_window == 64 && ro.stop == NULL && ro.stop_count == 0);
  hetero_session* session = NULL;
  EXPECT(hetero_session_create(engine, NULL, &session), HETERO_OK, NULL);
  hetero_result* result = NULL;
  ro.max_tokens = 4;
  ro.min_p = 1.5f;
  EXPECT(hetero_session_run(session, "Hi", &ro, &result), HETERO_INVALID_ARGUMENT, "min_p");
  ro.min_p = 0.0f;
  ro.repetition_penalty = 0.0f;
  EXPECT(hetero_session_run(session, "Hi", &ro, &result), HETERO_INVALID_ARGUMENT, "repetition_penalty");
  ro.repetition_penalty = 1.0f;
  ro.penalty_window = -1;
  EXPECT(hetero_session_run(session, "Hi", &ro, &result), HETERO_INVALID_ARGUMENT, "penalty_window");
  ro.penalty_window = 64;
  ro.frequency_penalty = NAN;
  EXPECT(hetero_session_run(session, "Hi", &ro, &result), HETERO_INVALID_ARGUMENT, "frequency_penalty");
  ro.frequency_penalty = 0.0f;
  ro.stop_count = 1;
  EXPECT(hetero_session_run(session, "Hi", &ro, &result), HETERO_INVALID_ARGUMENT, "stop (stop_count > 0) is NULL");
  const char* empty_stop[2] = {"x", ""};
  ro.stop = empty_stop;
  ro.stop_count = 2;
  EXPECT(hetero_session_run(session, "Hi", &ro, &result), HETERO_INVALID_ARGUMENT, "stop[1] is empty");
  const char* null_stop[1] = {NULL};
  ro.stop = null_stop;
  ro.stop_count = 1;
  EXPECT(hetero_session_run(session, "Hi", &ro, &result), HETERO_INVALID_ARGUMENT, "stop[0] is NULL");
  CHECK(result == NULL);

  /* A stop string ends the reply before it: run once without, then stop at a piece of
   * that reply (greedy, so the same reply comes again) in a fresh session. */
  hetero_run_options plain;
  hetero_run_options_default(&plain);
  plain.max_tokens = 24;
  EXPECT(hetero_session_run(session, "Count from one to ten in words.", &plain, &result), HETERO_OK, NULL);
  char reply[512] = {0};
  if (result != NULL) {
    snprintf(reply, sizeof reply, "%s", hetero_result_text(result));
    hetero_result_destroy(result);
    result = NULL;
  }
  const size_t reply_length = strlen(reply);
  CHECK(reply_length > 8);
  if (reply_length > 8) {
    char stop_at[5];
    memcpy(stop_at, reply + reply_length / 2, 4);
    stop_at[4] = '\0';
    const char* stops[2] = {"never appears here", stop_at};
    plain.stop = stops;
    plain.stop_count = 2;
    hetero_session* again = NULL;
    EXPECT(hetero_session_create(engine, NULL, &again), HETERO_OK, NULL);
    EXPECT(hetero_session_run(again, "Count from one to ten in words.", &plain, &result), HETERO_OK, NULL);
    if (result != NULL) {
      const char* stopped = hetero_result_text(result);
      CHECK(strstr(stopped, stop_at) == NULL);                     /* not shown */
      CHECK(strncmp(stopped, reply, strlen(stopped)) == 0);        /* the same reply, cut */
      CHECK(strlen(stopped) <= reply_length / 2);
      CHECK(strstr(hetero_result_report_json(result), "\"stop_reason\":\"stop_string\"") != NULL);
      hetero_result_destroy(result);
      result = NULL;
    }
    hetero_session_destroy(again);
    /* A strong repetition penalty changes a greedy reply that repeats tokens. */
    hetero_run_options penalised;
    hetero_run_options_default(&penalised);
    penalised.max_tokens = 24;
    penalised.repetition_penalty = 100.0f;
    penalised.penalty_window = 256;
    hetero_session* third = NULL;
    EXPECT(hetero_session_create(engine, NULL, &third), HETERO_OK, NULL);
    EXPECT(hetero_session_run(third, "Count from one to ten in words.", &penalised, &result), HETERO_OK, NULL);
    if (result != NULL) {
      CHECK(strcmp(hetero_result_text(result), reply) != 0);
      hetero_result_destroy(result);
    }
    hetero_session_destroy(third);
  }
  /* A reply held to a JSON schema; a bad one named; not with tools. */
  hetero_run_options structured;
  hetero_run_options_default(&structured);
  CHECK(structured.response_schema_json == NULL);
  structured.max_tokens = 48;
  structured.response_schema_json =
      "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 30}}, "
      "\"required\": [\"city\"]}";
  EXPECT(hetero_session_run(session, "Where is the Eiffel Tower?", &structured, &result), HETERO_OK, NULL);
  if (result != NULL) {
    CHECK(strncmp(hetero_result_text(result), "{\"city\":", 8) == 0);
    CHECK(hetero_result_text(result)[strlen(hetero_result_text(result)) - 1] == '}');
    hetero_result_destroy(result);
    result = NULL;
  }
  /* Log-probabilities: greedy, so each token is its step's most likely. */
  hetero_run_options with_logprobs;
  hetero_run_options_default(&with_logprobs);
  CHECK(with_logprobs.logprobs == 0 && with_logprobs.top_logprobs == 0);
  with_logprobs.max_tokens = 8;
  with_logprobs.logprobs = 1;
  with_logprobs.top_logprobs = 2;
  token_count_t counted = {0, 0};
  with_logprobs.on_token = count_tokens;
  with_logprobs.on_token_user_data = &counted;
  EXPECT(hetero_session_run(session, "Say hello.", &with_logprobs, &result), HETERO_OK, NULL);
  if (result != NULL) {
    const size_t n = hetero_result_logprob_count(result);
    CHECK((size_t)counted.count == n);
    CHECK(n == (size_t)hetero_result_generated_tokens(result) && n > 0);
    for (size_t i = 0; i < n; ++i) {
      int32_t token = -1, best = -2;
      float lp = 1.0f, best_lp = 1.0f;
      EXPECT(hetero_result_logprob(result, i, &token, &lp), HETERO_OK, NULL);
      CHECK(hetero_result_top_logprob_count(result, i) == 2);
      EXPECT(hetero_result_top_logprob(result, i, 0, &best, &best_lp), HETERO_OK, NULL);
      CHECK(token == best && lp == best_lp && lp <= 0.0f);
    }
    int32_t token;
    float lp;
    EXPECT(hetero_result_logprob(result, n, &token, &lp), HETERO_INVALID_ARGUMENT, "past the");
    EXPECT(hetero_result_top_logprob(result, 0, 2, &token, &lp), HETERO_INVALID_ARGUMENT, "rank 2 is past the 2");
    EXPECT(hetero_result_logprob(result, 0, NULL, &lp), HETERO_INVALID_ARGUMENT, "out_token is NULL");
    CHECK(hetero_result_top_logprob_count(result, n) == 0);
    hetero_result_destroy(result);
    result = NULL;
  }
  CHECK(hetero_result_logprob_count(NULL) == 0);
  token_count_t stopping = {0, 2};
  with_logprobs.on_token_user_data = &stopping;
  EXPECT(hetero_session_run(session, "Tell me a story.", &with_logprobs, &result), HETERO_CANCELLED, "token callback");
  CHECK(stopping.count == 2 && result == NULL);
  with_logprobs.top_logprobs = 21;
  EXPECT(hetero_session_run(session, "Hi", &with_logprobs, &result), HETERO_INVALID_ARGUMENT, "top_logprobs is 21");
  structured.response_schema_json = "{\"type\": \"object\", \"oneOf\": []}";
  EXPECT(hetero_session_run(session, "Hi", &structured, &result), HETERO_INVALID_ARGUMENT, "oneOf");
  hetero_session_destroy(session);
  hetero_engine_destroy(engine);
}

/* Counts log messages; the device notice arrives when the first engine starts. */
static int log_messages = 0;
static void count_log(hetero_log_level level, const char* message, size_t length, void* user_data) {
  (void)level;
  (void)user_data;
  if (message != NULL && length > 0) __atomic_add_fetch(&log_messages, 1, __ATOMIC_RELAXED);
}

/* A policy that asks for a GPU the engine does not have, keeping its choice against the rules. */
static void far_gpu_policy(hetero_stage stage, const hetero_task_state* task, const hetero_device_state* devices,
                           size_t device_count, hetero_placement* placement, void* user_data) {
  (void)task, (void)devices, (void)device_count, (void)user_data;
  if (stage == HETERO_STAGE_TOOL_CALL) return;
  placement->device = HETERO_DEVICE_GPU_N(5);
  placement->override_rules = 1;
  snprintf(placement->reason, sizeof placement->reason, "far-gpu");
}

static void test_devices(const char* model) {
  hetero_engine* engine = open_engine(model, 0);
  if (engine == NULL) return;
  const size_t count = hetero_engine_device_count(engine);
  CHECK(count >= 2); /* the CPU, and the GPU (unavailable without one) */
  CHECK(hetero_engine_device_count(NULL) == 0);
  hetero_device_state state;
  memset(&state, 0, sizeof state);
  state.struct_size = sizeof state;
  char name[16], description[256];
  EXPECT(hetero_engine_device(engine, 0, &state, name, sizeof name, description, sizeof description), HETERO_OK, NULL);
  CHECK(strcmp(name, "cpu") == 0);
  CHECK(state.device == HETERO_DEVICE_CPU && state.available);
  CHECK(strncmp(description, "cpu", 3) == 0);
  EXPECT(hetero_engine_device(engine, 1, &state, name, sizeof name, NULL, 0), HETERO_OK, NULL);
  CHECK(strcmp(name, "gpu") == 0);
  CHECK(state.device == HETERO_DEVICE_GPU);
  char tiny[2];
  EXPECT(hetero_engine_device(engine, 0, &state, tiny, sizeof tiny, NULL, 0), HETERO_OK, NULL);
  CHECK(strcmp(tiny, "c") == 0); /* cut to fit, NUL-terminated */
  EXPECT(hetero_engine_device(engine, count, &state, NULL, 0, NULL, 0), HETERO_INVALID_ARGUMENT, "past the last");
  EXPECT(hetero_engine_device(engine, 0, NULL, NULL, 0, NULL, 0), HETERO_INVALID_ARGUMENT, "state");
  EXPECT(hetero_engine_device(engine, 0, &state, NULL, 4, NULL, 0), HETERO_INVALID_ARGUMENT, "NULL buffer");
  state.struct_size = 0;
  EXPECT(hetero_engine_device(engine, 0, &state, NULL, 0, NULL, 0), HETERO_INVALID_ARGUMENT, "struct_size");
  EXPECT(hetero_engine_device(NULL, 0, &state, NULL, 0, NULL, 0), HETERO_INVALID_ARGUMENT, "engine");
  hetero_engine_destroy(engine);

  /* A device the engine lacks runs on the CPU, override or not, and the reason says so. */
  hetero_engine_options eo;
  hetero_engine_options_default(&eo);
  eo.model_path = model;
  eo.threads = 2;
  eo.scheduler_callback = far_gpu_policy;
  eo.scheduler_name = "far-gpu";
  engine = NULL;
  EXPECT(hetero_engine_create(&eo, &engine), HETERO_OK, NULL);
  if (engine == NULL) return;
  hetero_session* session = NULL;
  EXPECT(hetero_session_create(engine, NULL, &session), HETERO_OK, NULL);
  hetero_run_options ro;
  hetero_run_options_default(&ro);
  ro.max_tokens = 4;
  hetero_result* result = NULL;
  EXPECT(hetero_session_run(session, "Say hello.", &ro, &result), HETERO_OK, NULL);
  if (result != NULL) {
    const char* report = hetero_result_report_json(result);
    CHECK(strstr(report, "far-gpu; rule device-unavailable: gpu:5 is not one of the engine's devices, cpu used") != NULL);
    CHECK(strstr(report, "\"device\":\"cpu\"") != NULL);
    hetero_result_destroy(result);
  }
  hetero_session_destroy(session);
  hetero_engine_destroy(engine);
}

/* A LoRA adapter file as llama.cpp writes them (GGUF v3), written here so that this program
 * needs nothing but the C library: one adapted matrix, blk.0.attn_v.weight (the default
 * model's [576, 192]), rank 2, f32 values of amplitude `amplitude`. */
static void put_bytes(FILE* f, const void* p, size_t n) { fwrite(p, 1, n, f); }
static void put_u32(FILE* f, uint32_t v) { put_bytes(f, &v, 4); }
static void put_u64(FILE* f, uint64_t v) { put_bytes(f, &v, 8); }
static void put_string(FILE* f, const char* s) {
  put_u64(f, strlen(s));
  put_bytes(f, s, strlen(s));
}
static void put_string_kv(FILE* f, const char* key, const char* value) {
  put_string(f, key);
  put_u32(f, 8); /* string */
  put_string(f, value);
}
static int write_adapter(const char* path, float amplitude) {
  FILE* f = fopen(path, "wb");
  if (f == NULL) return 0;
  const uint64_t inputs = 576, outputs = 192, rank = 2;
  put_bytes(f, "GGUF", 4);
  put_u32(f, 3);
  put_u64(f, 2); /* tensors */
  put_u64(f, 4); /* keys */
  put_string_kv(f, "general.architecture", "llama");
  put_string_kv(f, "general.type", "adapter");
  put_string_kv(f, "adapter.type", "lora");
  put_string(f, "adapter.lora.alpha");
  put_u32(f, 6); /* float32 */
  const float alpha = 2.0f;
  put_bytes(f, &alpha, 4);
  const uint64_t dims_a[2] = {inputs, rank}, dims_b[2] = {rank, outputs};
  put_string(f, "blk.0.attn_v.weight.lora_a");
  put_u32(f, 2);
  put_bytes(f, dims_a, sizeof dims_a);
  put_u32(f, 0); /* F32 */
  put_u64(f, 0);
  put_string(f, "blk.0.attn_v.weight.lora_b");
  put_u32(f, 2);
  put_bytes(f, dims_b, sizeof dims_b);
  put_u32(f, 0);
  put_u64(f, (inputs * rank * 4 + 31) / 32 * 32);
  long at = ftell(f);
  while (at % 32 != 0) {
    fputc(0, f);
    ++at;
  }
  uint32_t state = 12345;
  for (uint64_t i = 0; i < inputs * rank; ++i) {
    state = state * 1664525u + 1013904223u;
    const float v = amplitude * ((float)(state >> 8) / 8388608.0f - 1.0f);
    put_bytes(f, &v, 4);
  }
  for (uint64_t i = inputs * rank * 4; i % 32 != 0; ++i) fputc(0, f); /* lora_b's offset */
  for (uint64_t i = 0; i < rank * outputs; ++i) {
    state = state * 1664525u + 1013904223u;
    const float v = amplitude * ((float)(state >> 8) / 8388608.0f - 1.0f);
    put_bytes(f, &v, 4);
  }
  return fclose(f) == 0;
}

/* LoRA adapters: loaded, applied per session (scale 0 is the base model), and every error
 * path. */
static void test_adapters(const char* model) {
  hetero_engine* engine = open_engine(model, 0);
  if (engine == NULL) return;
  const char* path = "build/capi_test_adapter.gguf";
  CHECK(write_adapter(path, 1.0f));
  EXPECT(hetero_engine_load_adapter(engine, "voice", path), HETERO_OK, NULL);
  EXPECT(hetero_engine_load_adapter(engine, "voice", path), HETERO_INVALID_ARGUMENT, "loaded already");
  EXPECT(hetero_engine_load_adapter(engine, "model", model), HETERO_INVALID_ARGUMENT, "general.type");
  EXPECT(hetero_engine_load_adapter(engine, "none", "/no/such/adapter.gguf"), HETERO_NOT_FOUND, NULL);
  EXPECT(hetero_engine_load_adapter(engine, "", path), HETERO_INVALID_ARGUMENT, "empty");
  EXPECT(hetero_engine_load_adapter(NULL, "x", path), HETERO_INVALID_ARGUMENT, "engine");
  EXPECT(hetero_engine_load_adapter(engine, NULL, path), HETERO_INVALID_ARGUMENT, "name");
  EXPECT(hetero_engine_load_adapter(engine, "x", NULL), HETERO_INVALID_ARGUMENT, "path");

  hetero_run_options ro;
  hetero_run_options_default(&ro);
  ro.max_tokens = 12;
  char texts[3][512] = {{0}};
  const float scales[3] = {-1.0f /* no adapter */, 0.0f, 1.0f};
  for (int i = 0; i < 3; ++i) {
    hetero_session* session = NULL;
    hetero_result* result = NULL;
    EXPECT(hetero_session_create(engine, NULL, &session), HETERO_OK, NULL);
    if (session == NULL) continue;
    if (scales[i] >= 0) EXPECT(hetero_session_set_adapter(session, "voice", scales[i]), HETERO_OK, NULL);
    EXPECT(hetero_session_run(session, "Name a colour.", &ro, &result), HETERO_OK, NULL);
    if (result != NULL) snprintf(texts[i], sizeof texts[i], "%s", hetero_result_text(result));
    hetero_result_destroy(result);
    if (i == 2) {
      EXPECT(hetero_session_set_adapter(session, "other", 1.0f), HETERO_NOT_FOUND, "voice");
      EXPECT(hetero_session_set_adapter(session, "voice", NAN), HETERO_INVALID_ARGUMENT, "finite");
      EXPECT(hetero_session_set_adapter(session, NULL, 1.0f), HETERO_OK, NULL);
    }
    hetero_session_destroy(session);
  }
  CHECK(strcmp(texts[0], texts[1]) == 0); /* scale 0: the base model */
  CHECK(strcmp(texts[0], texts[2]) != 0); /* the adapter changes the answer */
  EXPECT(hetero_session_set_adapter(NULL, "voice", 1.0f), HETERO_INVALID_ARGUMENT, "session");
  remove(path);
  hetero_engine_destroy(engine);
}

/* Expert usage: saved by one engine and read by the next; a missing or misfit file is
 * refused at create (the default model is dense: it writes no layers). */
static void test_expert_usage(const char* model) {
  hetero_engine* engine = open_engine(model, 0);
  if (engine == NULL) return;
  const char* path = "build/capi_test_expert_usage.json";
  EXPECT(hetero_engine_save_expert_usage(engine, path), HETERO_OK, NULL);
  EXPECT(hetero_engine_save_expert_usage(NULL, path), HETERO_INVALID_ARGUMENT, "engine");
  EXPECT(hetero_engine_save_expert_usage(engine, NULL), HETERO_INVALID_ARGUMENT, "path");
  EXPECT(hetero_engine_save_expert_usage(engine, ""), HETERO_INVALID_ARGUMENT, "empty path");
  EXPECT(hetero_engine_save_expert_usage(engine, "/no/such/dir/usage.json"), HETERO_NOT_FOUND, "cannot write");
  hetero_engine_destroy(engine);
  hetero_engine_options eo;
  hetero_engine_options_default(&eo);
  eo.model_path = model;
  eo.threads = 1;
  eo.expert_usage_path = path;
  engine = NULL;
  EXPECT(hetero_engine_create(&eo, &engine), HETERO_OK, NULL);
  hetero_engine_destroy(engine);
  eo.expert_usage_path = "/no/such/usage.json";
  engine = NULL;
  EXPECT(hetero_engine_create(&eo, &engine), HETERO_NOT_FOUND, "cannot read");
  CHECK(engine == NULL);
  FILE* f = fopen(path, "wb");
  if (f != NULL) {
    fputs("{\"expert_usage_version\": 1, \"layers\": [{\"layer\": 0, \"evaluations\": [4, 2]}]}", f);
    fclose(f);
    eo.expert_usage_path = path;
    EXPECT(hetero_engine_create(&eo, &engine), HETERO_INVALID_ARGUMENT, "no mixture of experts");
    CHECK(engine == NULL);
  }
  remove(path);
}

/* Session state: saved from one engine, restored into another, the next turn is the
 * uninterrupted session's; bad state and arguments are refused. */
static void test_state(const char* model) {
  hetero_engine* engine = open_engine(model, 0);
  hetero_engine* other = open_engine(model, 0);
  if (engine == NULL || other == NULL) return;
  hetero_run_options ro;
  hetero_run_options_default(&ro);
  ro.max_tokens = 12;
  hetero_session* whole = NULL;
  hetero_session* first = NULL;
  hetero_result* result = NULL;
  EXPECT(hetero_session_create(engine, NULL, &whole), HETERO_OK, NULL);
  EXPECT(hetero_session_create(engine, NULL, &first), HETERO_OK, NULL);
  EXPECT(hetero_session_run(whole, "Name a colour.", &ro, &result), HETERO_OK, NULL);
  hetero_result_destroy(result);
  EXPECT(hetero_session_run(whole, "And another one?", &ro, &result), HETERO_OK, NULL);
  char expected[512] = {0};
  if (result != NULL) snprintf(expected, sizeof expected, "%s", hetero_result_text(result));
  hetero_result_destroy(result);
  EXPECT(hetero_session_run(first, "Name a colour.", &ro, &result), HETERO_OK, NULL);
  hetero_result_destroy(result);

  uint8_t* bytes = NULL;
  size_t size = 0;
  EXPECT(hetero_session_save_state(first, &bytes, &size), HETERO_OK, NULL);
  CHECK(bytes != NULL && size > 16);
  hetero_session* restored = NULL;
  EXPECT(hetero_engine_restore_session(other, bytes, size, &restored), HETERO_OK, NULL);
  if (restored != NULL) {
    EXPECT(hetero_session_run(restored, "And another one?", &ro, &result), HETERO_OK, NULL);
    if (result != NULL) {
      CHECK(strcmp(hetero_result_text(result), expected) == 0);
      CHECK(strstr(hetero_result_report_json(result), "\"reused_prompt_tokens\":0") == NULL);
      hetero_result_destroy(result);
    }
    hetero_session_destroy(restored);
  }
  /* Corrupt, truncated, NULL. */
  if (bytes != NULL) {
    bytes[size / 2] ^= 0x10;
    EXPECT(hetero_engine_restore_session(other, bytes, size, &restored), HETERO_INVALID_ARGUMENT, "checksum");
    CHECK(restored == NULL);
    EXPECT(hetero_engine_restore_session(other, bytes, 10, &restored), HETERO_INVALID_ARGUMENT, "truncated");
  }
  EXPECT(hetero_engine_restore_session(other, NULL, 0, &restored), HETERO_INVALID_ARGUMENT, "bytes");
  EXPECT(hetero_engine_restore_session(NULL, bytes, size, &restored), HETERO_INVALID_ARGUMENT, "engine");
  hetero_bytes_free(bytes);
  hetero_bytes_free(NULL);
  uint8_t* none = (uint8_t*)&size; /* set to NULL on failure */
  EXPECT(hetero_session_save_state(NULL, &none, &size), HETERO_INVALID_ARGUMENT, "session");
  CHECK(none == NULL && size == 0);
  /* Through a file. */
  const char* path = "build/capi_test_session.state";
  EXPECT(hetero_session_save_state_file(first, path), HETERO_OK, NULL);
  EXPECT(hetero_engine_restore_session_file(other, path, &restored), HETERO_OK, NULL);
  hetero_session_destroy(restored);
  remove(path);
  EXPECT(hetero_engine_restore_session_file(other, "/no/such/state", &restored), HETERO_NOT_FOUND, "cannot read");
  EXPECT(hetero_session_save_state_file(first, NULL), HETERO_INVALID_ARGUMENT, "path");
  hetero_session_destroy(first);
  hetero_session_destroy(whole);
  hetero_engine_destroy(other);
  hetero_engine_destroy(engine);
}

int main(int argc, char** argv) {
  hetero_set_log_callback(count_log, NULL, HETERO_LOG_DEBUG);
  test_arguments_and_tools();
  const char* model = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  FILE* f = fopen(model, "rb");
  if (f == NULL) {
    printf("SKIP: no model at %s; argument and tool checks passed: %s\n", model, failures ? "no" : "yes");
    return failures ? 1 : 77;
  }
  fclose(f);
  test_runs(model);
  test_tokens_and_sampling(model);
  test_devices(model);
  test_state(model);
  test_adapters(model);
  test_expert_usage(model);
  CHECK(log_messages > 0); /* at least the device notice */
  hetero_set_log_callback(NULL, NULL, HETERO_LOG_DEBUG);
  if (failures) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("capi_test: all checks passed\n");
  return 0;
}
