// Vector math for the AVX-512 kernels. Include only from files compiled with -mavx512f
// -mfma (attention_avx512.cc, activations_avx512.cc): elsewhere the intrinsics do not
// compile, and the library's other files must run on any x86-64 CPU.
#ifndef HETERO_CPU_AVX512_MATH_H_
#define HETERO_CPU_AVX512_MATH_H_

#include <immintrin.h>

namespace hetero::internal {

// e^x for x in [-87, 88.7]: x = n ln2 + r with |r| <= ln2 / 2, e^r by its degree-6 Taylor
// polynomial (relative error below 2e-7), then scaled by 2^n (scalef, so 2^128 times a
// value below 1 does not overflow on the way).
inline __m512 ExpInRange(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
  const __m512 ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// e^x for the x <= 0 of a softmax after subtracting the maximum; below -87 gives 0 (as e^x
// underflows there anyway).
inline __m512 ExpNonPositive(__m512 x) {
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~tiny), ExpInRange(x));
}

// 1 / (1 + e^-x): e^-x clamped below at e^-87, where the result is 1 in float anyway, and 0
// where -x > 88.7 (the true value is below 3e-39 there; 0 also makes g * sigmoid(g) give
// what the portable kernel's g / (1 + e^-g) gives: -0 for g = -FLT_MAX, NaN for -inf).
inline __m512 Sigmoid(__m512 x) {
  const __m512 neg = _mm512_sub_ps(_mm512_setzero_ps(), x);
  const __mmask16 underflow = _mm512_cmp_ps_mask(neg, _mm512_set1_ps(88.7f), _CMP_GT_OQ);
  const __m512 clamped = _mm512_min_ps(_mm512_max_ps(neg, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.7f));
  const __m512 s = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), ExpInRange(clamped)));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow), s);
}

}  // namespace hetero::internal

#endif  // HETERO_CPU_AVX512_MATH_H_
