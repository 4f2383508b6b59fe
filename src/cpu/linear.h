// Linear layers (y = x W^T) of the CPU backend. Two kinds, chosen per matrix at load:
//  - OneDnnLinear: weights converted once to f32 or bf16 and reordered into oneDNN's
//    preferred layout; one matmul primitive per matrix, created at load with a run-time row
//    count, so nothing is created while decoding.
//  - QuantLinear: weights kept in their native blocks (or quant_matmul.h's packed copy of
//    about the same size, the file's pages then given back); the integer kernels of
//    quant_matmul.h run every batch, except where bf16_min_rows sends large ones (prompt
//    prefill on a CPU without VNNI) through a transient bf16 copy and a oneDNN bf16 matmul.
#ifndef HETERO_CPU_LINEAR_H_
#define HETERO_CPU_LINEAR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "absl/status/statusor.h"
#include "src/cpu/quant_matmul.h"
#include "src/runtime/gguf.h"

namespace hetero {

enum class MatmulPrecision { kF32, kBf16 };

// Per-call scratch, reused across calls (not shared between threads).
struct LinearScratch {
  // A step of one token per sequence: it stays on the native kernels at any batch size (a
  // sequence's logits must not depend on which other sequences share its step).
  bool decode = false;
  // Generated tokens (SequenceChunk::generated, CpuPrecision kAuto): inputs take two int8
  // passes (QuantizedActivations::QuantizeWithRemainder).
  bool remainders = false;
  std::vector<uint16_t> src_bf16;
  std::vector<uint16_t> weights_bf16;
  QuantizedActivations activations;
  std::vector<QuantizedActivations> inputs;  // ForwardEach's, one per distinct input
};

class Linear {
 public:
  virtual ~Linear() = default;
  // y (m x n, row stride n) = x (m x k, row stride k) W^T.
  virtual absl::Status Forward(const float* x, int m, float* y, LinearScratch& scratch) const = 0;
  int n() const { return n_; }
  int k() const { return k_; }
  // Bytes of weights this layer holds outside the mapped file.
  virtual size_t resident_bytes() const = 0;
  // Whether Forward reads the tensor's bytes in the model file (false: only its own copy).
  virtual bool reads_source_weights() const { return true; }
  virtual std::string Describe() const = 0;
  // The native weights Forward would multiply `m` rows with on the integer kernels, or
  // nullptr where it takes another path.
  virtual const QuantizedWeights* IntegerPath(int m, const LinearScratch& scratch) const { return nullptr; }

 protected:
  Linear(int n, int k) : n_(n), k_(k) {}
  int n_;
  int k_;
};

// ys[i] = x linears[i]^T for linears of the same input width: where all take the integer
// kernels, x is quantized once and the products run as one parallel step (decode's q/k/v
// and gate/up); otherwise one Forward each. Results equal separate Forward calls exactly.
absl::Status ForwardSameInput(absl::Span<const Linear* const> linears, const float* x, int m,
                              absl::Span<float* const> ys, LinearScratch& scratch);

// One product of ForwardEach: y (m x n) = x (m x k) linear^T.
struct LinearProduct {
  const Linear* linear;
  const float* x;
  int m;
  float* y;
};

// Each product with its own input: where all take the integer kernels, each distinct input
// is quantized once and every product runs in one parallel step (a mixture of experts'
// chosen experts, each with its tokens); otherwise one Forward each. Results equal separate
// Forward calls exactly.
absl::Status ForwardEach(absl::Span<const LinearProduct> products, LinearScratch& scratch);

struct LinearContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  mutable dnnl::stream stream{engine};  // executions are serialised by the backend
};

// Weights from any dequantizable tensor, converted to `precision` and reordered.
absl::StatusOr<std::unique_ptr<Linear>> MakeOneDnnLinear(const LinearContext& ctx, const GgufTensorInfo& tensor,
                                                         MatmulPrecision precision);

// Weights kept in native blocks (QuantizedWeights::Supports(type) must hold). Calls with
// at least `bf16_min_rows` rows (kNeverBf16: none) take the dequantize-to-bf16 + oneDNN path.
// `release_source`, when given, is told of the tensor's file bytes no kernel will read: as
// packing copies them (QuantizedWeights::PackedSourceFn), and the whole tensor once built
// where only the packed copy is read; the caller may then drop those pages.
inline constexpr int kNeverBf16 = 1 << 30;
absl::StatusOr<std::unique_ptr<Linear>> MakeQuantLinear(const LinearContext& ctx, const GgufTensorInfo& tensor,
                                                        int bf16_min_rows,
                                                        const QuantizedWeights::PackedSourceFn& release_source = {});

}  // namespace hetero

#endif  // HETERO_CPU_LINEAR_H_
