// The built-in placement of a mixture-of-experts model's routed experts within a GPU
// memory budget (include/hetero/scheduler.h).
#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hetero/scheduler.h"

namespace hetero {
namespace {

std::string MiB(uint64_t bytes) { return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20)); }

absl::Status CheckFacts(const ExpertPlacementFacts& facts) {
  for (const ExpertLayerFacts& l : facts.layers) {
    if (l.experts < 1 || l.used < 1 || l.used > l.experts) {
      return absl::InvalidArgumentError(absl::StrCat("expert placement: layer ", l.layer, " has ", l.used, " of ",
                                                     l.experts, " experts per token"));
    }
    if (!l.usage.empty() && l.usage.size() != static_cast<size_t>(l.experts)) {
      return absl::InvalidArgumentError(absl::StrCat("expert placement: layer ", l.layer, " has usage for ",
                                                     l.usage.size(), " experts, not ", l.experts));
    }
    for (double u : l.usage) {
      if (!(u >= 0)) return absl::InvalidArgumentError(absl::StrCat("expert placement: layer ", l.layer, " has a negative or NaN usage"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint64_t> ResidentExpertBytes(const ExpertPlacementFacts& facts, const ExpertPlacement& placement) {
  if (placement.on_gpu.size() != facts.layers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("expert placement names ", placement.on_gpu.size(),
                                                   " layers; the model has ", facts.layers.size(),
                                                   " mixture-of-experts layers"));
  }
  uint64_t bytes = 0;
  for (size_t i = 0; i < facts.layers.size(); ++i) {
    const ExpertLayerFacts& l = facts.layers[i];
    if (placement.on_gpu[i].size() != static_cast<size_t>(l.experts)) {
      return absl::InvalidArgumentError(absl::StrCat("expert placement names ", placement.on_gpu[i].size(),
                                                     " experts in layer ", l.layer, ", which has ", l.experts));
    }
    bytes += static_cast<uint64_t>(std::count(placement.on_gpu[i].begin(), placement.on_gpu[i].end(), true)) *
             l.bytes_per_expert;
  }
  return bytes;
}

absl::StatusOr<ExpertPlacement> PlaceExpertsWithinBudget(const ExpertPlacementFacts& facts) {
  if (absl::Status s = CheckFacts(facts); !s.ok()) return s;
  if (facts.fixed_bytes > facts.budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the GPU memory budget (", MiB(facts.budget_bytes), ") is smaller than what ", DeviceName(facts.gpu),
        " must hold besides the routed experts: the other weights, the KV cache and scratch (",
        MiB(facts.fixed_bytes), "); raise the budget, lower kv_capacity_tokens, or run on the cpu"));
  }
  struct Candidate {
    size_t layer;  // index in facts.layers
    int expert;
    double value;  // expected evaluations per token per byte held
  };
  std::vector<Candidate> candidates;
  uint64_t all_bytes = 0;
  int total = 0;
  ExpertPlacement placement;
  for (size_t i = 0; i < facts.layers.size(); ++i) {
    const ExpertLayerFacts& l = facts.layers[i];
    placement.on_gpu.emplace_back(l.experts, false);
    const double usage_sum = l.usage.empty() ? 0 : std::accumulate(l.usage.begin(), l.usage.end(), 0.0);
    for (int e = 0; e < l.experts; ++e) {
      const double share = usage_sum > 0 ? l.usage[e] / usage_sum : 1.0 / l.experts;
      const double bytes = static_cast<double>(std::max<uint64_t>(l.bytes_per_expert, 1));
      candidates.push_back({i, e, share * l.used / bytes});
    }
    all_bytes += static_cast<uint64_t>(l.experts) * l.bytes_per_expert;
    total += l.experts;
  }
  const uint64_t room = facts.budget_bytes - facts.fixed_bytes;
  if (all_bytes <= room) {
    for (std::vector<bool>& layer : placement.on_gpu) layer.assign(layer.size(), true);
    placement.reason = absl::StrCat("every expert on ", DeviceName(facts.gpu), ": ", MiB(facts.fixed_bytes + all_bytes),
                                    " within the budget of ", MiB(facts.budget_bytes));
    return placement;
  }
  // Most valuable first; equal values in layer order, then expert order.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.value > b.value; });
  uint64_t used_bytes = 0;
  int resident = 0;
  for (const Candidate& c : candidates) {
    const uint64_t bytes = facts.layers[c.layer].bytes_per_expert;
    if (used_bytes + bytes > room) continue;  // a smaller expert of another layer may still fit
    used_bytes += bytes;
    placement.on_gpu[c.layer][c.expert] = true;
    ++resident;
  }
  if (resident == 0) {
    placement.reason = absl::StrCat("routed experts on the cpu, the rest on ", DeviceName(facts.gpu), ": ",
                                    MiB(facts.fixed_bytes), " of the budget of ", MiB(facts.budget_bytes),
                                    " leaves no room for an expert");
  } else {
    placement.reason = absl::StrCat(resident, " of ", total, " routed experts on ", DeviceName(facts.gpu),
                                    " (the most used per byte), the rest on the cpu: ",
                                    MiB(facts.fixed_bytes + used_bytes), " within the budget of ",
                                    MiB(facts.budget_bytes));
  }
  return placement;
}

}  // namespace hetero
