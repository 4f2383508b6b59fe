// moe_peer_greedy ARCH OUT.gguf PROMPT...: writes a tiny F16 mixture-of-experts model of ARCH
// (granitemoe, olmoe, qwen2moe, qwen3moe) in shapes llama.cpp loads, then prints, for each
// PROMPT (token ids separated by commas, e.g. 1,17,42), hetero's f32 CPU logits after the
// prompt ("all" line) and 16 greedy tokens with each step's top-2 margin ("tokens" line). scripts/moe_peer_check.sh
// runs llama.cpp on the same file and compares: an independent check that the file layout
// is read as the ecosystem reads it (docs/PERFORMANCE.md, "Mixtures of experts read as
// llama.cpp reads them"). Not a test: it needs a llama.cpp build.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "hetero/model.h"
#include "src/cpu/cpu_backend.h"
#include "tests/support/tiny_model.h"

namespace hetero {
namespace {

constexpr int kSteps = 16;
constexpr int kVocab = 256;

testing::TinyModelOptions OptionsFor(const std::string& arch) {
  testing::TinyModelOptions o;
  o.architecture = arch;
  o.n_layers = 3;
  o.n_embd = 64;
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.n_ff = 96;
  o.n_vocab = kVocab;
  o.n_experts = 8;
  o.n_experts_used = 2;
  o.n_ff_expert = 64;
  o.weight_type = TensorType::kF16;
  // An output matrix of its own: with tied embeddings a random tiny model mostly repeats its
  // last token, which would check little (and llama.cpp's olmoe and qwen2moe require it).
  o.tied_embeddings = false;
  // llama.cpp reads these two architectures' experts as feed_forward_length wide, and sizes
  // OLMoE's whole-vector k norm by n_embd (OLMoE has as many KV heads as heads).
  if (arch == "granitemoe" || arch == "olmoe") o.n_ff_expert = 0;
  if (arch == "olmoe") o.n_kv_heads = o.n_heads;
  if (arch == "qwen2moe") o.n_ff_shared = 96;
  if (arch == "granitemoe") {
    o.float_keys = {{"embedding_scale", 12.0f}, {"residual_scale", 0.22f}, {"attention.scale", 0.0078125f},
                    {"logit_scale", 8.0f}};
  }
  return o;
}

int Run(const std::string& arch, const std::string& path, const std::vector<std::vector<int32_t>>& prompts) {
  const testing::TinyModelOptions o = OptionsFor(arch);
  testing::GgufBuilder builder = testing::TinyModelBuilder(o);
  builder.AddString("tokenizer.ggml.model", "none");  // token ids only
  const std::vector<uint8_t> bytes = builder.Build();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  CpuBackendOptions options;
  options.precision = CpuPrecision::kF32;
  absl::StatusOr<std::unique_ptr<CpuBackend>> backend = CpuBackend::Create(**model, options);
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    return 1;
  }
  CpuBackend& b = **backend;
  for (const std::vector<int32_t>& prompt : prompts) {
    std::vector<float> logits(o.n_vocab);
    absl::StatusOr<SequenceId> sequence = b.NewSequence();
    if (!sequence.ok()) {
      std::fprintf(stderr, "%s\n", sequence.status().ToString().c_str());
      return 1;
    }
    const SequenceId seq = *sequence;
    if (absl::Status s = b.Prefill(seq, prompt, absl::MakeSpan(logits)); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("all");
    for (float v : logits) std::printf(" %.7g", v);
    std::printf("\ntokens");
    for (int step = 0; step < kSteps; ++step) {
      int best = 0;
      for (int i = 1; i < o.n_vocab; ++i) best = logits[i] > logits[best] ? i : best;
      float second = -1e30f;
      for (int i = 0; i < o.n_vocab; ++i) second = i != best && logits[i] > second ? logits[i] : second;
      std::printf(" %d(%.4f)", best, logits[best] - second);
      const std::vector<int32_t> next = {best};
      if (absl::Status s = b.Decode({&seq, 1}, next, absl::MakeSpan(logits)); !s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        return 1;
      }
    }
    std::printf("\n");
    b.FreeSequence(seq);
  }
  return 0;
}

}  // namespace
}  // namespace hetero

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: moe_peer_greedy granitemoe|olmoe|qwen2moe|qwen3moe OUT.gguf PROMPT...\n");
    return 2;
  }
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 3; i < argc; ++i) {
    std::vector<int32_t> ids;
    for (absl::string_view id : absl::StrSplit(argv[i], ',')) {
      int value = 0;
      if (!absl::SimpleAtoi(id, &value) || value < 0 || value >= hetero::kVocab) {
        std::fprintf(stderr, "bad prompt \"%s\": token ids in [0, %d) separated by commas\n", argv[i], hetero::kVocab);
        return 2;
      }
      ids.push_back(value);
    }
    prompts.push_back(std::move(ids));
  }
  return hetero::Run(argv[1], argv[2], prompts);
}
