// AVX2 gated activations (activation_kernels.h) for CPUs without AVX-512. This file alone is
// compiled with -mavx2 -mfma; SiluMul and GeluTanhMul check the CPU first.
#include <immintrin.h>

#include "src/cpu/activation_kernels.h"
#include "src/cpu/avx2_math.h"

namespace hetero::internal {
namespace {

// Applies gate = f(gate) * up over 8 lanes at a time, the tail masked (so every element goes
// through the same arithmetic wherever it lies).
template <typename F>
inline void GatedMap(float* gate, const float* up, size_t count, F activation) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(activation(g), _mm256_loadu_ps(up + i)));
  }
  if (i < count) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count - i)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 g = _mm256_maskload_ps(gate + i, m);
    _mm256_maskstore_ps(gate + i, m, _mm256_mul_ps(activation(g), _mm256_maskload_ps(up + i, m)));
  }
}

}  // namespace

void SiluMulAvx2(float* gate, const float* up, size_t count) {
  GatedMap(gate, up, count, [](__m256 g) { return _mm256_mul_ps(g, Sigmoid8(g)); });
}

void GeluTanhMulAvx2(float* gate, const float* up, size_t count) {
  GatedMap(gate, up, count, [](__m256 g) {
    const __m256 k = _mm256_set1_ps(2.0f * 0.7978845608028654f);  // 2 sqrt(2/pi)
    const __m256 cubic = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), g), _mm256_mul_ps(g, g), g);
    return _mm256_mul_ps(g, Sigmoid8(_mm256_mul_ps(k, cubic)));
  });
}

}  // namespace hetero::internal
