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

// Dequantizes `dst.size()` elements of `type` from `src`. The element count must be a
// multiple of the type's block size and `src` must hold exactly the matching bytes.
// Unsupported types (IQ*, TQ*, ...) give Unimplemented naming the type.
absl::Status Dequantize(TensorType type, absl::Span<const uint8_t> src, absl::Span<float> dst);

// Dequantizes a whole tensor from a GGUF file; errors name the tensor.
absl::Status DequantizeTensor(const GgufTensorInfo& tensor, absl::Span<float> dst);

// The named tensor of `file` as floats (norm weights, biases); NotFound naming it if absent.
absl::StatusOr<std::vector<float>> LoadFloatTensor(const GgufFile& file, const std::string& name);

}  // namespace hetero

#endif  // HETERO_RUNTIME_DEQUANTIZE_H_
