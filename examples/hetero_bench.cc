// hetero-bench: prompt-processing and generation throughput, like llama-bench.
//
//   hetero-bench [-m MODEL] [-p 512] [-n 128] [-t THREADS] [--device cpu|gpu] [-r REPS]
//                [--precision auto|int8|f32|bf16] [--bf16-min-rows R] [--batch 1,8,32] [--gpu-budget-mib MIB]
//                [--expert-usage FILE] [--json] [-v]
//   hetero-bench --transfer [-m MODEL]       host<->device bandwidth, and the KV swap (GPU)
//   hetero-bench --sessions N [-n TOKENS]     N concurrent sessions through the engine
//   hetero-bench --calibrate [-o PROFILE]     measure and write the scheduler's profile
//   hetero-bench --route DATASET.jsonl [--layers N|auto] [-t T] [-r R] [--json]   router accuracy, latency
//   hetero-bench --soak SECONDS [--sessions N] [-n TOKENS] [--json]   bounded soak (agent loop)
//   hetero-bench --prefix-sharing [--sessions N] [-n TOKENS] [-t T] [-r R] [--json]   shared system prompts
//   hetero-bench --agentic SUITE.jsonl [--policy NAME|all] [--limit N] [--json] [--plot FILE.svg]
//                                             tool-use tasks per scheduler policy: solved,
//                                             PPT, latency, joules per task, tokens per joule
//
// pp<P>: one Prefill of P random tokens into an empty sequence. tg<N>: N greedy decode
// steps from an empty sequence (end-of-sequence tokens are not special here); tg<N>_b<B>:
// B sequences of 8 tokens decoded together, aggregate tokens per second.
// Each is repeated REPS times (default 5); the median and the spread (min..max) are shown.
// --expert-usage FILE (mixtures of experts): the counts in FILE, where it exists, guide the
// expert placement under --gpu-budget-mib; afterwards FILE holds them plus this run's.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "examples/agentic_bench.h"
#include "examples/prefix_bench.h"
#include "examples/route_bench.h"
#include "examples/soak_bench.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "hetero/model.h"
#include "hetero/version.h"
#include "hetero/devices.h"
#include "hetero/engine.h"
#include "hetero/log.h"
#include "absl/strings/str_split.h"
#include "hetero/benchmark.h"
#include "hetero/transfer.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

struct Stats {
  double median, min, max;
};

Stats Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// N sessions through one engine, each generating `gen` tokens (end-of-generation
// ignored) after a short prompt; aggregate decode tokens/s against one session alone.
// Host<->device copy bandwidth: pinned and pageable host memory, a plain copy loop per
// size, then the transfer layer's KV swap of the model (hetero/benchmark.h).
int RunTransfer(const std::string& model_path_for_transfer, bool json) {
  auto measured = hetero::BenchmarkTransfers(model_path_for_transfer);
  if (!measured.ok()) return Fail(std::string(measured.status().message()));
  nlohmann::json rows = nlohmann::json::array();
  if (!json) std::printf("%-10s %-9s %12s %12s\n", "bytes", "host", "h2d GB/s", "d2h GB/s");
  for (const hetero::TransferBandwidth& row : measured->plain_copies) {
    rows.push_back({{"bytes", row.bytes}, {"pinned", row.pinned}, {"h2d_gb_s", row.host_to_device_gb_per_s},
                    {"d2h_gb_s", row.device_to_host_gb_per_s}});
    if (!json) {
      std::printf("%-10llu %-9s %12.2f %12.2f\n", static_cast<unsigned long long>(row.bytes),
                  row.pinned ? "pinned" : "pageable", row.host_to_device_gb_per_s, row.device_to_host_gb_per_s);
    }
  }
  if (measured->kv_swap_measured) {
    const hetero::TransferBenchmarkResult& m = *measured;
    if (json) {
      nlohmann::json j;
      j["plain_loop"] = rows;
      j["kv_swap"] = {{"tokens", m.kv_tokens}, {"bytes", m.kv_bytes}, {"pinned", m.kv_pinned},
                      {"swap_in_gb_s", m.kv_swap_in_gb_per_s}, {"swap_out_gb_s", m.kv_swap_out_gb_per_s},
                      {"pool_allocations", m.pool.allocations}, {"pool_reuses", m.pool.reuses},
                      {"pool_high_water_bytes", m.pool.high_water_bytes}};
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("KV swap of %d tokens (%.1f MB, %s host memory): in %.2f GB/s, out %.2f GB/s (median of 5); "
                  "pool: %llu allocations, %llu reuses\n",
                  m.kv_tokens, m.kv_bytes / 1e6, m.kv_pinned ? "pinned" : "pageable", m.kv_swap_in_gb_per_s,
                  m.kv_swap_out_gb_per_s, static_cast<unsigned long long>(m.pool.allocations),
                  static_cast<unsigned long long>(m.pool.reuses));
    }
    return 0;
  }
  if (json) std::printf("%s\n", rows.dump(2).c_str());
  return 0;
}

