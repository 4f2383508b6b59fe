// hetero-bench --prefix-sharing: N sessions with one long system prompt (a bit over 600
// tokens), each asking its own question, created one after another and kept alive, on an
// engine with prefix sharing off and then on (all stages on the CPU). For each setting:
// the prompt tokens each later session encodes, its time to first token, and the KV the
// sessions hold together at the end. Runs repeat (-r) and report medians; the two
// settings alternate so the machine's drift touches both alike.
#include "examples/prefix_bench.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/agentic_bench.h"
#include "hetero/engine.h"
#include "hetero/model.h"
#include "nlohmann/json.hpp"

namespace hetero::bench {
namespace {

std::string SystemPrompt() {
  std::string s = "You are the support assistant of the Harbor Street library. Follow these rules.\n";
  for (int i = 1; i <= 24; ++i) {
    absl::StrAppend(&s, "Rule ", i, ": questions about section ", 100 + 7 * i,
                    " of the handbook get a short answer that cites the section number.\n");
  }
  return s;
}

struct RunFigures {
  std::vector<double> later_ttft_ms;     // sessions 2..N
  std::vector<double> later_encoded;     // prompt tokens encoded by sessions 2..N
  double first_ttft_ms = 0;
  int prompt_tokens = 0;
  int64_t kv_used_tokens = 0;            // all sessions alive
  int64_t kv_shared_tokens = 0;
  std::vector<std::string> answers;
};

absl::StatusOr<RunFigures> RunOnce(const PrefixBenchOptions& o, bool share) {
  EngineOptions e;
  e.threads = o.threads;
  e.scheduler = "all-cpu";
  e.share_kv_prefixes = share;
  e.max_sessions = std::max(64, o.sessions);
  e.kv_capacity_tokens = (o.sessions + 1) * 1024;
  auto engine = Engine::Create(o.model, e);
  if (!engine.ok()) return engine.status();
  RunFigures f;
  std::vector<std::unique_ptr<Session>> sessions;
  RunOptions r;
  r.max_tokens = o.max_tokens;
  for (int i = 0; i < o.sessions; ++i) {
    auto s = (*engine)->NewSession(SystemPrompt());
    if (!s.ok()) return s.status();
    auto result = (*s)->Run(absl::StrCat("Which section does rule ", 1 + (i * 5) % 24, " cover?"), r);
    if (!result.ok()) return result.status();
    const TaskReport& rep = result->report;
    if (i == 0) {
      f.first_ttft_ms = rep.time_to_first_token_ms;
      f.prompt_tokens = rep.prompt_tokens;
    } else {
      f.later_ttft_ms.push_back(rep.time_to_first_token_ms);
      f.later_encoded.push_back(rep.stages.front().tokens_in);
    }
    f.answers.push_back(result->text);
    sessions.push_back(std::move(*s));
  }
  const EngineStats stats = (*engine)->stats();
  f.kv_used_tokens = stats.kv_used_tokens;
  f.kv_shared_tokens = stats.kv_shared_tokens;
  return f;
}

double Median(std::vector<double> v) { return v.empty() ? 0 : Percentile(std::move(v), 50); }

}  // namespace

int RunPrefixBench(const PrefixBenchOptions& o) {
  if (o.sessions < 2) {
    std::fprintf(stderr, "error: --prefix-sharing needs at least 2 sessions\n");
    return 1;
  }
  auto path = ResolveModelPath(o.model);
  auto model = path.ok() ? Model::Load(*path) : path.status();
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  const ModelConfig& c = (*model)->config();
  const double kv_bytes_per_token = 2.0 * c.n_layers * c.n_kv_heads * c.head_dim * sizeof(float);
  struct Setting {
    bool share = false;
    std::vector<double> ttft, encoded, first_ttft, used, shared;
    std::vector<std::string> answers;
    int prompt_tokens = 0;
  } settings[2];
  settings[1].share = true;
  for (int rep = 0; rep < std::max(1, o.repetitions); ++rep) {
    for (Setting& s : settings) {
      absl::StatusOr<RunFigures> f = RunOnce(o, s.share);
      if (!f.ok()) {
        std::fprintf(stderr, "error: %s\n", std::string(f.status().message()).c_str());
        return 1;
      }
      s.ttft.push_back(Median(f->later_ttft_ms));
      s.encoded.push_back(Median(f->later_encoded));
      s.first_ttft.push_back(f->first_ttft_ms);
      s.used.push_back(static_cast<double>(f->kv_used_tokens));
      s.shared.push_back(static_cast<double>(f->kv_shared_tokens));
      s.answers = f->answers;
      s.prompt_tokens = f->prompt_tokens;
    }
  }
  const bool same_answers = settings[0].answers == settings[1].answers;
  if (o.json) {
    nlohmann::json out;
    out["sessions"] = o.sessions;
    out["prompt_tokens"] = settings[0].prompt_tokens;
    out["same_answers"] = same_answers;
    for (const Setting& s : settings) {
      nlohmann::json j;
      j["later_sessions_encoded_tokens"] = Median(s.encoded);
      j["later_sessions_ttft_ms"] = Median(s.ttft);
      j["first_session_ttft_ms"] = Median(s.first_ttft);
      j["kv_used_tokens"] = Median(s.used);
      j["kv_used_mib"] = Median(s.used) * kv_bytes_per_token / (1 << 20);
      j["kv_shared_tokens"] = Median(s.shared);
      out[s.share ? "sharing" : "no_sharing"] = j;
    }
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("%d sessions, one system prompt (first prompt %d tokens), %d-token answers, %d thread(s), "
                "medians of %d runs\n",
                o.sessions, settings[0].prompt_tokens, o.max_tokens, o.threads, std::max(1, o.repetitions));
    std::printf("%-12s %18s %18s %18s %22s\n", "sharing", "encoded (2..N)", "TTFT 2..N (ms)", "TTFT first (ms)",
                "KV held (tokens, MiB)");
    for (const Setting& s : settings) {
      std::printf("%-12s %18.0f %18.1f %18.1f %13.0f %8.1f\n", s.share ? "on" : "off", Median(s.encoded),
                  Median(s.ttft), Median(s.first_ttft), Median(s.used),
                  Median(s.used) * kv_bytes_per_token / (1 << 20));
    }
    std::printf("answers %s with and without sharing\n", same_answers ? "identical" : "DIFFER");
    for (size_t i = 0; i < settings[0].answers.size() && !same_answers; ++i) {
      if (settings[0].answers[i] == settings[1].answers[i]) continue;
      std::printf("  session %zu: off \"%s\"\n             on  \"%s\"\n", i + 1, settings[0].answers[i].c_str(),
                  settings[1].answers[i].c_str());
    }
  }
  return same_answers ? 0 : 1;
}

}  // namespace hetero::bench
