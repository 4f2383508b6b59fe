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
#include "hetero/sampling.h"

namespace hetero {

// The index std::max_element returns (the first of the largest; a NaN never wins unless it
// is the first element; 0 for no logits), in two passes a compiler vectorises: at a 262144-
// token vocabulary std::max_element's one dependent chain was 9% of a decode step.
int32_t GreedyToken(absl::Span<const float> logits);

// `logits`' log-softmax at `chosen`, in float64, and the `top_k` largest entries (ties:
// lower id first).
TokenLogprob LogProbabilities(absl::Span<const float> logits, int32_t chosen, int top_k);

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
  struct Candidate {
    float logit;
    int32_t id;
    double p;
  };
  std::vector<Candidate> candidates_;  // scratch
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_SAMPLER_H_
