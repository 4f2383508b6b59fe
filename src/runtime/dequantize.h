// Reference dequantization of every common GGUF weight format to float32, bit-exact to
// ggml's definitions (checked against the gguf Python package, see tests/data/README.md).
// These are the scalar definitions; fast kernels live in the backends and are tested
// against these.
#ifndef HETERO_RUNTIME_DEQUANTIZE_H_
#define HETERO_RUNTIME_DEQUANTIZE_H_

#include <cstdint>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/runtime/gguf.h"
#include "src/runtime/tensor_type.h"

namespace hetero {

// The 16 levels IQ4_NL and IQ4_XS indices select (part of the format).
inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The 6-bit scale and minimum of group j (0..7) of a Q4_K/Q5_K super-block, from its
// 12 packed bytes.
inline void UnpackK4ScaleMin(const uint8_t* packed, int j, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = (packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4);
    *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

// The 6-bit scale of group g (0..7) of an IQ4_XS block, still biased by 32: 4 low bits in
// scales_l (bytes 4..7), 2 high bits in scales_h (bytes 2..3).
inline int UnpackIq4XsScale(const uint8_t* block, int g) {
  const int scales_h = block[2] | (block[3] << 8);
  return ((block[4 + g / 2] >> (4 * (g % 2))) & 0x0F) | (((scales_h >> (2 * g)) & 3) << 4);
}

// The 16 6-bit scales of a Q3_K super-block (still biased by 32), from its 12 packed bytes.
void UnpackQ3KScales(const uint8_t* packed, int8_t* scales);

// Dequantizes `dst.size()` elements of `type` from `src`. The element count must be a
// multiple of the type's block size and `src` must hold exactly the matching bytes.
// Unsupported types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0, TQ2_0,
// MXFP4, Q8_1 and the integer types) give Unimplemented naming the type.
absl::Status Dequantize(TensorType type, absl::Span<const uint8_t> src, absl::Span<float> dst);

// Dequantizes a whole tensor from a GGUF file; errors name the tensor.
absl::Status DequantizeTensor(const GgufTensorInfo& tensor, absl::Span<float> dst);

// The named tensor of `file` as floats (norm weights, biases); NotFound naming it if absent.
absl::StatusOr<std::vector<float>> LoadFloatTensor(const GgufFile& file, const std::string& name);

}  // namespace hetero

#endif  // HETERO_RUNTIME_DEQUANTIZE_H_
