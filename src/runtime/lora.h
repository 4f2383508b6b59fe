// LoRA adapters in llama.cpp's GGUF adapter format (general.type "adapter", adapter.type
// "lora", adapter.lora.alpha; per adapted matrix W a pair W.lora_a [inputs, rank] and
// W.lora_b [rank, outputs] in ggml order), bound at load to the model definition's matrices
// so every backend can apply them: a matrix product y = W x becomes
//   y = W x + scale * (alpha / rank) * B (A x)
// (scale alone where the file's alpha is 0, as llama.cpp does), for the rows of the sequences
// that use the adapter. The weights are held in f32 whatever the file's type (adapters are
// small: rank x (inputs + outputs) per matrix).
#ifndef HETERO_RUNTIME_LORA_H_
#define HETERO_RUNTIME_LORA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/runtime/gguf.h"

namespace hetero {

class Model;

// One adapted matrix (or a run of a fused matrix's rows: phi3's q|k|v and gate|up).
struct LoraMatrix {
  int rank = 0;  // 0: this matrix is not adapted
  int inputs = 0;
  int outputs = 0;
  float alpha_over_rank = 1.0f;  // the file's alpha / rank, or 1 where alpha is 0
  std::vector<float> a;    // rank x inputs, row-major (lora_a's rows)
  std::vector<float> b_t;  // rank x outputs: lora_b transposed, so a delta row is a sum of rank rows

  bool present() const { return rank > 0; }
};

// The definition's matrices of one layer (src/runtime/models/model_definition.h).
struct LoraLayer {
  LoraMatrix q, k, v, o, gate, up, down;
};

struct LoraAdapter {
  uint64_t id = 0;  // distinct for every adapter read in this process (never reused)
  std::string path;
  float alpha = 0.0f;
  std::vector<LoraLayer> layers;  // one per model layer
  LoraMatrix output;              // the logits matrix (a separate output.weight only)
  int adapted_matrices = 0;       // base tensors with a lora_a/lora_b pair
  uint64_t bytes = 0;             // the f32 weights held
};

// Reads an adapter for `model`. InvalidArgument (naming the file and the key or tensor) for
// a file that is not a LoRA adapter, is of another architecture, has an unpaired or
// misshapen tensor, or names a tensor the model does not have; Unimplemented for a tensor the
// model has but hetero cannot adapt (the token embedding lookup, expert tensors, norms).
absl::StatusOr<std::shared_ptr<const LoraAdapter>> LoadLoraAdapter(const std::string& path, const Model& model);
absl::StatusOr<std::shared_ptr<const LoraAdapter>> ReadLoraAdapter(const GgufFile& file, const Model& model);

}  // namespace hetero

#endif  // HETERO_RUNTIME_LORA_H_
