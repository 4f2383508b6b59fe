// hetero-bench --soak SECONDS --sessions N: N concurrent sessions asking the tool suite's
// questions through the agent loop (tools, constrained calls) for a fixed time. Each
// session lives for three turns, then is dropped and a new one opened; every seventh task
// is cancelled from its text callback, so that cancellation and release run under load too.
// Reports completed tasks, errors by kind, p50/p99 task latency, and resident memory at
// the start, after warm-up (once every worker has lived through two sessions of three
// turns, or at half time), every 5 s after it, and at the end.
#include "examples/soak_bench.h"

#include "examples/agentic_bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hetero/engine.h"
#include "nlohmann/json.hpp"

namespace hetero::bench {
namespace {

using SoakClock = std::chrono::steady_clock;

// Resident set size of this process, in bytes (/proc/self/statm).
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}


struct Totals {
  std::mutex mu;
  int completed = 0;
  int cancelled_on_purpose = 0;
  int tool_calls = 0;
  long generated_tokens = 0;
  std::map<std::string, int> errors;  // status code name -> count
  std::map<std::string, std::string> first_error;
  std::vector<double> latencies_ms;
  std::atomic<int> warm_workers{0};  // workers past their first two sessions (six turns)
};

void SessionLoop(Engine& engine, const std::vector<example_tools::SuiteQuestion>& questions,
                 const std::shared_ptr<ToolRegistry>& tools, const SoakOptions& o, int worker,
                 SoakClock::time_point end, Totals& totals) {
  std::unique_ptr<Session> session;
  int turn = 0;
  for (int task = 0; SoakClock::now() < end; ++task, ++turn) {
    if (session == nullptr || turn % 3 == 0) {
      session.reset();
      auto created = engine.NewSession("You are a concise assistant.");
      if (!created.ok()) {
        std::lock_guard<std::mutex> lock(totals.mu);
        ++totals.errors[absl::StatusCodeToString(created.status().code())];
        totals.first_error.emplace(absl::StatusCodeToString(created.status().code()),
                                   std::string(created.status().message()));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      session = std::move(*created);
    }
    const example_tools::SuiteQuestion& q = questions[(worker * 7 + task) % questions.size()];
    RunOptions run;
    run.max_tokens = o.max_tokens;
    run.tool_registry = tools;
    run.max_tool_rounds = 1;
    const bool cancel = (worker + task) % 7 == 6;
    int pieces = 0;
    if (cancel) run.on_text = [&pieces](std::string_view) { return ++pieces < 2; };
    const auto started = SoakClock::now();
    absl::StatusOr<RunResult> result = session->Run(q.question, run);
    const double ms = std::chrono::duration<double, std::milli>(SoakClock::now() - started).count();
    if (task == 5) ++totals.warm_workers;
    std::lock_guard<std::mutex> lock(totals.mu);
    if (result.ok()) {
      ++totals.completed;
      totals.latencies_ms.push_back(ms);
      totals.generated_tokens += result->report.generated_tokens;
      totals.tool_calls += static_cast<int>(result->report.tool_calls.size());
    } else if (cancel && result.status().code() == absl::StatusCode::kCancelled) {
      ++totals.cancelled_on_purpose;
    } else {
      const std::string kind = absl::StatusCodeToString(result.status().code());
      ++totals.errors[kind];
      totals.first_error.emplace(kind, std::string(result.status().message()));
    }
  }
}

}  // namespace

int RunSoak(const SoakOptions& o) {
  if (o.sessions < 1 || o.seconds <= 0) {
    std::fprintf(stderr, "error: --soak needs a positive duration and --sessions at least 1\n");
    return 1;
  }
  auto questions = example_tools::LoadSuite(o.suite);
  if (!questions.ok() || questions->empty()) {
    std::fprintf(stderr, "error: cannot read the suite '%s': %s\n", o.suite.c_str(),
                 questions.ok() ? "no questions" : std::string(questions.status().message()).c_str());
    return 1;
  }
  auto tools = example_tools::MakeSuiteTools(o.facts, /*fixed_clock=*/true);
  if (!tools.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(tools.status().message()).c_str());
    return 1;
  }
  EngineOptions engine_options;
  engine_options.threads = o.threads;
  engine_options.max_sessions = std::max(64, o.sessions * 2);
  auto engine = Engine::Create(o.model, engine_options);
  if (!engine.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(engine.status().message()).c_str());
    return 1;
  }

  const int64_t rss_start = ResidentBytes();
  const auto begin = SoakClock::now();
  const auto end = begin + std::chrono::duration_cast<SoakClock::duration>(std::chrono::duration<double>(o.seconds));
  const auto half_time = begin + (end - begin) / 2;
  Totals totals;
  std::vector<std::thread> workers;
  for (int w = 0; w < o.sessions; ++w) {
    workers.emplace_back(SessionLoop, std::ref(**engine), std::cref(*questions), std::cref(*tools), std::cref(o), w, end,
                         std::ref(totals));
  }
  while (totals.warm_workers.load() < o.sessions && SoakClock::now() < half_time) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double warmup_seconds = std::chrono::duration<double>(SoakClock::now() - begin).count();
  const int64_t rss_warm = ResidentBytes();
  // Resident memory every 5 s until the end, to tell a plateau from a leak.
  std::vector<double> rss_mib = {rss_warm / 1048576.0};
  while (SoakClock::now() < end) {
    std::this_thread::sleep_until(std::min(end, SoakClock::now() + std::chrono::seconds(5)));
    rss_mib.push_back(ResidentBytes() / 1048576.0);
  }
  for (std::thread& t : workers) t.join();
  const double elapsed = std::chrono::duration<double>(SoakClock::now() - begin).count();
  const int64_t rss_end = ResidentBytes();
  const EngineStats stats = (*engine)->stats();
  const double growth = rss_warm > 0 ? static_cast<double>(rss_end - rss_warm) / static_cast<double>(rss_warm) : 0;

  int errors = 0;
  for (const auto& [kind, count] : totals.errors) errors += count;
  const bool memory_ok = growth <= o.max_growth;
  const bool kv_ok = stats.kv_used_tokens == 0 && stats.sessions == 0;
  const bool ok = errors == 0 && memory_ok && kv_ok && totals.completed > 0;
  const double p50 = Percentile(totals.latencies_ms, 50), p99 = Percentile(totals.latencies_ms, 99);
  if (o.json) {
    nlohmann::json j = {{"seconds", elapsed},
                        {"sessions", o.sessions},
                        {"completed_tasks", totals.completed},
                        {"cancelled_on_purpose", totals.cancelled_on_purpose},
                        {"tool_calls", totals.tool_calls},
                        {"generated_tokens", totals.generated_tokens},
                        {"errors", totals.errors},
                        {"p50_ms", p50},
                        {"p99_ms", p99},
                        {"rss_start_bytes", rss_start},
                        {"warmup_seconds", warmup_seconds},
                        {"rss_after_warmup_bytes", rss_warm},
                        {"rss_end_bytes", rss_end},
                        {"rss_mib_every_5s_after_warmup", rss_mib},
                        {"rss_growth_after_warmup", growth},
                        {"kv_used_tokens_at_end", stats.kv_used_tokens},
                        {"ok", ok}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("soak: %.1f s, %d sessions, %d tasks completed (%d cancelled on purpose), %d tool calls, %ld tokens\n",
                elapsed, o.sessions, totals.completed, totals.cancelled_on_purpose, totals.tool_calls,
                totals.generated_tokens);
    std::printf("latency: p50 %.0f ms, p99 %.0f ms\n", p50, p99);
    std::printf("errors: %d", errors);
    for (const auto& [kind, count] : totals.errors) {
      std::printf("; %s x%d (first: %s)", kind.c_str(), count, totals.first_error[kind].c_str());
    }
    std::printf("\nresident memory: start %.1f MiB, after %.1f s warm-up %.1f MiB, end %.1f MiB (%+.2f%% after warm-up, "
                "limit %+.0f%%)\n",
                rss_start / 1048576.0, warmup_seconds, rss_warm / 1048576.0, rss_end / 1048576.0, 100 * growth,
                100 * o.max_growth);
    std::printf("resident memory every 5 s after warm-up (MiB):");
    for (double m : rss_mib) std::printf(" %.0f", m);
    std::printf("\nkv at the end: %lld tokens in use, %d sessions open\n", static_cast<long long>(stats.kv_used_tokens),
                stats.sessions);
    std::printf("soak: %s\n", ok ? "PASS" : "FAIL");
  }
  return ok ? 0 : 1;
}

}  // namespace hetero::bench
