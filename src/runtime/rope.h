// Rotary position embedding's frequencies, the model-level math both backends rotate with:
// the angle per position of each rotated pair, with the model's base, linear scaling and
// per-pair factors (rope_freqs.weight) folded in.
#ifndef HETERO_RUNTIME_ROPE_H_
#define HETERO_RUNTIME_ROPE_H_

#include <vector>

#include "hetero/model.h"

namespace hetero {

// rope_dim / 2 values, base^(-2i / rope_dim) / linear_factor / freq_factors[i];
// `freq_factors` empty or rope_dim / 2 long.
std::vector<double> RopeInverseFrequencies(int rope_dim, double base, double linear_factor,
                                           const std::vector<float>& freq_factors = {});

}  // namespace hetero

#endif  // HETERO_RUNTIME_ROPE_H_
