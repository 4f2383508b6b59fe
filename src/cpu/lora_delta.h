// LoRA on the CPU: the low-rank term an adapter adds to a matrix product (src/runtime/lora.h).
#ifndef HETERO_CPU_LORA_DELTA_H_
#define HETERO_CPU_LORA_DELTA_H_

#include "src/runtime/lora.h"

namespace hetero {

// y[r] += scale * m.alpha_over_rank * B (A x[r]) for each of `rows` rows: x rows of m.inputs
// floats, y rows of m.outputs floats. Rows run in parallel on the current thread pool.
void AddLoraDelta(const LoraMatrix& m, float scale, const float* x, int rows, float* y);

}  // namespace hetero

#endif  // HETERO_CPU_LORA_DELTA_H_
