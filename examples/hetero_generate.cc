// hetero-generate: a raw completion (Engine::Complete) streamed to stdout, on the CPU unless
// --scheduler says otherwise.
//
//   hetero-generate [-m MODEL] -p PROMPT [-n N] [--temp T] [--seed S] [--top-k K]
//                   [--top-p P] [--min-p P] [--repeat-penalty R] [--stop STR]... [--chat]
//                   [--system TEXT] [-t THREADS] [--precision auto|int8|f32|bf16]
//                   [--scheduler NAME] [--json]
//
// --chat renders the prompt as a user message with the model's chat template; --json prints
// {"tokens", "text", "prefill_tok_s", "decode_tok_s", "ttft_ms", ...} instead of streaming.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "hetero/chat.h"
#include "hetero/engine.h"
#include "hetero/log.h"

namespace {

int Fail(const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  std::fprintf(stderr, "error: %s\n", line.c_str());
  return 1;
}

constexpr char kUsage[] =
    "usage: hetero-generate [-m MODEL] -p PROMPT [-n N] [--temp T] [--seed S] [--top-k K] [--top-p P]\n"
    "                       [--min-p P] [--repeat-penalty R] [--stop STR]... [--chat] [--system TEXT]\n"
    "                       [-t THREADS] [--precision auto|int8|f32|bf16] [--scheduler NAME] [--json]\n";

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, prompt, system, precision = "auto", scheduler = "all-cpu";
  bool have_prompt = false, chat = false, json = false;
  int threads = 0;
  hetero::CompletionOptions options;
  options.max_tokens = 128;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) std::exit(Fail("option " + a + " needs a value"));
      return argv[++i];
    };
    auto number = [&](auto& out) {
      const char* v = value();
      bool ok;
      if constexpr (std::is_same_v<std::decay_t<decltype(out)>, float>) {
        ok = absl::SimpleAtof(v, &out);
      } else {
        ok = absl::SimpleAtoi(v, &out);
      }
      if (!ok) std::exit(Fail("option " + a + ": '" + v + "' is not a number"));
    };
    if (a == "-m") {
      model_path = value();
    } else if (a == "-p") {
      prompt = value();
      have_prompt = true;
    } else if (a == "-n") {
      number(options.max_tokens);
    } else if (a == "--temp") {
      number(options.sampling.temperature);
    } else if (a == "--seed") {
      number(options.sampling.seed);
    } else if (a == "--top-k") {
      number(options.sampling.top_k);
    } else if (a == "--top-p") {
      number(options.sampling.top_p);
    } else if (a == "--min-p") {
      number(options.sampling.min_p);
    } else if (a == "--repeat-penalty") {
      number(options.sampling.repetition_penalty);
    } else if (a == "--stop") {
      options.stop.push_back(value());
    } else if (a == "--chat") {
      chat = true;
    } else if (a == "--system") {
      system = value();
    } else if (a == "-t") {
      number(threads);
    } else if (a == "--precision") {
      precision = value();
    } else if (a == "--scheduler") {
      scheduler = value();
    } else if (a == "--json") {
      json = true;
    } else if (a == "-h" || a == "--help") {
      std::printf("%s", kUsage);
      return 0;
    } else {
      return Fail("unknown option '" + a + "' (try --help)");
    }
  }
  if (!have_prompt) return Fail("no prompt given (-p)");
  if (!system.empty() && !chat) return Fail("--system needs --chat");
  hetero::SetLogCallback(nullptr, hetero::LogLevel::kError);  // notices would interleave with the text
  hetero::EngineOptions engine_options;
  engine_options.threads = threads;
  engine_options.cpu_precision = precision;
  engine_options.scheduler = scheduler;
  engine_options.measure_energy = false;
  engine_options.max_sessions = 1;
  auto engine = hetero::Engine::Create(model_path, engine_options);
  if (!engine.ok()) return Fail(std::string(engine.status().message()));
  std::string text = prompt;
  if (chat) {
    std::vector<hetero::ChatMessage> messages;
    if (!system.empty()) messages.push_back({.role = "system", .content = system});
    messages.push_back({.role = "user", .content = prompt});
    auto rendered = (*engine)->chat_template().Render(messages, {}, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return Fail(std::string(rendered.status().message()));
    text = *rendered;
    options.add_bos = false;  // the template writes BOS where the model wants it
  }
  if (!json) {
    options.on_text = [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  auto result = (*engine)->Complete(text, options);
  if (!result.ok()) return Fail(std::string(result.status().message()));
  const hetero::StageReport& prefill = result->report.stages[0];
  const hetero::StageReport& decode = result->report.stages[1];
  const double prefill_seconds = (prefill.end_ms - prefill.start_ms) / 1e3;
  const double decode_seconds = (decode.end_ms - decode.start_ms) / 1e3;
  const int prompt_tokens = result->report.prompt_tokens;
  const hetero::SystemSnapshot devices = (*engine)->snapshot();
  const hetero::DeviceSnapshot* device = devices.Find(decode.device);
  const double prefill_tok_s = prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0;
  const double decode_tok_s = decode_seconds > 0 ? result->tokens.size() / decode_seconds : 0;
  if (json) {
    nlohmann::json out;
    out["tokens"] = result->tokens;
    out["text"] = result->text;
    out["prompt_tokens"] = prompt_tokens;
    out["stop_reason"] = result->report.stop_reason;
    out["prefill_tok_s"] = prefill_tok_s;
    out["decode_tok_s"] = decode_tok_s;
    out["ttft_ms"] = result->report.time_to_first_token_ms;
    out["backend"] = device != nullptr ? device->name : hetero::DeviceName(decode.device);
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    std::fprintf(stderr, "[%d prompt tokens, %.1f tok/s prefill; %zu tokens, %.1f tok/s decode; ttft %.1f ms; %s]\n",
                 prompt_tokens, prefill_tok_s, result->tokens.size(), decode_tok_s,
                 result->report.time_to_first_token_ms, result->report.stop_reason.c_str());
  }
  return 0;
}
