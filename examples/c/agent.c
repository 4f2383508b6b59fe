/* hetero-agent-c: the agent example in pure C11 over the C ABI (capi/hetero.h).
 * Loads a model, registers two tools (add, multiply), runs a question through the agent
 * loop while streaming the answer, and prints the task report.
 *   hetero-agent-c [-m MODEL] ["question"] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hetero.h"

/* Reads the number after "\"key\":" in a JSON object text (the arguments arrive already
 * validated against the schema, so the key is there and holds a number). */
static double number_arg(const char* json, const char* key) {
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  const char* at = strstr(json, pattern);
  return at != NULL ? strtod(at + strlen(pattern), NULL) : 0.0;
}

static void arithmetic(const char* arguments, hetero_tool_reply* reply, void* user_data) {
  const char op = *(const char*)user_data;
  const double a = number_arg(arguments, "a"), b = number_arg(arguments, "b");
  char text[64];
  snprintf(text, sizeof text, "%.10g", op == '+' ? a + b : a * b);
  hetero_tool_reply_set_result(reply, text, strlen(text));
}

static int print_piece(const char* text, size_t length, void* user_data) {
  (void)user_data;
  fwrite(text, 1, length, stdout);
  fflush(stdout);
  return 0; /* go on */
}

static int fail(const char* what, hetero_status status) {
  fprintf(stderr, "error: %s: %s: %s\n", what, hetero_status_name(status), hetero_last_error());
  return 1;
}

int main(int argc, char** argv) {
  const char* model = NULL;
  const char* question = "What is 12.5 times 8?";
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "-m") == 0 && i + 1 < argc) {
      model = argv[++i];
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf("usage: hetero-agent-c [-m MODEL] [\"question\"]\n");
      return 0;
    } else {
      question = argv[i];
    }
  }

  hetero_set_log_callback(hetero_log_to_stderr, NULL, HETERO_LOG_WARNING); /* e.g. "no GPU" */
  hetero_engine_options engine_options;
  hetero_engine_options_default(&engine_options);
  engine_options.model_path = model;
  hetero_engine* engine = NULL;
  hetero_status status = hetero_engine_create(&engine_options, &engine);
  if (status != HETERO_OK) return fail("loading the model", status);

  static const char kPair[] =
      "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"number\"}, \"b\": {\"type\": \"number\"}},"
      " \"required\": [\"a\", \"b\"]}";
  static char plus = '+', times = '*';
  hetero_tools* tools = NULL;
  hetero_tools_create(&tools);
  hetero_tool tool;
  hetero_tool_default(&tool);
  tool.name = "add";
  tool.description = "Adds two numbers a and b.";
  tool.parameters_json = kPair;
  tool.handler = arithmetic;
  tool.user_data = &plus;
  status = hetero_tools_add(tools, &tool);
  if (status == HETERO_OK) {
    tool.name = "multiply";
    tool.description = "Multiplies two numbers a and b.";
    tool.user_data = &times;
    status = hetero_tools_add(tools, &tool);
  }
  if (status != HETERO_OK) return fail("registering the tools", status);

  hetero_session* session = NULL;
  status = hetero_session_create(engine, NULL, &session);
  if (status != HETERO_OK) return fail("creating a session", status);

  hetero_run_options run;
  hetero_run_options_default(&run);
  run.max_tokens = 128;
  run.tools = tools;
  run.on_text = print_piece;
  printf("question: %s\nanswer (streamed): ", question);
  fflush(stdout);
  hetero_result* result = NULL;
  status = hetero_session_run(session, question, &run, &result);
  printf("\n");
  if (status != HETERO_OK) return fail("running the question", status);
  printf("answer: %s\n%d tokens generated, %d tool calls\nreport: %s\n", hetero_result_text(result),
         hetero_result_generated_tokens(result), hetero_result_tool_call_count(result),
         hetero_result_report_json(result));

  hetero_result_destroy(result);
  hetero_session_destroy(session);
  hetero_tools_destroy(tools);
  hetero_engine_destroy(engine);
  return 0;
}
