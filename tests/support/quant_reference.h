// Float64 references and shared checks for the quantized matmul tests.
#ifndef HETERO_TESTS_SUPPORT_QUANT_REFERENCE_H_
#define HETERO_TESTS_SUPPORT_QUANT_REFERENCE_H_

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "src/cpu/quant_matmul.h"
#include "src/cpu/thread_pool.h"
#include "src/runtime/dequantize.h"

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
// `with_remainder`: the same with decode's two int8 passes (QuantizeWithRemainder).
inline void QuantizeForTest(QuantizedActivations& a, const float* x, int rows, int k, bool with_remainder) {
  if (with_remainder) {
    a.QuantizeWithRemainder(x, rows, k, k);
  } else {
    a.Quantize(x, rows, k, k);
  }
}

inline void ExpectBatchedRowsEqualRowsAlone(const QuantizedWeights& w, int rows, std::mt19937& rng,
                                            bool with_remainder = false) {
  std::vector<float> x(static_cast<size_t>(rows) * w.k);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  QuantizedActivations batch;
  QuantizeForTest(batch, x.data(), rows, w.k, with_remainder);
  std::vector<float> y(static_cast<size_t>(rows) * w.n);
  QuantMatmul(w, batch, y.data(), w.n);
  for (int m = 0; m < rows; ++m) {
    QuantizedActivations alone;
    QuantizeForTest(alone, x.data() + static_cast<size_t>(m) * w.k, 1, w.k, with_remainder);
    std::vector<float> y1(w.n);
    QuantMatmul(w, alone, y1.data(), w.n);
    for (int j = 0; j < w.n; ++j) ASSERT_EQ(y[static_cast<size_t>(m) * w.n + j], y1[j]) << "row " << m << " output " << j;
  }
}

// Decode's two int8 passes (QuantizeWithRemainder): `rows` random rows, each the int8 blocks
// of x and of what they leave, through QuantMatmul, against float64 products of the
// weights (`blocks`, dequantized):
//  - with the activations as the two passes hold them (d1 q1 + d2 q2): only float
//    rounding may separate them, 1e-5 of the sum of |w x| (the one-pass tests' bound);
//  - with x itself: the second pass leaves each value within half its step, d2 / 2
//    <= max|x| / (127 * 254 * 2) of its block, so the error is at most the sum of
//    |w| d2 / 2 (plus the same float slack), about 250 times less than one int8 pass.
// Then the same weights' outputs for rows + 1 sequences together equal each alone.
inline void ExpectRemainderPassHolds(const QuantizedWeights& w, const std::vector<uint8_t>& blocks, int rows,
                                     std::mt19937& rng) {
  std::vector<float> wf(static_cast<size_t>(w.n) * w.k);
  ASSERT_TRUE(Dequantize(w.type, blocks, absl::MakeSpan(wf)).ok());
  const int k = w.k, nb = w.k / 32;
  // Three threads, so work items (and their sums of row pairs) run concurrently.
  ThreadPool pool(3);
  const ScopedThreadPool use_pool(&pool);
  std::vector<float> x(static_cast<size_t>(rows) * k);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  QuantizedActivations a;
  a.QuantizeWithRemainder(x.data(), rows, k, k);
  ASSERT_TRUE(a.with_remainder);
  ASSERT_EQ(a.rows, 2 * rows);
  ASSERT_EQ(a.output_rows(), rows);
  std::vector<float> y(static_cast<size_t>(rows) * w.n, std::nanf(""));
  QuantMatmul(w, a, y.data(), w.n);
  double worst_exact = 0, worst_bound_use = 0, worst_x = 0;
  for (int m = 0; m < rows; ++m) {
    const size_t first = 2 * static_cast<size_t>(m), rest = first + 1;
    for (int j = 0; j < w.n; ++j) {
      double held = 0, exact = 0, magnitude = 0, bound = 0;
      for (int i = 0; i < k; ++i) {
        const double wv = wf[static_cast<size_t>(j) * k + i];
        const double d1 = a.d[first * nb + i / 32], d2 = a.d[rest * nb + i / 32];
        held += wv * (d1 * a.q[first * k + i] + d2 * a.q[rest * k + i]);
        exact += wv * x[static_cast<size_t>(m) * k + i];
        magnitude += std::fabs(wv * x[static_cast<size_t>(m) * k + i]);
        bound += std::fabs(wv) * d2 / 2;
      }
      const double got = y[static_cast<size_t>(m) * w.n + j];
      ASSERT_FALSE(std::isnan(got)) << "row " << m << " output " << j << " not written";
      worst_exact = std::max(worst_exact, std::fabs(got - held) / magnitude);
      worst_bound_use = std::max(worst_bound_use, std::fabs(got - exact) / (bound + 1e-5 * magnitude));
      worst_x = std::max(worst_x, std::fabs(got - exact) / magnitude);
    }
  }
  EXPECT_LT(worst_exact, 1e-5) << "vs float64 of the two passes' activations";
  EXPECT_LE(worst_bound_use, 1.0) << "vs float64 of x: past half the second pass's step";
  EXPECT_LT(worst_x, 1e-4) << "vs float64 of x, as a fraction of the sum of |w x|";
  ExpectBatchedRowsEqualRowsAlone(w, rows + 1, rng, /*with_remainder=*/true);
}

}  // namespace hetero::testing

#endif  // HETERO_TESTS_SUPPORT_QUANT_REFERENCE_H_
