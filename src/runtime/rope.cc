#include "src/runtime/rope.h"

#include <cmath>

namespace hetero {

std::vector<double> RopeInverseFrequencies(const ModelConfig& config, const std::vector<float>& freq_factors) {
  const int half = config.rope_dim / 2;
  std::vector<double> inv_freq(half);
  const double linear = config.rope_scaling == RopeScaling::kLinear ? config.rope_scaling_factor : 1.0;
  for (int i = 0; i < half; ++i) {
    double f = std::pow(static_cast<double>(config.rope_freq_base), -2.0 * i / config.rope_dim) / linear;
    if (!freq_factors.empty()) f /= freq_factors[i];
    inv_freq[i] = f;
  }
  return inv_freq;
}

}  // namespace hetero
