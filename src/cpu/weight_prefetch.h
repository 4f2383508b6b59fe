// Software prefetch for the integer kernels' weight streams. In decode every weight byte
// comes from memory once per token; the hardware prefetchers start over at every page and
// every new matrix (a mixture of experts reads dozens of small ones a step), so a kernel
// asks for the lines a fixed distance ahead of the ones it multiplies.
//
// Used where it measured faster: the Q8_0 kernel (AMD EPYC Zen 4, 2 threads, tg128
// interleaved: granite-3.0-1b-a400m-shaped MoE 39.4 -> 42.7 tok/s median of three, the
// default model's shape 113 -> 125). The 4-bit kernels read half the bytes for the same
// arithmetic, and there the extra instructions cost more than they saved (Q4_1 238 -> 201).
#ifndef HETERO_CPU_WEIGHT_PREFETCH_H_
#define HETERO_CPU_WEIGHT_PREFETCH_H_

#include <cstddef>
#include <cstdint>

namespace hetero::internal {

inline constexpr size_t kWeightPrefetchBytes = 4096;

// The `bytes` that follow `at` + kWeightPrefetchBytes, one request per cache line. Lines
// past the end of the weights are harmless: a prefetch never faults.
inline void PrefetchWeights(const uint8_t* at, size_t bytes) {
  for (size_t line = 0; line < bytes; line += 64) __builtin_prefetch(at + kWeightPrefetchBytes + line, 0, 3);
}

}  // namespace hetero::internal

#endif  // HETERO_CPU_WEIGHT_PREFETCH_H_
