// AVX-512 gated activations (activation_kernels.h). This file alone is compiled with
// -mavx512f -mfma; SiluMul and GeluTanhMul check the CPU first.
#include <immintrin.h>

#include "src/cpu/activation_kernels.h"
#include "src/cpu/avx512_math.h"

namespace hetero::internal {
namespace {

// Applies gate = f(gate) * up over 16 lanes at a time, the tail masked (so every element
// goes through the same arithmetic wherever it lies).
template <typename F>
inline void GatedMap(float* gate, const float* up, size_t count, F activation) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(activation(g), _mm512_loadu_ps(up + i)));
  }
  if (i < count) {
    const __mmask16 m = static_cast<__mmask16>((1u << (count - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(activation(g), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

}  // namespace

void SiluMulAvx512(float* gate, const float* up, size_t count) {
  GatedMap(gate, up, count, [](__m512 g) { return _mm512_mul_ps(g, Sigmoid(g)); });
}

void GeluTanhMulAvx512(float* gate, const float* up, size_t count) {
  GatedMap(gate, up, count, [](__m512 g) {
    const __m512 k = _mm512_set1_ps(2.0f * 0.7978845608028654f);  // 2 sqrt(2/pi)
    const __m512 cubic = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), g), _mm512_mul_ps(g, g), g);
    return _mm512_mul_ps(g, Sigmoid(_mm512_mul_ps(k, cubic)));
  });
}

}  // namespace hetero::internal
