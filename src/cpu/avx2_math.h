// Vector math for the AVX2 kernels. Include only from files compiled with -mavx2 -mfma
// (attention_avx2.cc, activations_avx2.cc): elsewhere the intrinsics do not compile, and the
// library's other files must run on any x86-64 CPU. The same polynomial as avx512_math.h.
#ifndef HETERO_CPU_AVX2_MATH_H_
#define HETERO_CPU_AVX2_MATH_H_

#include <immintrin.h>

namespace hetero::internal {

// x = n ln2 + r with |r| <= ln2 / 2: returns e^r by its degree-6 Taylor polynomial
// (relative error below 2e-7) and sets n.
inline __m256 ExpOfRemainder8(__m256 x, __m256& n) {
  n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  return _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
}

// e^x for x in [-87, 88.7]: e^r times 2^n as 2^(n/2) 2^(n - n/2), built in the exponent
// bits (2^128 alone is not a float).
inline __m256 ExpInRange8(__m256 x) {
  __m256 n;
  const __m256 p = ExpOfRemainder8(x, n);
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// e^x for the x <= 0 of a softmax after subtracting the maximum; below -87 gives 0 (as e^x
// underflows there anyway); NaN stays NaN. With n >= -126 here 2^n is one normal float:
// e^r 2^n in one multiply, the same bits as ExpInRange8's two (both exact, or one rounding
// of the same product where it is subnormal).
inline __m256 ExpNonPositive8(__m256 x) {
  const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
  __m256 n;
  const __m256 p = ExpOfRemainder8(_mm256_max_ps(_mm256_set1_ps(-87.0f), x), n);
  const __m256 scale =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, scale));
}

// 1 / (1 + e^-x), as avx512_math.h's Sigmoid: e^-x clamped below at e^-87 and 0 where
// -x > 88.7.
inline __m256 Sigmoid8(__m256 x) {
  const __m256 neg = _mm256_sub_ps(_mm256_setzero_ps(), x);
  const __m256 underflow = _mm256_cmp_ps(neg, _mm256_set1_ps(88.7f), _CMP_GT_OQ);
  const __m256 clamped = _mm256_min_ps(_mm256_max_ps(neg, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.7f));
  const __m256 s = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), ExpInRange8(clamped)));
  return _mm256_andnot_ps(underflow, s);
}

}  // namespace hetero::internal

#endif  // HETERO_CPU_AVX2_MATH_H_
