// Float64 references and shared checks for the quantized matmul tests.
#ifndef HETERO_TESTS_SUPPORT_QUANT_REFERENCE_H_
#define HETERO_TESTS_SUPPORT_QUANT_REFERENCE_H_

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "src/cpu/quant_matmul.h"

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

// A row's outputs do not depend on which other rows share its batch: `rows` random
// activation rows through QuantMatmul together, then each alone (the one-row kernels of a
// decode step against the batched ones of a prompt), bit for bit.
inline void ExpectBatchedRowsEqualRowsAlone(const QuantizedWeights& w, int rows, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(rows) * w.k);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  QuantizedActivations batch;
  batch.Quantize(x.data(), rows, w.k, w.k);
  std::vector<float> y(static_cast<size_t>(rows) * w.n);
  QuantMatmul(w, batch, y.data(), w.n);
  for (int m = 0; m < rows; ++m) {
    QuantizedActivations alone;
    alone.Quantize(x.data() + static_cast<size_t>(m) * w.k, 1, w.k, w.k);
    std::vector<float> y1(w.n);
    QuantMatmul(w, alone, y1.data(), w.n);
    for (int j = 0; j < w.n; ++j) ASSERT_EQ(y[static_cast<size_t>(m) * w.n + j], y1[j]) << "row " << m << " output " << j;
  }
}

}  // namespace hetero::testing

#endif  // HETERO_TESTS_SUPPORT_QUANT_REFERENCE_H_
