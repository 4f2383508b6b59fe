#include "src/cpu/prefetch_tuner.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/cpu/quant_matmul.h"
#include "src/cpu/weight_prefetch.h"
#include "src/runtime/log_internal.h"

namespace hetero::internal {

PrefetchTuner::PrefetchTuner(Options options) : options_(std::move(options)), chosen_(options_.initial) {
  std::vector<uint32_t> unique;
  for (uint32_t c : options_.candidates) {
    if (std::find(unique.begin(), unique.end(), c) == unique.end()) unique.push_back(c);
  }
  if (std::find(unique.begin(), unique.end(), options_.initial) == unique.end()) unique.push_back(options_.initial);
  options_.candidates = std::move(unique);
  options_.probe_passes = std::clamp(options_.probe_passes, 1, 64);
  options_.settled_blocks = std::max(options_.settled_blocks, 1);
  options_.block_bytes = std::max<uint64_t>(options_.block_bytes, 1);
  StartProbe();
}

void PrefetchTuner::StartProbe() {
  probing_ = true;
  block_ = 0;
  rates_.assign(options_.candidates.size(), {});
}

size_t PrefetchTuner::ProbeIndex() const {
  const size_t n = options_.candidates.size();
  const size_t pass = static_cast<size_t>(block_) / n;
  return (static_cast<size_t>(block_) + pass) % n;
}

uint32_t PrefetchTuner::Record(uint64_t bytes, uint64_t nanoseconds) {
  block_read_ += bytes;
  block_nanoseconds_ += nanoseconds;
  if (block_read_ < options_.block_bytes) return distance();
  const double rate = static_cast<double>(block_read_) / static_cast<double>(std::max<uint64_t>(block_nanoseconds_, 1));
  block_read_ = block_nanoseconds_ = 0;
  if (!probing_) {
    if (++block_ >= options_.settled_blocks) StartProbe();
    return distance();
  }
  rates_[ProbeIndex()].push_back(rate);
  if (++block_ >= static_cast<int>(options_.candidates.size()) * options_.probe_passes) FinishProbe();
  return distance();
}

void PrefetchTuner::FinishProbe() {
  const size_t n = options_.candidates.size();
  // Each pass's rates relative to that pass's mean: pass p measured candidate i in block
  // p * n + (i - p) mod n, so rates_[i][p] all belong to pass p.
  std::vector<std::vector<double>> relative(n);
  for (int p = 0; p < options_.probe_passes; ++p) {
    double mean = 0;
    for (size_t i = 0; i < n; ++i) mean += rates_[i][static_cast<size_t>(p)];
    mean /= static_cast<double>(n);
    for (size_t i = 0; i < n; ++i) relative[i].push_back(mean > 0 ? rates_[i][static_cast<size_t>(p)] / mean : 1);
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t m = v.size();
    return m % 2 == 1 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
  };
  size_t best = 0;
  double best_rate = -1, incumbent_rate = -1;
  probe_rates_.clear();
  for (size_t i = 0; i < n; ++i) {
    const double r = median(relative[i]);
    probe_rates_.push_back(r);
    if (r > best_rate) best_rate = r, best = i;
    if (options_.candidates[i] == chosen_) incumbent_rate = r;
  }
  // The incumbent (the last choice, or the initial distance) stays unless clearly beaten:
  // rates this close are noise, and switching back and forth would only add probes' cost.
  if (incumbent_rate < 0 || best_rate > incumbent_rate * (1 + options_.keep_margin)) chosen_ = options_.candidates[best];
  probing_ = false;
  block_ = 0;
  ++probes_finished_;
}

// The process's tuner, fed by every CPU backend's decode (the distance is a property of the
// machine, not of one model). HETERO_PREFETCH_BYTES=N pins the distance and turns it off;
// so does a CPU without the AVX-512 kernels, the only ones that prefetch.
alignas(64) constinit std::atomic<uint32_t> weight_prefetch_bytes{8192};

namespace {

struct ProcessTuner {
  std::mutex mu;
  PrefetchTuner tuner{PrefetchTuner::Options{}};
  bool off = false;
  // Mirrors of the tuner's state, read without the lock by every product.
  std::atomic<bool> probing{true};
  std::atomic<uint32_t> probe_distance{0};
  std::atomic<uint32_t> chosen_distance{8192};
  std::atomic<uint64_t> settled_bytes{0};  // read while settled, not yet given to the tuner

