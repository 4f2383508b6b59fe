// Tiny but complete llama/qwen2 GGUF models with random weights, written by the tests
// themselves so that most tests need no downloaded model.
#ifndef HETERO_TESTS_SUPPORT_TINY_MODEL_H_
#define HETERO_TESTS_SUPPORT_TINY_MODEL_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/support/gguf_builder.h"

namespace hetero::testing {

struct TinyModelOptions {
  std::string architecture = "llama";  // "llama" or "qwen2" (adds q/k/v biases)
  int n_layers = 2;
  int n_embd = 64;
  int n_heads = 4;
  int n_kv_heads = 2;
  int n_ff = 96;
  int n_vocab = 100;
  int context_length = 256;
  float rope_freq_base = 10000.0f;
  float rms_norm_eps = 1e-5f;
  bool tied_embeddings = true;
  TensorType weight_type = TensorType::kF32;  // matrices: F32 or F16; norms/biases stay F32
  uint32_t seed = 1;
  // Test hooks: tensors to leave out, and shapes to write instead of the right ones.
  std::set<std::string> omit_tensors;
  std::map<std::string, std::vector<int64_t>> shape_overrides;
  // Metadata keys (without the "<arch>." prefix) to leave out.
  std::set<std::string> omit_keys;
};

// A builder holding the model's metadata and tensors; add to it or Build() it.
GgufBuilder TinyModelBuilder(const TinyModelOptions& options);

// Builds the model and writes it to a temp file; returns the path.
std::string WriteTinyModel(const TinyModelOptions& options, const std::string& file_name);

}  // namespace hetero::testing

#endif  // HETERO_TESTS_SUPPORT_TINY_MODEL_H_
