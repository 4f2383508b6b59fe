#include "src/runtime/rope.h"

#include <cmath>

namespace hetero {

std::vector<double> RopeInverseFrequencies(int rope_dim, double base, double linear_factor,
                                           const std::vector<float>& freq_factors) {
  const int half = rope_dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    double f = std::pow(base, -2.0 * i / rope_dim) / linear_factor;
    if (!freq_factors.empty()) f /= freq_factors[i];
    inv_freq[i] = f;
  }
  return inv_freq;
}

}  // namespace hetero
