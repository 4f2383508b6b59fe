#include "src/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace hetero {

absl::StatusOr<Sampler> Sampler::Create(const SamplingParams& p) {
  auto bad = [](absl::string_view name, double value, absl::string_view range) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: ", name, " is ", value, ", expected ", range));
  };
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) return bad("temperature", p.temperature, ">= 0");
  if (p.top_k < 0) return bad("top_k", p.top_k, ">= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return bad("top_p", p.top_p, "in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p < 1.0f)) return bad("min_p", p.min_p, "in [0, 1)");
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return bad("repetition_penalty", p.repetition_penalty, "> 0");
  }
  if (!std::isfinite(p.frequency_penalty)) return bad("frequency_penalty", p.frequency_penalty, "finite");
  if (!std::isfinite(p.presence_penalty)) return bad("presence_penalty", p.presence_penalty, "finite");
  if (p.penalty_window < 0) return bad("penalty_window", p.penalty_window, ">= 0");
  return Sampler(p);
}

TokenLogprob LogProbabilities(absl::Span<const float> logits, int32_t chosen, int top_k) {
  double max = -std::numeric_limits<double>::infinity();
  for (float l : logits) max = std::max(max, static_cast<double>(l));
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double log_total = max + std::log(sum);
  // The k best as a small heap whose top is the worst kept: one pass, no vocabulary-sized
  // scratch.
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::vector<int32_t> best;
  const size_t k = static_cast<size_t>(std::clamp(top_k, 0, static_cast<int>(logits.size())));
  best.reserve(k + 1);
  for (int32_t id = 0; k > 0 && id < static_cast<int32_t>(logits.size()); ++id) {
    if (best.size() < k) {
      best.push_back(id);
      std::push_heap(best.begin(), best.end(), better);
    } else if (better(id, best.front())) {
      std::pop_heap(best.begin(), best.end(), better);
      best.back() = id;
      std::push_heap(best.begin(), best.end(), better);
    }
  }
  std::sort(best.begin(), best.end(), better);
  TokenLogprob out;
  out.token = chosen;
  out.logprob = static_cast<float>(static_cast<double>(logits[chosen]) - log_total);
  for (int32_t id : best) out.top.emplace_back(id, static_cast<float>(static_cast<double>(logits[id]) - log_total));
  return out;
}

double Sampler::Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

void Sampler::ApplyPenalties(absl::Span<float> logits, absl::Span<const int32_t> history) const {
  const bool any = params_.repetition_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
                   params_.presence_penalty != 0.0f;
  if (!any || params_.penalty_window == 0 || history.empty()) return;
  const size_t start = history.size() > static_cast<size_t>(params_.penalty_window)
                           ? history.size() - params_.penalty_window
                           : 0;
  absl::flat_hash_map<int32_t, int> counts;
  for (size_t i = start; i < history.size(); ++i) {
    if (history[i] >= 0 && static_cast<size_t>(history[i]) < logits.size()) ++counts[history[i]];
  }
  for (const auto& [token, count] : counts) {
    float& l = logits[token];
    if (params_.repetition_penalty != 1.0f) l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    l -= params_.frequency_penalty * static_cast<float>(count) + params_.presence_penalty;
  }
}

int32_t GreedyToken(absl::Span<const float> logits) {
  const size_t n = logits.size();
  const float* x = logits.data();
  if (n == 0 || std::isnan(x[0])) return 0;  // std::max_element keeps a first NaN
  // Sixteen running maxima (independent, so the loop vectorises), then the first index
  // holding the largest. Later NaNs never compare larger, as in std::max_element.
  constexpr size_t kLanes = 16;
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  float lane[kLanes];
  std::fill(lane, lane + kLanes, kLowest);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lane[j] = lane[j] < x[i + j] ? x[i + j] : lane[j];
  }
  float best = kLowest;
  for (size_t j = 0; j < kLanes; ++j) best = best < lane[j] ? lane[j] : best;
  for (; i < n; ++i) best = best < x[i] ? x[i] : best;
  for (size_t k = 0; k < n; ++k) {
    if (x[k] == best) return static_cast<int32_t>(k);
  }
  return 0;
}

int32_t Sampler::Sample(absl::Span<float> logits, absl::Span<const int32_t> history) {
  ApplyPenalties(logits, history);
  if (params_.temperature == 0.0f) return GreedyToken(logits);
  // Candidates: every token with a finite logit (constrained decoding masks with -inf).
  candidates_.clear();
  float max_logit = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!(logits[i] > -std::numeric_limits<float>::infinity())) continue;
    candidates_.push_back({logits[i], static_cast<int32_t>(i), 0.0});
    max_logit = std::max(max_logit, logits[i]);
  }
  if (candidates_.empty()) return GreedyToken(logits);
  // The order: descending logit, lower id first on ties (deterministic). Only as much of
  // it is sorted as the cut-offs and the draw need: sorting all 49k candidates of every
  // step cost more than a decode step.
  const auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
  };
  size_t sorted = 0;
  const auto sort_prefix = [&](size_t m) {
    m = std::min(m, candidates_.size());
    if (m <= sorted) return;
    m = std::min(candidates_.size(), std::max(m, 4 * sorted));  // grow geometrically
    if (m > candidates_.size() / 8) {
      std::sort(candidates_.begin(), candidates_.end(), by_logit);  // cheaper than a deep heap
      m = candidates_.size();
    } else {
      std::partial_sort(candidates_.begin(), candidates_.begin() + m, candidates_.end(), by_logit);
    }
    sorted = m;
  };
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < candidates_.size()) {
    sort_prefix(params_.top_k);
    candidates_.resize(params_.top_k);
    sorted = std::min(sorted, candidates_.size());
  }
  // Probabilities at the sampling temperature; min-p (relative to the top token, whose
  // probability is 1 here) drops the unlikely ones without needing the order.
  double total = 0.0;
  size_t kept = 0;
  for (Candidate& c : candidates_) {
    c.p = std::exp((static_cast<double>(c.logit) - max_logit) / params_.temperature);
    if (params_.min_p > 0.0f && c.p < params_.min_p) continue;
    candidates_[kept++] = c;
    total += c.p;
  }
  candidates_.resize(kept);
  sorted = std::min(sorted, kept);
  if (sorted > 0 && params_.min_p > 0.0f) sorted = 0;  // compaction may have broken the order
  size_t keep = kept;
  if (params_.top_p < 1.0f) {
    // The smallest most-likely prefix holding top_p of the mass.
    double mass = 0.0;
    size_t cut = 0;
    while (cut < keep) {
      if (cut == sorted) sort_prefix(std::max<size_t>(64, 2 * sorted));
      mass += candidates_[cut++].p;
      if (mass >= params_.top_p * total) break;
    }
    keep = std::max<size_t>(cut, 1);
    total = 0.0;
    for (size_t i = 0; i < keep; ++i) total += candidates_[i].p;
  }
  // The draw: any fixed order of the kept candidates gives the same distribution, so the
  // array's own (deterministic) order is used.
  double r = Uniform() * total;
  for (size_t i = 0; i < keep; ++i) {
    r -= candidates_[i].p;
    if (r < 0.0) return candidates_[i].id;
  }
  return candidates_[keep - 1].id;
}

}  // namespace hetero
