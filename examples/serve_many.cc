// serve_many: N concurrent conversations through one engine, on the public API alone.
// Each session asks its question from its own thread; the engine batches their decode
// steps. Prints every task's stages (device, times, tokens) and the aggregate throughput.
//
//   serve_many [-m MODEL] [-s SESSIONS] [-n TOKENS] [-t THREADS] [--scheduler NAME]
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "hetero/engine.h"
#include "hetero/log.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

const char* kQuestions[] = {
    "What is the capital of France?", "Name three primary colors.", "What is 12 times 12?",
    "Give me a synonym for happy.", "What does a bee make?", "Which planet is known as the red planet?",
    "What is the boiling point of water in Celsius?", "Who wrote Romeo and Juliet?",
};

}  // namespace

int main(int argc, char** argv) {
  std::string model;
  hetero::EngineOptions options;
  int sessions = 8, tokens = 48;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) std::exit(Fail("option " + a + " needs a value"));
      return argv[++i];
    };
    auto number = [&](int& out) {
      const std::string v = value();
      if (!absl::SimpleAtoi(v, &out) || out < 0) std::exit(Fail("option " + a + ": '" + v + "' is not a count"));
    };
    if (a == "-m") {
      model = value();
    } else if (a == "-s") {
      number(sessions);
    } else if (a == "-n") {
      number(tokens);
    } else if (a == "-t") {
      number(options.threads);
    } else if (a == "--scheduler") {
      options.scheduler = value();
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: serve_many [-m MODEL] [-s SESSIONS] [-n TOKENS] [-t THREADS] [--scheduler seed|all-cpu|all-gpu|cost]\n");
      return 0;
    } else {
      return Fail("unknown option '" + a + "' (usage: serve_many [-m MODEL] [-s N] [-n TOKENS] [-t THREADS] [--scheduler NAME])");
    }
  }
  hetero::SetLogCallback(hetero::LogToStderr, hetero::LogLevel::kWarning);
  options.max_sessions = std::max(sessions, 1);
  options.max_batch = std::max(sessions, 1);
  auto engine = hetero::Engine::Create(model, options);
  if (!engine.ok()) return Fail(std::string(engine.status().message()));
  std::printf("scheduler %s\n%s", (*engine)->scheduler_name().c_str(), (*engine)->DescribeDevices().c_str());

  std::vector<std::unique_ptr<hetero::Session>> all;
  for (int i = 0; i < sessions; ++i) {
    auto s = (*engine)->NewSession("You are a helpful assistant. Answer briefly.");
    if (!s.ok()) return Fail(std::string(s.status().message()));
    all.push_back(std::move(*s));
  }
  std::vector<absl::StatusOr<hetero::RunResult>> results(sessions, absl::UnknownError("not run"));
  hetero::RunOptions run;
  run.max_tokens = tokens;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < sessions; ++i) {
    threads.emplace_back([&, i] { results[i] = all[i]->Run(kQuestions[i % 8], run); });
  }
  for (std::thread& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  int generated = 0;
  for (int i = 0; i < sessions; ++i) {
    if (!results[i].ok()) {
      std::printf("session %d: error: %s\n", i, std::string(results[i].status().message()).c_str());
      continue;
    }
    const hetero::TaskReport& r = results[i]->report;
    generated += r.generated_tokens;
    std::string first_line = results[i]->text.substr(0, results[i]->text.find('\n'));
    std::printf("session %d: %s -> %s\n", i, kQuestions[i % 8], first_line.c_str());
    for (const hetero::StageReport& st : r.stages) {
      std::printf("    %-10s on %s  %8.1f .. %8.1f ms  in %4d  out %4d\n", std::string(hetero::StageName(st.stage)).c_str(),
                  std::string(hetero::DeviceName(st.device)).c_str(), st.start_ms, st.end_ms, st.tokens_in, st.tokens_out);
    }
  }
  std::printf("%d sessions, %d tokens generated in %.2f s: %.1f tok/s aggregate\n", sessions, generated, seconds,
              generated / seconds);
  return 0;
}
