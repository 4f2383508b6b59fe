// hetero-generate: text generation on the CPU backend, streamed to stdout.
//
//   hetero-generate [-m MODEL] -p PROMPT [-n N] [--temp T] [--seed S] [--top-k K]
//                   [--top-p P] [--min-p P] [--repeat-penalty R] [--stop STR]... [--chat]
//                   [--system TEXT] [-t THREADS] [--precision auto|f32|bf16] [--json]
//
// --chat renders the prompt as a user message with the model's chat template; --json prints
// {"tokens", "text", "prefill_tok_s", "decode_tok_s", "ttft_ms", ...} instead of streaming.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "hetero/chat.h"
#include "hetero/model.h"
#include "hetero/tokenizer.h"
#include "src/cpu/cpu_backend.h"
#include "src/runtime/generate.h"

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
    "                       [-t THREADS] [--precision auto|f32|bf16] [--json]\n";

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, prompt, system, precision = "auto";
  bool have_prompt = false, chat = false, json = false;
  int threads = 0;
  hetero::GenerateOptions options;
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
      options.stop_strings.push_back(value());
    } else if (a == "--chat") {
      chat = true;
    } else if (a == "--system") {
      system = value();
    } else if (a == "-t") {
      number(threads);
    } else if (a == "--precision") {
      precision = value();
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
  hetero::CpuBackendOptions backend_options;
  backend_options.threads = threads > 0 ? threads : hetero::DefaultCpuThreads();
  if (precision == "f32") {
    backend_options.precision = hetero::CpuPrecision::kF32;
  } else if (precision == "bf16") {
    backend_options.precision = hetero::CpuPrecision::kBf16;
  } else if (precision != "auto") {
    return Fail("unknown precision '" + precision + "'");
  }

  auto resolved = hetero::ResolveModelPath(model_path);
  if (!resolved.ok()) return Fail(std::string(resolved.status().message()));
  auto model = hetero::Model::Load(*resolved);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  auto tokenizer = hetero::Tokenizer::Create(**model);
  if (!tokenizer.ok()) return Fail(std::string(tokenizer.status().message()));

  std::string text = prompt;
  bool add_bos = (*tokenizer)->add_bos_by_default();
  if (chat) {
    auto chat_template = hetero::ChatTemplate::FromModel(**model);
    if (!chat_template.ok()) return Fail(std::string(chat_template.status().message()));
    std::vector<hetero::ChatMessage> messages;
    if (!system.empty()) messages.push_back({.role = "system", .content = system});
    messages.push_back({.role = "user", .content = prompt});
    auto rendered = chat_template->Render(messages, {}, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return Fail(std::string(rendered.status().message()));
    text = *rendered;
    add_bos = false;  // the template writes BOS where the model wants it
  } else if (!system.empty()) {
    return Fail("--system needs --chat");
  }
  auto ids = (*tokenizer)->Encode(text, add_bos, /*parse_special=*/true);
  if (!ids.ok()) return Fail(std::string(ids.status().message()));
  if (ids->empty()) return Fail("the prompt tokenizes to nothing");
  backend_options.kv_capacity_tokens = static_cast<int>(ids->size()) + options.max_tokens + 16;
  auto backend = hetero::CpuBackend::Create(**model, backend_options);
  if (!backend.ok()) return Fail(std::string(backend.status().message()));

  hetero::TextCallback stream = nullptr;
  if (!json) {
    stream = [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  auto result = hetero::Generate(**backend, **tokenizer, *ids, options, stream);
  if (!result.ok()) return Fail(std::string(result.status().message()));
  const double prefill_tok_s = result->prefill_seconds > 0 ? result->prompt_tokens / result->prefill_seconds : 0;
  const double decode_tok_s = result->decode_seconds > 0 ? result->tokens.size() / result->decode_seconds : 0;
  if (json) {
    nlohmann::json out;
    out["tokens"] = result->tokens;
    out["text"] = result->text;
    out["prompt_tokens"] = result->prompt_tokens;
    out["stop_reason"] = result->stop_reason;
    out["prefill_tok_s"] = prefill_tok_s;
    out["decode_tok_s"] = decode_tok_s;
    out["ttft_ms"] = result->time_to_first_token_ms;
    out["backend"] = (*backend)->info().name;
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    std::fprintf(stderr, "[%d prompt tokens, %.1f tok/s prefill; %zu tokens, %.1f tok/s decode; ttft %.1f ms; %s]\n",
                 result->prompt_tokens, prefill_tok_s, result->tokens.size(), decode_tok_s,
                 result->time_to_first_token_ms, result->stop_reason.c_str());
  }
  return 0;
}
