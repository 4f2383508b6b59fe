// Next-token sampling: greedy, or temperature with top-k, top-p and min-p, after
// repetition, frequency and presence penalties. Seeded and reproducible: the same logits,
// history, parameters and seed give the same tokens on every machine.
#ifndef HETERO_RUNTIME_SAMPLER_H_
#define HETERO_RUNTIME_SAMPLER_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace hetero {

struct SamplingParams {
  float temperature = 0.0f;          // 0: greedy (highest logit, lowest id on ties)
  int top_k = 0;                     // keep the k most likely tokens; 0: all
  float top_p = 1.0f;                // keep the smallest set with this probability mass
  float min_p = 0.0f;                // drop tokens below min_p x the top probability
  float repetition_penalty = 1.0f;   // > 1: divide positive (multiply negative) logits of seen tokens
  float frequency_penalty = 0.0f;    // subtract per occurrence in the window
  float presence_penalty = 0.0f;     // subtract once for any occurrence in the window
  int penalty_window = 64;           // most recent tokens the penalties look at
  uint64_t seed = 0;
};

class Sampler {
 public:
  // InvalidArgument naming the parameter when a value is out of range.
  static absl::StatusOr<Sampler> Create(const SamplingParams& params);

  // Picks the next token from `logits` (modified in place), given the tokens so far.
  int32_t Sample(absl::Span<float> logits, absl::Span<const int32_t> history);

  const SamplingParams& params() const { return params_; }

 private:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}
  void ApplyPenalties(absl::Span<float> logits, absl::Span<const int32_t> history) const;
  double Uniform();  // [0, 1) from the 64-bit generator, identical on every platform

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_SAMPLER_H_
