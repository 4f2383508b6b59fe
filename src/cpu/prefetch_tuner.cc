#include "src/cpu/prefetch_tuner.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/cpu/weight_prefetch.h"
#include "src/runtime/log_internal.h"

namespace hetero::internal {

PrefetchTuner::PrefetchTuner(Options options)
    : options_(std::move(options)), distance_(options_.initial), chosen_(options_.initial) {
  if (options_.candidates.empty()) options_.candidates = {options_.initial};
  options_.probe_passes = std::max(options_.probe_passes, 1);
  options_.settled_blocks = std::max(options_.settled_blocks, 1);
  options_.block_bytes = std::max<uint64_t>(options_.block_bytes, 1);
  StartProbe();
}

void PrefetchTuner::StartProbe() {
  probing_ = true;
  block_ = 0;
  rates_.assign(options_.candidates.size(), {});
  distance_ = ProbeCandidate();
}

uint32_t PrefetchTuner::ProbeCandidate() const {
  const size_t n = options_.candidates.size();
  const size_t pass = static_cast<size_t>(block_) / n;
  return options_.candidates[(static_cast<size_t>(block_) + pass) % n];
}

uint32_t PrefetchTuner::Record(uint64_t bytes, uint64_t nanoseconds) {
  block_read_ += bytes;
  block_nanoseconds_ += nanoseconds;
  if (block_read_ < options_.block_bytes) return distance_;
  const double rate = static_cast<double>(block_read_) / static_cast<double>(std::max<uint64_t>(block_nanoseconds_, 1));
  block_read_ = block_nanoseconds_ = 0;
  if (!probing_) {
    if (++block_ >= options_.settled_blocks) StartProbe();
    return distance_;
  }
  const auto at = std::find(options_.candidates.begin(), options_.candidates.end(), distance_);
  rates_[static_cast<size_t>(at - options_.candidates.begin())].push_back(rate);
  ++block_;
  if (block_ >= static_cast<int>(options_.candidates.size()) * options_.probe_passes) {
    FinishProbe();
  } else {
    distance_ = ProbeCandidate();
  }
  return distance_;
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
  distance_ = chosen_;
  probing_ = false;
  block_ = 0;
  ++probes_finished_;
}

// The process's tuner, fed by every CPU backend's decode (the distance is a property of the
// machine, not of one model). HETERO_PREFETCH_BYTES=N pins the distance and turns it off.
std::atomic<uint32_t> weight_prefetch_bytes{8192};

namespace {

struct ProcessTuner {
  std::mutex mu;
  PrefetchTuner tuner{PrefetchTuner::Options{}};
  bool pinned = false;

  ProcessTuner() {
    const char* env = std::getenv("HETERO_PREFETCH_BYTES");
    if (env == nullptr || *env == '\0') {
      weight_prefetch_bytes.store(tuner.distance(), std::memory_order_relaxed);
      return;
    }
    uint32_t bytes = 0;
    const char* end = env + std::strlen(env);
    const auto [ptr, ec] = std::from_chars(env, end, bytes);
    if (ec != std::errc() || ptr != end || bytes > (1u << 20)) {
      Log(LogLevel::kWarning, absl::StrCat("HETERO_PREFETCH_BYTES='", env,
                                           "' is not a byte count from 0 to 1048576; the distance is tuned instead"));
      weight_prefetch_bytes.store(tuner.distance(), std::memory_order_relaxed);
      return;
    }
    pinned = true;
    weight_prefetch_bytes.store(bytes, std::memory_order_relaxed);
  }
};

ProcessTuner& Tuner() {
  static ProcessTuner* tuner = new ProcessTuner;  // never destroyed: used until exit
  return *tuner;
}

}  // namespace

void RecordWeightRead(uint64_t bytes, uint64_t nanoseconds) {
  ProcessTuner& t = Tuner();
  if (t.pinned) return;
  std::lock_guard<std::mutex> lock(t.mu);
  const int probes = t.tuner.probes_finished();
  // Stored only when it changes: the kernels on every core read this line in every loop.
  const uint32_t distance = t.tuner.Record(bytes, nanoseconds);
  if (distance != weight_prefetch_bytes.load(std::memory_order_relaxed)) {
    weight_prefetch_bytes.store(distance, std::memory_order_relaxed);
  }
  if (t.tuner.probes_finished() != probes) {
    std::string rates;
    for (size_t i = 0; i < t.tuner.candidates().size(); ++i) {
      absl::StrAppend(&rates, i == 0 ? "" : ", ", t.tuner.candidates()[i], ": ", absl::StrFormat("%.3f", t.tuner.probe_rates()[i]));
    }
    Log(LogLevel::kDebug, absl::StrCat("weight prefetch: ", t.tuner.chosen(), " bytes ahead (decode's median read rate at each distance, relative to the probe's mean: ",
                                       rates, ")"));
  }
}

void InitWeightPrefetch() { Tuner(); }

}  // namespace hetero::internal
