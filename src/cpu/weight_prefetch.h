// Software prefetch for the integer kernels' weight streams. In decode every weight byte
// comes from memory once per token; the hardware prefetchers start over at every page and
// every new matrix (a mixture of experts reads dozens of small ones a step), so a kernel
// asks for the lines a fixed distance ahead of the ones it multiplies.
//
// Measured on an AMD EPYC (Zen 4, 2 threads), tg128 interleaved, medians of three:
//  - the block formats (one unit's share per run of 32 columns): granite-3.0-1b-a400m-shaped
//    MoE in Q4_K_M 64 -> 88 tok/s, the default model's shape in Q4_K_M 189 -> 204 and in
//    Q6_K 132 -> 169; where the weights stall the kernel most (Q6_K's bit masks) the most;
//  - Q8_0 (one tile per block of 32): the MoE shape 39.4 -> 42.7, the default model's 113 -> 125;
//  - not the Q4_0/Q4_1 kernel: a whole tile per block there measured slower (Q4_1 238 -> 201),
//    the default model in Q4_1 already reads at the machine's bandwidth.
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
