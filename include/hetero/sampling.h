// How the next token is chosen.
#ifndef HETERO_SAMPLING_H_
#define HETERO_SAMPLING_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace hetero {

// Penalties first, then top-k, min-p and top-p, then the temperature draw. Seeded: the same
// logits, history, parameters and seed give the same tokens on every machine.
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

// A generated token's log-probability under the model's distribution at that step: the
// log-softmax of the logits, before penalties, temperature, truncation or a constraint's
// mask, so it says how likely the model found the token, not how the sampler drew it.
struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  // The most likely tokens at that step with theirs, most likely first (ties: lower id).
  std::vector<std::pair<int32_t, float>> top;
};

// At most this many alternatives per token (OpenAI's top_logprobs limit).
inline constexpr int kMaxTopLogprobs = 20;

}  // namespace hetero

#endif  // HETERO_SAMPLING_H_
