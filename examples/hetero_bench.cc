// hetero-bench: prompt-processing and generation throughput, like llama-bench.
//
//   hetero-bench [-m MODEL] [-p 512] [-n 128] [-t THREADS] [--device cpu] [-r REPS]
//                [--precision auto|f32|bf16] [--bf16-min-rows R] [--json]
//
// pp<P>: one Prefill of P random tokens into an empty sequence. tg<N>: N single-token
// Decode steps from an empty sequence (end-of-sequence tokens are not special here).
// Each is repeated REPS times (default 5); the median and the spread (min..max) are shown.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "hetero/model.h"
#include "hetero/version.h"
#include "src/cpu/cpu_backend.h"

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

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, device = "cpu", precision_name = "auto";
  int prompt = 512, gen = 128, threads = hetero::DefaultCpuThreads(), reps = 5, bf16_min_rows = 0;
  bool json = false;
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
    } else if (a == "-t") {
      next_int(threads);
    } else if (a == "-r") {
      next_int(reps);
    } else if (a == "--device") {
      if (i + 1 >= argc) return Fail("--device needs cpu or gpu");
      device = argv[++i];
    } else if (a == "--precision") {
      if (i + 1 >= argc) return Fail("--precision needs auto, f32 or bf16");
      precision_name = argv[++i];
    } else if (a == "--bf16-min-rows") {
      next_int(bf16_min_rows);
    } else if (a == "--json") {
      json = true;
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: hetero-bench [-m MODEL] [-p 512] [-n 128] [-t THREADS] [--device cpu] [-r REPS] "
                  "[--precision auto|f32|bf16] [--bf16-min-rows R] [--json]\n");
      return 0;
    } else {
      return Fail("unknown option '" + a + "' (try --help)");
    }
  }
  if (device != "cpu") return Fail("device '" + device + "' is not available in this build (cpu only)");
  if (threads < 1 || reps < 1) return Fail("-t and -r must be at least 1");
  hetero::CpuBackendOptions options;
  options.threads = threads;
  if (bf16_min_rows > 0) options.bf16_min_rows = bf16_min_rows;
  if (precision_name == "f32") {
    options.precision = hetero::CpuPrecision::kF32;
  } else if (precision_name == "bf16") {
    options.precision = hetero::CpuPrecision::kBf16;
  } else if (precision_name != "auto") {
    return Fail("unknown precision '" + precision_name + "'");
  }
  auto resolved = hetero::ResolveModelPath(model_path);
  if (!resolved.ok()) return Fail(std::string(resolved.status().message()));
  auto model = hetero::Model::Load(*resolved);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  options.kv_capacity_tokens = std::max(prompt, gen) + 16;
  auto backend = hetero::CpuBackend::Create(**model, options);
  if (!backend.ok()) return Fail(std::string(backend.status().message()));
  hetero::CpuBackend& b = **backend;
  const int V = b.vocab_size();
  std::mt19937 rng(42);
  std::vector<float> logits(V);

  std::vector<double> pp_rates, tg_rates;
  for (int rep = 0; rep < reps + 1; ++rep) {  // the first repetition warms up and is dropped
    if (prompt > 0) {
      std::vector<int32_t> tokens(prompt);
      for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % V);
      auto seq = b.NewSequence();
      if (!seq.ok()) return Fail(std::string(seq.status().message()));
      const auto start = std::chrono::steady_clock::now();
      absl::Status s = b.Prefill(*seq, tokens, absl::MakeSpan(logits));
      const auto end = std::chrono::steady_clock::now();
      if (!s.ok()) return Fail(std::string(s.message()));
      if (rep > 0) pp_rates.push_back(prompt / Seconds(start, end));
      b.FreeSequence(*seq);
    }
    if (gen > 0) {
      auto seq = b.NewSequence();
      if (!seq.ok()) return Fail(std::string(seq.status().message()));
      const hetero::SequenceId id = *seq;
      int32_t token = static_cast<int32_t>(rng() % V);
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < gen; ++i) {
        absl::Status s = b.Decode({&id, 1}, {&token, 1}, absl::MakeSpan(logits));
        if (!s.ok()) return Fail(std::string(s.message()));
        token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
      const auto end = std::chrono::steady_clock::now();
      if (rep > 0) tg_rates.push_back(gen / Seconds(start, end));
      b.FreeSequence(id);
    }
  }
  const hetero::BackendInfo& info = b.info();
  nlohmann::json out;
  out["model"] = *resolved;
  out["backend"] = info.name;
  out["weights"] = info.weight_format;
  out["threads"] = threads;
  out["precision"] = precision_name;
  out["repetitions"] = reps;
  if (!json) {
    std::printf("hetero-bench %s | %s | %s | %s\n", hetero::VersionString(), resolved->c_str(), info.name.c_str(),
                info.weight_format.c_str());
    std::printf("%-8s %12s %12s %12s\n", "test", "tok/s", "min", "max");
  }
  auto report = [&](const std::string& name, const std::vector<double>& rates) {
    if (rates.empty()) return;
    const Stats s = Summarize(rates);
    out[name] = {{"tok_s_median", s.median}, {"tok_s_min", s.min}, {"tok_s_max", s.max}, {"runs", rates}};
    if (!json) std::printf("%-8s %12.2f %12.2f %12.2f\n", name.c_str(), s.median, s.min, s.max);
  };
  report(absl::StrFormat("pp%d", prompt), pp_rates);
  report(absl::StrFormat("tg%d", gen), tg_rates);
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
