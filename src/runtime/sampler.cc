#include "src/runtime/sampler.h"

#include <algorithm>
#include <cmath>

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

int32_t Sampler::Sample(absl::Span<float> logits, absl::Span<const int32_t> history) {
  ApplyPenalties(logits, history);
  if (params_.temperature == 0.0f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates sorted by logit (descending; lower id first on ties, for determinism).
  candidates_.clear();
  candidates_.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) candidates_.emplace_back(logits[i], static_cast<int32_t>(i));
  auto by_logit = [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; };
  size_t n = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    n = params_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + n, candidates_.end(), by_logit);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  // Probabilities at the sampling temperature.
  const double max_logit = candidates_[0].first;
  std::vector<double> probs(n);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    probs[i] = std::exp((candidates_[i].first - max_logit) / params_.temperature);
    total += probs[i];
  }
  // min-p relative to the top token, then top-p over what is left.
  size_t keep = n;
  if (params_.min_p > 0.0f) {
    const double floor = params_.min_p * probs[0];
    keep = 1;
    while (keep < n && probs[keep] >= floor) ++keep;
  }
  if (params_.top_p < 1.0f) {
    double kept_total = 0.0;
    for (size_t i = 0; i < keep; ++i) kept_total += probs[i];
    double mass = 0.0;
    size_t cut = 0;
    while (cut < keep) {
      mass += probs[cut++];
      if (mass >= params_.top_p * kept_total) break;
    }
    keep = std::max<size_t>(cut, 1);
  }
  total = 0.0;
  for (size_t i = 0; i < keep; ++i) total += probs[i];
  double r = Uniform() * total;
  for (size_t i = 0; i < keep; ++i) {
    r -= probs[i];
    if (r < 0.0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace hetero