int RunSessions(const std::string& model_path, int sessions, int gen, int threads, int reps, bool json) {
  hetero::EngineOptions options;
  options.threads = threads;
  options.max_sessions = sessions;
  options.max_batch = sessions;
  options.scheduler = "all-cpu";
  auto engine = hetero::Engine::Create(model_path, options);
  if (!engine.ok()) return Fail(std::string(engine.status().message()));
  auto measure = [&](int n) -> absl::StatusOr<double> {
    std::vector<std::unique_ptr<hetero::Session>> all;
    for (int i = 0; i < n; ++i) {
      auto s = (*engine)->NewSession();
      if (!s.ok()) return s.status();
      all.push_back(std::move(*s));
    }
    hetero::RunOptions run;
    run.max_tokens = gen;
    run.ignore_end_of_generation = true;
    std::vector<absl::StatusOr<hetero::RunResult>> results(n, absl::UnknownError("not run"));
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (int i = 0; i < n; ++i) {
      workers.emplace_back([&, i] { results[i] = all[i]->Run("Tell me story number " + std::to_string(i) + ".", run); });
    }
    for (auto& w : workers) w.join();
    (void)start;
    // Aggregate decode throughput: the sum over sessions of each one's generated tokens
    // over its own Generate stage (they run concurrently), prompts excluded.
    double rate = 0;
    for (auto& r : results) {
      if (!r.ok()) return r.status();
      for (const hetero::StageReport& st : r->report.stages) {
        if (st.stage == hetero::Stage::kGenerate && st.end_ms > st.start_ms) {
          rate += st.tokens_out / ((st.end_ms - st.start_ms) / 1e3);
        }
      }
    }
    return rate;
  };
  std::vector<double> single, many;
  for (int rep = 0; rep < reps + 1; ++rep) {
    auto a = measure(1);
    auto b = measure(sessions);
    if (!a.ok()) return Fail(std::string(a.status().message()));
    if (!b.ok()) return Fail(std::string(b.status().message()));
    if (rep > 0) {
      single.push_back(*a);
      many.push_back(*b);
    }
  }
  const Stats s1 = Summarize(single), sn = Summarize(many);
  if (json) {
    nlohmann::json out;
    out["sessions"] = sessions;
    out["tokens_per_session"] = gen;
    out["single_tok_s"] = s1.median;
    out["aggregate_tok_s"] = sn.median;
    out["ratio"] = sn.median / s1.median;
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("1 session: %.1f tok/s (%.1f..%.1f); %d sessions: %.1f tok/s aggregate (%.1f..%.1f); ratio %.2fx\n",
                s1.median, s1.min, s1.max, sessions, sn.median, sn.min, sn.max, sn.median / s1.median);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, device = "cpu", precision_name = "auto";
  int prompt = 512, gen = 128, depth = 0, threads = std::max(1, hetero::QueryDevices().cpu.usable_cpus), reps = 5, bf16_min_rows = 0;
  bool json = false;
  bool calibrate = false;
  bool gen_given = false;
  int sessions = 0;
  bool transfer = false;
  std::vector<int> batches;
  std::string profile_path = "hetero-profile.json";
  hetero::bench::AgenticOptions agentic;
  int soak_seconds = 0;
  uint64_t gpu_budget_bytes = 0;
  std::string expert_usage_path;
  std::string route_dataset;
  int route_layers = 0;
  bool prefix_sharing = false;
  bool threads_given = false, reps_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next_int = [&](int& out) {
      if (i + 1 >= argc || !absl::SimpleAtoi(argv[++i], &out) || out < 0) {
        std::exit(Fail("option " + a + " needs a non-negative integer"));
      }
    };
    if (a == "-m") {
      if (i + 1 >= argc) return Fail("-m needs a path");
      model_path = argv[++i];
    } else if (a == "-p") {
      next_int(prompt);
    } else if (a == "-n") {
      next_int(gen);
      gen_given = true;
    } else if (a == "-d") {
      next_int(depth);
    } else if (a == "-t") {
      next_int(threads);
      threads_given = true;
    } else if (a == "-r") {
      next_int(reps);
      reps_given = true;
    } else if (a == "--device") {
      if (i + 1 >= argc) return Fail("--device needs cpu or gpu");
      device = argv[++i];
    } else if (a == "--precision") {
      if (i + 1 >= argc) return Fail("--precision needs auto, int8, f32 or bf16");
      precision_name = argv[++i];
    } else if (a == "--gpu-budget-mib") {
      int mib = 0;
      next_int(mib);
      if (mib < 1) return Fail("--gpu-budget-mib needs a size of at least 1 MiB");
      gpu_budget_bytes = static_cast<uint64_t>(mib) << 20;
    } else if (a == "--expert-usage") {
      if (i + 1 >= argc) return Fail("--expert-usage needs a path");
      expert_usage_path = argv[++i];
    } else if (a == "--sessions") {
      next_int(sessions);
    } else if (a == "--calibrate") {
      calibrate = true;
    } else if (a == "-o") {
      if (i + 1 >= argc) return Fail("-o needs a path");
      profile_path = argv[++i];
    } else if (a == "--bf16-min-rows") {
      next_int(bf16_min_rows);
    } else if (a == "-v" || a == "--verbose") {
      hetero::SetLogCallback(hetero::LogToStderr, hetero::LogLevel::kDebug);
    } else if (a == "--json") {
      json = true;
      agentic.json = true;
    } else if (a == "--agentic" || a == "--policy" || a == "--plot" || a == "--facts" || a == "--router") {
      if (i + 1 >= argc) return Fail(a + " needs a value");
      std::string& field = a == "--agentic" ? agentic.suite : a == "--policy" ? agentic.policy
                         : a == "--plot"    ? agentic.plot : a == "--router" ? agentic.router : agentic.facts;
      field = argv[++i];
    } else if (a == "--transfer") {
      transfer = true;
    } else if (a == "--batch") {
      if (i + 1 >= argc) return Fail("--batch needs a list such as 1,8,32");
      for (absl::string_view part : absl::StrSplit(argv[++i], ',')) {
        int b = 0;
        if (!absl::SimpleAtoi(part, &b) || b < 1) return Fail("--batch needs positive integers, got '" + std::string(part) + "'");
        batches.push_back(b);
      }
    } else if (a == "--route") {
      if (i + 1 >= argc) return Fail("--route needs a dataset such as tests/data/intents.jsonl");
      route_dataset = argv[++i];
    } else if (a == "--layers") {
      if (i + 1 < argc && std::string(argv[i + 1]) == "auto") {
        route_layers = -1;  // chosen by leave-one-out on the exemplars
        ++i;
      } else {
        next_int(route_layers);
      }
    } else if (a == "--prefix-sharing") {
      prefix_sharing = true;
    } else if (a == "--soak") {
      next_int(soak_seconds);
      if (soak_seconds < 1) return Fail("--soak needs a duration of at least 1 second");
    } else if (a == "--limit") {
      next_int(agentic.limit);
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: hetero-bench [-m MODEL] [-p 512] [-n 128] [-d DEPTH] [-t THREADS] [--device cpu|gpu] [-r REPS] "
                  "[--precision auto|int8|f32|bf16] [--bf16-min-rows R] [--batch 1,8,32] [--gpu-budget-mib MIB] [--expert-usage FILE] [--json] [-v|--verbose (debug log)]\n"
                  "       hetero-bench --transfer [--json]   (host<->device bandwidth; needs a GPU)\n"
                  "       hetero-bench --sessions N [-n TOKENS] | --calibrate [-o PROFILE]\n"
                  "       hetero-bench --agentic SUITE.jsonl [--policy NAME|all] [--limit N] [--router INTENTS.jsonl [--layers N|auto]] [--json] [--plot FILE.svg]\n"
                  "       hetero-bench --route DATASET.jsonl [--layers N|auto] [-t THREADS] [-r REPS] [--json]   (semantic router)\n"
                  "       hetero-bench --soak SECONDS [--sessions N] [-n TOKENS] [--json]   (bounded soak test)\n"
                  "       hetero-bench --prefix-sharing [--sessions N] [-n TOKENS] [-t T] [-r REPS] [--json]   (shared system prompts)\n");
      return 0;
    } else {
      return Fail("unknown option '" + a + "' (try --help)");
    }
  }
  const bool other_mode = !route_dataset.empty() || prefix_sharing || soak_seconds > 0 || !agentic.suite.empty() ||
                          transfer || sessions > 0 || calibrate;
  if (!expert_usage_path.empty() && other_mode) {
    return Fail("--expert-usage goes with the throughput benchmark alone");
  }
  // A calibration's rates stand for the CPU in general, not deep in a context.
  if (depth > 0 && other_mode) return Fail("-d goes with the throughput benchmark alone");
  if (!route_dataset.empty()) {
    hetero::bench::RouteBenchOptions route;
    route.dataset = route_dataset;
    route.model = model_path;
    route.threads = threads_given ? threads : 1;
    if (reps_given) route.repetitions = reps;
    route.layers = route_layers;
    route.json = json;
    return hetero::bench::RunRouteBench(route);
  }
  if (prefix_sharing) {
    hetero::bench::PrefixBenchOptions prefix;
    prefix.model = model_path;
    if (sessions > 0) prefix.sessions = sessions;
    if (gen_given) prefix.max_tokens = gen;
    prefix.threads = threads_given ? threads : 1;
    if (reps_given) prefix.repetitions = reps;
    prefix.json = json;
    return hetero::bench::RunPrefixBench(prefix);
  }
  if (soak_seconds > 0) {
    hetero::bench::SoakOptions soak;
    soak.model = model_path;
    soak.seconds = soak_seconds;
    if (sessions > 0) soak.sessions = sessions;
    soak.threads = threads;
    if (gen_given) soak.max_tokens = gen;
    soak.json = json;
    return hetero::bench::RunSoak(soak);
  }
  if (!agentic.suite.empty()) {
    agentic.model = model_path;
    agentic.router_layers = route_layers;
    agentic.threads = threads;
    if (gen_given) agentic.max_tokens = gen;
    return hetero::bench::RunAgenticBench(agentic);
  }
  if (transfer) return RunTransfer(model_path, json);
  if (device != "cpu" && device != "gpu") return Fail("unknown device '" + device + "' (cpu or gpu)");
  if (device == "gpu" && (sessions > 0 || calibrate)) return Fail("--sessions and --calibrate run on the cpu");
  if (gpu_budget_bytes > 0 && device != "gpu") return Fail("--gpu-budget-mib needs --device gpu");
  if (device == "gpu" && !hetero::QueryDevices().cuda.available) {
    return Fail("device 'gpu' is not available: " + hetero::QueryDevices().cuda.notice);
  }
  if (sessions > 0 && !calibrate) return RunSessions(model_path, sessions, gen, threads, reps, json);
  if (threads < 1 || reps < 1) return Fail("-t and -r must be at least 1");
  hetero::BackendBenchmarkOptions options;
  options.device = device == "gpu" ? hetero::Device::kGpu : hetero::Device::kCpu;
  options.threads = threads;
  options.bf16_min_rows = bf16_min_rows;
  options.cpu_precision = precision_name;
  options.gpu_memory_budget_bytes = gpu_budget_bytes;
  if (!expert_usage_path.empty()) {
    auto usage = hetero::ReadExpertUsageFile(expert_usage_path);
    if (usage.ok()) {
      options.expert_usage = *std::move(usage);
    } else if (std::error_code error;
               !absl::IsNotFound(usage.status()) || std::filesystem::exists(expert_usage_path, error)) {
      return Fail(std::string(usage.status().message()));
    }  // else the first run: this one's counts start the file
  }
  options.prompt_tokens = prompt;
  options.generate_tokens = gen;
  options.depth_tokens = depth;
  options.batches = batches;
  options.repetitions = reps;
  // The calibration's batched decode runs at 8 sequences (the scheduler's sharing model).
  if (calibrate && std::find(options.batches.begin(), options.batches.end(), 8) == options.batches.end()) {
    options.batches.push_back(8);
  }
  auto resolved = hetero::ResolveModelPath(model_path);
  if (!resolved.ok()) return Fail(std::string(resolved.status().message()));
  auto measured = hetero::BenchmarkBackend(*resolved, options);
  if (!measured.ok()) return Fail(std::string(measured.status().message()));
  const std::vector<double>& pp_rates = measured->prefill_tokens_per_s;
  const std::vector<double>& tg_rates = measured->decode_tokens_per_s;
  struct Info {
    std::string name, weight_format;
  } info{measured->backend, measured->weight_format};

  nlohmann::json out;
  out["model"] = *resolved;
  out["backend"] = info.name;
  out["weights"] = info.weight_format;
  out["weight_bytes"] = measured->weight_bytes;
  if (gpu_budget_bytes > 0) out["gpu_budget_bytes"] = gpu_budget_bytes;
  out["threads"] = threads;
  out["precision"] = precision_name;
  out["repetitions"] = reps;
  if (!json) {
    std::printf("hetero-bench %s | %s | %s | %s\n", hetero::VersionString(), resolved->c_str(), info.name.c_str(),
                info.weight_format.c_str());
    std::printf("%-14s %12s %12s %12s\n", "test", "tok/s", "min", "max");
  }
  auto report = [&](const std::string& name, const std::vector<double>& rates) {
    if (rates.empty()) return;
    const Stats s = Summarize(rates);
    out[name] = {{"tok_s_median", s.median}, {"tok_s_min", s.min}, {"tok_s_max", s.max}, {"runs", rates}};
    if (!json) std::printf("%-14s %12.2f %12.2f %12.2f\n", name.c_str(), s.median, s.min, s.max);
  };
  // At a depth, llama-bench's "pp512 @ d4096" is named pp512_d4096 (a JSON key without spaces).
  const std::string at_depth = depth > 0 ? absl::StrFormat("_d%d", depth) : "";
  const std::string tg_name = absl::StrFormat("tg%d", gen) + at_depth;
  if (depth > 0) out["depth"] = depth;
  report(absl::StrFormat("pp%d", prompt) + at_depth, pp_rates);
  report(tg_name, tg_rates);
  out["decode_weight_bytes"] = measured->decode_weight_bytes;
  if (!tg_rates.empty()) {
    // Decode's weight reads per second: set against the memory's bandwidth, how near decode
    // is to its bound.
    const double gb_per_s = Summarize(tg_rates).median * static_cast<double>(measured->decode_weight_bytes) / 1e9;
    out[tg_name]["weight_gb_s_median"] = gb_per_s;
    if (!json) {
      std::printf("decode reads %.1f MB of weights per token (file bytes%s): %.1f GB/s at %s's median\n",
                  static_cast<double>(measured->decode_weight_bytes) / 1e6,
                  depth > 0 ? "; the KV cache's reads come on top" : "", gb_per_s, tg_name.c_str());
    }
  }
  for (const auto& [batch, rates] : measured->batched_decode_tokens_per_s) {
    if (std::find(batches.begin(), batches.end(), batch) != batches.end()) {
      report(absl::StrFormat("tg%d_b%d", gen, batch), rates);
    }
  }
  if (!expert_usage_path.empty()) {
    auto total = hetero::AddExpertUsage(options.expert_usage, measured->expert_usage);
    if (!total.ok()) return Fail(std::string(total.status().message()));
    uint64_t evaluations = 0;
    for (const hetero::ExpertUsage::Layer& l : total->layers) {
      for (uint64_t n : l.evaluations) evaluations += n;
    }
    if (absl::Status s = hetero::WriteExpertUsageFile(*total, expert_usage_path); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    out["expert_usage"] = {{"path", expert_usage_path}, {"layers", total->layers.size()}, {"evaluations", evaluations}};
    if (!json) {
      std::printf("expert usage: %llu evaluations over %zu layers in %s\n",
                  static_cast<unsigned long long>(evaluations), total->layers.size(), expert_usage_path.c_str());
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  if (calibrate) {
    double batched = 0;
    for (const auto& [batch, rates] : measured->batched_decode_tokens_per_s) {
      if (batch == 8 && !rates.empty()) batched = Summarize(rates).median;
    }
    hetero::Calibration c;
    c.machine = info.name;
    const std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    c.date = date;
    hetero::DeviceCosts cpu = hetero::DefaultCosts(hetero::Device::kCpu);  // power: no meter yet, defaults
    cpu.prefill_tokens_per_s = pp_rates.empty() ? cpu.prefill_tokens_per_s : Summarize(pp_rates).median;
    cpu.decode_tokens_per_s = tg_rates.empty() ? cpu.decode_tokens_per_s : Summarize(tg_rates).median;
    cpu.batched_decode_tokens_per_s = batched;
    c.devices.emplace_back(hetero::Device::kCpu, cpu);
    absl::Status saved = hetero::SaveCalibration(c, profile_path);
    if (!saved.ok()) return Fail(std::string(saved.message()));
    std::fprintf(stderr, "calibration written to %s (cpu: prefill %.0f, decode %.0f, batched-8 decode %.0f tok/s; power "
                         "figures are defaults until energy meters exist; no GPU measured)\n",
                 profile_path.c_str(), cpu.prefill_tokens_per_s, cpu.decode_tokens_per_s, batched);
  }
  return 0;
}