  ProcessTuner() {
    Publish();
    const char* env = std::getenv("HETERO_PREFETCH_BYTES");
    if (std::strcmp(QuantMatmulKernelName(), "portable") == 0) {
      off = true;  // nothing reads the distance
    } else if (env != nullptr && *env != '\0') {
      uint32_t bytes = 0;
      const char* end = env + std::strlen(env);
      const auto [ptr, ec] = std::from_chars(env, end, bytes);
      if (ec != std::errc() || ptr != end || bytes > (1u << 20)) {
        Log(LogLevel::kWarning, absl::StrCat("HETERO_PREFETCH_BYTES='", env,
                                             "' is not a byte count from 0 to 1048576; the distance is tuned instead"));
      } else {
        off = true;
        weight_prefetch_bytes.store(bytes, std::memory_order_relaxed);
      }
    }
  }

  // After the tuner changed: the mirrors.
  void Publish() {
    probing.store(tuner.probing(), std::memory_order_relaxed);
    probe_distance.store(tuner.distance(), std::memory_order_relaxed);
    chosen_distance.store(tuner.chosen(), std::memory_order_relaxed);
  }

  // The line to log when a probe has just finished (built under the lock, logged after it).
  std::string ProbeSummary() const {
    std::string rates;
    for (size_t i = 0; i < tuner.candidates().size(); ++i) {
      absl::StrAppend(&rates, i == 0 ? "" : ", ", tuner.candidates()[i], ": ",
                      absl::StrFormat("%.3f", tuner.probe_rates()[i]));
    }
    return absl::StrCat("weight prefetch: ", tuner.chosen(),
                        " bytes ahead (decode's median read rate at each distance, relative to the probe's mean: ", rates,
                        ")");
  }
};

ProcessTuner& Tuner() {
  static ProcessTuner* tuner = new ProcessTuner;  // never destroyed: used until exit
  return *tuner;
}

void UseDistance(uint32_t distance) {
  // Stored only when it changes: the kernels on every core read this line in every loop.
  if (distance != weight_prefetch_bytes.load(std::memory_order_relaxed)) {
    weight_prefetch_bytes.store(distance, std::memory_order_relaxed);
  }
}

}  // namespace

WeightReadPlan PlanWeightRead(int rows) {
  ProcessTuner& t = Tuner();
  if (t.off) return WeightReadPlan::kUntimed;
  if (rows > kMemoryBoundRows) {
    UseDistance(t.chosen_distance.load(std::memory_order_relaxed));
    return WeightReadPlan::kUntimed;
  }
  if (t.probing.load(std::memory_order_relaxed)) {
    UseDistance(t.probe_distance.load(std::memory_order_relaxed));
    return WeightReadPlan::kTimed;
  }
  UseDistance(t.chosen_distance.load(std::memory_order_relaxed));
  return WeightReadPlan::kCounted;
}

void RecordWeightRead(uint64_t bytes, uint64_t nanoseconds) {
  ProcessTuner& t = Tuner();
  std::string finished;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    if (!t.tuner.probing()) return;  // another thread's loop ended the probe meanwhile
    const int probes = t.tuner.probes_finished();
    t.tuner.Record(bytes, nanoseconds);
    t.Publish();
    if (t.tuner.probes_finished() != probes) finished = t.ProbeSummary();
  }
  if (!finished.empty()) Log(LogLevel::kDebug, finished);
}

void CountWeightRead(uint64_t bytes) {
  ProcessTuner& t = Tuner();
  if (t.settled_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes < t.tuner.block_bytes()) return;
  std::lock_guard<std::mutex> lock(t.mu);
  const uint64_t counted = t.settled_bytes.exchange(0, std::memory_order_relaxed);
  if (t.tuner.probing() || counted == 0) return;
  t.tuner.Record(counted, 0);  // a settled block: only the bytes count
  t.Publish();
}

}  // namespace hetero::internal
