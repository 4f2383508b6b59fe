// The weight formats the native kernels read beyond Q4_0/Q4_1/Q8_0 (Q5_0, Q5_1, IQ4_NL and
// the super-block formats Q2_K..Q6_K, IQ4_XS), seen uniformly: every run of 32 weights of
// a row is 32 unsigned codes, and every run of 16 has a scale and an offset, so that
//   w[i] = scale * Value(code[i]) + offset
// with Value(code) = code - bias, or the IQ4 grid level of the code. The portable kernel
// computes with exactly this; the packer regroups the codes for the AVX-512 kernels.
#ifndef HETERO_CPU_QUANT_BLOCKS_H_
#define HETERO_CPU_QUANT_BLOCKS_H_

#include <cstdint>
#include <vector>

#include "src/runtime/tensor_type.h"

namespace hetero::internal {

// Whether the formats of this file include `type` (the older three are not among them).
bool IsBlockFormat(TensorType type);
// Weights per block of the format (32, or 256 for a super-block).
int BlockColumns(TensorType type);
// Code bits the format stores (4, 5 or 6; Q2_K 2, Q3_K 3).
int CodeBits(TensorType type);
// What Value() subtracts from a code; -1 for the IQ4 grid.
int CodeBias(TensorType type);
inline bool UsesIq4Grid(TensorType type) { return type == TensorType::kIQ4_NL || type == TensorType::kIQ4_XS; }
int CodeValue(TensorType type, int code);

// Byte offsets of the fp16 fields (scales, minima) inside one block of a quantized type
// (Q4_0 .. IQ4_XS); empty for others. Tests and benchmarks set them to finite values.
std::vector<int> Fp16FieldOffsets(TensorType type);

// The 32 codes of weights [32 run, 32 run + 32) of a row.
void ExtractCodes(TensorType type, const uint8_t* row, int run, uint8_t* codes);
// Scale and offset of weights [16 half, 16 half + 16) of a row, computed in float as the
// format's definition does (so scale * value + offset is the dequantized weight).
void ExtractScaleOffset(TensorType type, const uint8_t* row, int half, float* scale, float* offset);

}  // namespace hetero::internal

#endif  // HETERO_CPU_QUANT_BLOCKS_H_
