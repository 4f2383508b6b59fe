#include "src/runtime/models/architectures.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/runtime/models/hyperparameters.h"
#include "src/runtime/status_macros.h"

namespace hetero {
namespace {

std::vector<absl::Span<const Architecture>> Families() {
  return {LlamaFamily(), QwenFamily(), GemmaFamily(), PhiFamily(), OlmoFamily()};
}

const Architecture* FindArchitecture(absl::string_view name) {
  for (absl::Span<const Architecture> family : Families()) {
    for (const Architecture& a : family) {
      if (name == a.name) return &a;
    }
  }
  return nullptr;
}

}  // namespace

std::string MoeArchitectures() { return "llama (Mixtral), granitemoe, olmoe, qwen2moe, qwen3moe"; }

std::string SupportedArchitectures() {
  std::string out;
  for (absl::Span<const Architecture> family : Families()) {
    for (const Architecture& a : family) absl::StrAppend(&out, out.empty() ? "" : ", ", a.name);
  }
  return out;
}

absl::StatusOr<ModelArchitecture> ReadModelArchitecture(const GgufFile& file) {
  ModelArchitecture result;
  ModelConfig& c = result.config;
  HETERO_ASSIGN_OR_RETURN(absl::string_view arch, file.GetString("general.architecture"));
  c.architecture = std::string(arch);
  const Architecture* architecture = FindArchitecture(arch);
  if (architecture == nullptr) {
    return ConfigUnimplemented(file, absl::StrCat("architecture '", PrintableName(c.architecture),
                                                  "' is not supported (supported: ", SupportedArchitectures(), ")"));
  }
  HETERO_RETURN_IF_ERROR(ReadCommonHyperparameters(file, c));
  HETERO_ASSIGN_OR_RETURN(result.definition, architecture->define(file, c));
  ModelDefinition& d = result.definition;
  if (static_cast<int>(d.layers.size()) != c.n_layers) {
    return absl::InternalError(absl::StrCat(c.architecture, " definition declares ", d.layers.size(),
                                            " layers for ", c.n_layers));
  }
  if (d.output.empty()) d.output = c.tied_embeddings ? d.token_embd : "output.weight";
  if (d.rope_freqs.empty() && c.has_rope_freq_factors) d.rope_freqs = "rope_freqs.weight";
  if (d.attention_scale == 0) d.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  bool experts = false;
  for (const LayerDefinition& l : d.layers) {
    if (l.sliding_window > 0) c.sliding_window = l.sliding_window;
    experts = experts || l.experts.present();
  }
  if (c.n_experts > 0 && !experts) {
    return ConfigUnimplemented(file, absl::StrCat("mixture-of-experts ", c.architecture, " models (",
                                                  c.architecture, ".expert_count = ", c.n_experts,
                                                  ") are not supported (mixture-of-experts architectures: ",
                                                  MoeArchitectures(), ")"));
  }
  return result;
}

}  // namespace hetero
