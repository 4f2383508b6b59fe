#include "src/runtime/models/hyperparameters.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "src/runtime/status_macros.h"

namespace hetero {
namespace {

// Upper bound for any single hyperparameter: far above real models, low enough that
// products of two of them fit in int64.
constexpr uint64_t kMaxDimension = uint64_t{1} << 24;


}  // namespace

absl::Status ConfigError(const GgufFile& file, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("model '", file.source_name(), "': ", what));
}

absl::Status ConfigUnimplemented(const GgufFile& file, absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat("model '", file.source_name(), "': ", what));
}

// A required positive integer hyperparameter.
absl::StatusOr<int> GetDimension(const GgufFile& file, const std::string& key) {
  HETERO_ASSIGN_OR_RETURN(uint64_t value, file.GetUint64(key));
  if (value == 0 || value > kMaxDimension) {
    return ConfigError(file, absl::StrCat("metadata key '", key, "' is ", value,
                                          ", expected 1..", kMaxDimension));
  }
  return static_cast<int>(value);
}

// An optional positive integer hyperparameter.
absl::StatusOr<int> GetDimensionOr(const GgufFile& file, const std::string& key, int fallback) {
  if (file.FindValue(key) == nullptr) return fallback;
  return GetDimension(file, key);
}

// A per-layer hyperparameter that some converters write as an array (one value per
// layer). hetero needs it uniform.
absl::StatusOr<int> GetUniformDimension(const GgufFile& file, const std::string& key) {
  const GgufValue* value = file.FindValue(key);
  if (value == nullptr || value->type() != GgufValueType::kArray) return GetDimension(file, key);
  const GgufArray* array = *value->ToArray();
  if (array->size == 0) return ConfigError(file, absl::StrCat("metadata key '", key, "' is an empty array"));
  uint64_t first = 0;
  for (uint64_t i = 0; i < array->size; ++i) {
    uint64_t v;
    switch (array->element_type) {
      case GgufValueType::kUint32: v = array->Get<uint32_t>(i); break;
      case GgufValueType::kInt32: {
        int32_t s = array->Get<int32_t>(i);
        v = s < 0 ? 0 : static_cast<uint64_t>(s);
        break;
      }
      default:
        return ConfigError(file, absl::StrCat("metadata key '", key, "' is an array of ",
                                              GgufValueTypeName(array->element_type),
                                              ", expected integers"));
    }
    if (i == 0) first = v;
    if (v != first) {
      return ConfigUnimplemented(
          file, absl::StrCat("metadata key '", key, "' varies per layer; hetero supports only a uniform value"));
    }
  }
  if (first == 0 || first > kMaxDimension) {
    return ConfigError(file, absl::StrCat("metadata key '", key, "' is ", first));
  }
  return static_cast<int>(first);
}

absl::StatusOr<float> GetPositiveFloatOr(const GgufFile& file, const std::string& key, float fallback) {
  if (file.FindValue(key) == nullptr) return fallback;
  HETERO_ASSIGN_OR_RETURN(double value, file.GetDouble(key));
  // Checked after narrowing: 1e-300 is positive as a double but 0 as a float.
  const float narrowed = static_cast<float>(value);
  if (!(narrowed > 0) || !std::isfinite(narrowed)) {
    return ConfigError(file, absl::StrCat("metadata key '", key, "' is ", value,
                                          ", expected a positive finite number"));
  }
  return narrowed;
}


