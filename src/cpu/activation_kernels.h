// The gated activations of the feed-forward blocks, as kernels: AVX-512 (activations_avx512.cc,
// built with AVX-512 flags, hence this header free of library headers), AVX2
// (activations_avx2.cc) and portable
// (cpu_ops.cc). SiluMul and GeluTanhMul (cpu_ops.h) pick one and split long arrays over the
// threads; each element's arithmetic depends only on the kernel, never on the split.
#ifndef HETERO_CPU_ACTIVATION_KERNELS_H_
#define HETERO_CPU_ACTIVATION_KERNELS_H_

#include <cstddef>

namespace hetero::internal {

// gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + e^-gate[i]) * up[i], i < count.
void SiluMulPortable(float* gate, const float* up, size_t count);
void SiluMulAvx512(float* gate, const float* up, size_t count);
void SiluMulAvx2(float* gate, const float* up, size_t count);
// gate[i] = gelu(gate[i]) * up[i], GELU in its tanh form
// 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), computed as the same function's
// g * sigmoid(2 sqrt(2/pi) (g + 0.044715 g^3)): for negative g, 1 + tanh cancels to 0
// (g = -6 gave 0 instead of -8.4e-11), the sigmoid keeps full relative precision.
void GeluTanhMulPortable(float* gate, const float* up, size_t count);
void GeluTanhMulAvx512(float* gate, const float* up, size_t count);
void GeluTanhMulAvx2(float* gate, const float* up, size_t count);

}  // namespace hetero::internal

#endif  // HETERO_CPU_ACTIVATION_KERNELS_H_
