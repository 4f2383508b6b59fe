// Float64 references for the quantized matmul tests.
#ifndef HETERO_TESTS_SUPPORT_QUANT_REFERENCE_H_
#define HETERO_TESTS_SUPPORT_QUANT_REFERENCE_H_

#include <cmath>
#include <utility>
#include <vector>

namespace hetero::testing {

// Row j of the dequantized weights (n x k, row-major) times activation row m in float64, and
// the sum of the products' magnitudes (the scale errors are measured against: the result
// itself can cancel).
inline std::pair<double, double> ReferenceDot(const std::vector<float>& wf, const std::vector<float>& x, int k, int j,
                                              int m) {
  double ref = 0, magnitude = 0;
  for (int i = 0; i < k; ++i) {
    const double p = static_cast<double>(wf[static_cast<size_t>(j) * k + i]) * x[static_cast<size_t>(m) * k + i];
    ref += p;
    magnitude += std::fabs(p);
  }
  return {ref, magnitude};
}

}  // namespace hetero::testing

#endif  // HETERO_TESTS_SUPPORT_QUANT_REFERENCE_H_