namespace {

// expert_count (0 or absent: dense), expert_used_count, expert_feed_forward_length (else
// feed_forward_length); gating other than softmax and weight scales are refused by name.
absl::Status ReadExpertHyperparameters(const GgufFile& file, ModelConfig& c) {
  const std::string p = c.architecture + ".";
  if (file.FindValue(p + "expert_count") == nullptr) return absl::OkStatus();
  HETERO_ASSIGN_OR_RETURN(const uint64_t experts, file.GetUint64(p + "expert_count"));
  if (experts == 0) return absl::OkStatus();
  HETERO_ASSIGN_OR_RETURN(c.n_experts, GetDimension(file, p + "expert_count"));
  HETERO_ASSIGN_OR_RETURN(c.n_experts_used, GetDimension(file, p + "expert_used_count"));
  if (c.n_experts_used > c.n_experts) {
    return ConfigError(file, absl::StrCat(p, "expert_used_count is ", c.n_experts_used, ", more than the ",
                                          c.n_experts, " experts of ", p, "expert_count"));
  }
  HETERO_ASSIGN_OR_RETURN(c.n_ff_expert, GetDimensionOr(file, p + "expert_feed_forward_length", c.n_ff));
  if (const GgufValue* gating = file.FindValue(p + "expert_gating_func"); gating != nullptr) {
    // llama.cpp's numbering: 1 softmax, 2 sigmoid.
    HETERO_ASSIGN_OR_RETURN(const uint64_t kind, gating->ToUint64());
    if (kind != 1) {
      return ConfigUnimplemented(file, absl::StrCat(p, "expert_gating_func ", kind,
                                                    " is not supported (supported: 1, softmax)"));
    }
  }
  if (file.FindValue(p + "expert_weights_scale") != nullptr) {
    HETERO_ASSIGN_OR_RETURN(const double scale, file.GetDouble(p + "expert_weights_scale"));
    if (scale != 1.0) {
      return ConfigUnimplemented(file, absl::StrCat(p, "expert_weights_scale ", scale, " is not supported"));
    }
  }
  for (const char* key : {"expert_shared_count", "expert_group_count", "expert_group_used_count"}) {
    if (file.FindValue(p + key) != nullptr) {
      return ConfigUnimplemented(file, absl::StrCat("metadata key '", p, key, "' is not supported"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadCommonHyperparameters(const GgufFile& file, ModelConfig& c) {
  if (const GgufValue* name = file.FindValue("general.name"); name != nullptr && name->ToString().ok()) {
    c.name = std::string(*name->ToString());
  }
  const std::string p = c.architecture + ".";

  HETERO_ASSIGN_OR_RETURN(c.n_layers, GetDimension(file, p + "block_count"));
  // Each layer has at least 6 tensors (phi3's fused ones); checking now keeps a hostile
  // block_count from driving work or memory beyond what the file holds.
  if (uint64_t{6} * static_cast<uint64_t>(c.n_layers) > file.tensors().size()) {
    return ConfigError(file, absl::StrCat(p, "block_count is ", c.n_layers, ", which needs at least ",
                                          uint64_t{6} * c.n_layers, " tensors, but the file has ",
                                          file.tensors().size()));
  }
  HETERO_ASSIGN_OR_RETURN(c.n_embd, GetDimension(file, p + "embedding_length"));
  HETERO_ASSIGN_OR_RETURN(c.n_heads, GetUniformDimension(file, p + "attention.head_count"));
  if (file.FindValue(p + "attention.head_count_kv") != nullptr) {
    HETERO_ASSIGN_OR_RETURN(c.n_kv_heads, GetUniformDimension(file, p + "attention.head_count_kv"));
  } else {
    c.n_kv_heads = c.n_heads;
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return ConfigError(file, absl::StrCat(c.n_heads, " query heads are not a multiple of ",
                                          c.n_kv_heads, " key/value heads"));
  }
  HETERO_ASSIGN_OR_RETURN(c.n_ff, GetUniformDimension(file, p + "feed_forward_length"));
  HETERO_ASSIGN_OR_RETURN(c.context_length, GetDimension(file, p + "context_length"));
  HETERO_RETURN_IF_ERROR(ReadExpertHyperparameters(file, c));

  if (file.FindValue(p + "attention.key_length") == nullptr && c.n_embd % c.n_heads != 0) {
    return ConfigError(file, absl::StrCat("hidden size ", c.n_embd, " is not a multiple of ",
                                          c.n_heads, " heads and no ", p,
                                          "attention.key_length is given"));
  }
  HETERO_ASSIGN_OR_RETURN(c.head_dim, GetDimensionOr(file, p + "attention.key_length", c.n_embd / c.n_heads));
  HETERO_ASSIGN_OR_RETURN(c.head_dim_v, GetDimensionOr(file, p + "attention.value_length", c.head_dim));
  if (c.head_dim_v != c.head_dim) {
    return ConfigUnimplemented(file, absl::StrCat("value heads of ", c.head_dim_v, " dimensions beside key heads of ",
                                                  c.head_dim, " (", p, "attention.value_length) are not supported"));
  }
  HETERO_ASSIGN_OR_RETURN(c.rope_dim, GetDimensionOr(file, p + "rope.dimension_count", c.head_dim));
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
    return ConfigError(file, absl::StrCat("rope dimension ", c.rope_dim,
                                          " must be even and at most the head size ", c.head_dim));
  }
  HETERO_ASSIGN_OR_RETURN(c.rope_freq_base, GetPositiveFloatOr(file, p + "rope.freq_base", 10000.0f));

  // RoPE scaling: the current keys are rope.scaling.type/factor; older files use
  // rope.scale_linear. As in llama.cpp, a factor without a type means linear scaling.
  std::string scaling_type = "linear";
  if (file.FindValue(p + "rope.scaling.type") != nullptr) {
    HETERO_ASSIGN_OR_RETURN(absl::string_view t, file.GetString(p + "rope.scaling.type"));
    scaling_type = std::string(t);
  }
  float factor = 1.0f;
  if (file.FindValue(p + "rope.scaling.factor") != nullptr) {
    HETERO_ASSIGN_OR_RETURN(factor, GetPositiveFloatOr(file, p + "rope.scaling.factor", 1.0f));
  } else if (file.FindValue(p + "rope.scale_linear") != nullptr) {
    HETERO_ASSIGN_OR_RETURN(factor, GetPositiveFloatOr(file, p + "rope.scale_linear", 1.0f));
  }
  if (scaling_type == "none") {
    c.rope_scaling = RopeScaling::kNone;
    c.rope_scaling_factor = 1.0f;
  } else if (scaling_type == "linear") {
    c.rope_scaling = factor == 1.0f ? RopeScaling::kNone : RopeScaling::kLinear;
    c.rope_scaling_factor = factor;
  } else {
    return ConfigUnimplemented(file, absl::StrCat("rope scaling type '", PrintableName(scaling_type),
                                                  "' is not supported (supported: none, linear)"));
  }

  HETERO_ASSIGN_OR_RETURN(double eps, file.GetDouble(p + "attention.layer_norm_rms_epsilon"));
  if (!(static_cast<float>(eps) > 0) || !(eps < 1)) {
    return ConfigError(file, absl::StrCat("RMS norm epsilon ", eps, " is outside (0, 1)"));
  }
  c.rms_norm_eps = static_cast<float>(eps);

  // Vocabulary size: the token embedding's second dimension is the ground truth; the
  // metadata, when present, must agree with it.
  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) return ConfigError(file, "tensor 'token_embd.weight' is missing");
  if (embd->dims.size() != 2 || embd->dims[1] <= 0 ||
      static_cast<uint64_t>(embd->dims[1]) > kMaxDimension) {
    return ConfigError(file, "tensor 'token_embd.weight' is not a 2-D [hidden, vocab] matrix");
  }
  c.n_vocab = static_cast<int>(embd->dims[1]);
  if (file.FindValue(p + "vocab_size") != nullptr) {
    HETERO_ASSIGN_OR_RETURN(int vocab, GetDimension(file, p + "vocab_size"));
    if (vocab != c.n_vocab) {
      return ConfigError(file, absl::StrCat(p, "vocab_size is ", vocab,
                                            " but token_embd.weight has ", c.n_vocab, " rows"));
    }
  }
  c.tied_embeddings = file.FindTensor("output.weight") == nullptr;
  c.has_rope_freq_factors = file.FindTensor("rope_freqs.weight") != nullptr;
  return absl::OkStatus();
}

}  // namespace hetero
