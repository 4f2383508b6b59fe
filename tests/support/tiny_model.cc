#include "tests/support/tiny_model.h"

#include <cstring>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/runtime/fp16.h"
#include "src/runtime/gguf.h"

namespace hetero::testing {
namespace {

uint64_t Fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// splitmix64: tiny, and trivially reproduced in NumPy.
class Stream {
 public:
  explicit Stream(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1), exactly representable as float32.
  float Uniform() { return static_cast<float>(Next() >> 40) * 0x1p-23f - 1.0f; }

 private:
  uint64_t state_;
};

void PutHalf(std::vector<uint8_t>& data, size_t offset, float value) {
  const uint16_t h = Fp32ToFp16(value);
  std::memcpy(data.data() + offset, &h, 2);
}

// How random blocks of each quantized type get sane scales: dequantized values then spread
// roughly like mean + scale * u. Mirrored in scripts/reference_forward.py (QUANT_FIELDS).
struct QuantFields {
  float divisor;
  std::vector<std::pair<int, float>> fields;  // (byte offset of an fp16 field, multiplier)
};

const QuantFields* FindQuantFields(TensorType type) {
  static const std::map<TensorType, QuantFields> kFields = {
      {TensorType::kQ4_0, {8.0f, {{0, 1.0f}}}},
      {TensorType::kQ4_1, {8.0f, {{0, 1.0f}, {2, -8.0f}}}},
      {TensorType::kQ8_0, {127.0f, {{0, 1.0f}}}},
      {TensorType::kQ5_0, {16.0f, {{0, 1.0f}}}},
      {TensorType::kQ5_1, {16.0f, {{0, 1.0f}, {2, -16.0f}}}},
      {TensorType::kIQ4_NL, {100.0f, {{0, 1.0f}}}},
      {TensorType::kQ2_K, {16.0f, {{80, 1.0f}, {82, 1.5f}}}},
      {TensorType::kQ3_K, {128.0f, {{108, 1.0f}}}},
      {TensorType::kQ4_K, {256.0f, {{0, 1.0f}, {2, 7.5f}}}},
      {TensorType::kQ5_K, {512.0f, {{0, 1.0f}, {2, 15.5f}}}},
      {TensorType::kQ6_K, {2048.0f, {{208, 1.0f}}}},
      {TensorType::kIQ4_XS, {3200.0f, {{0, 1.0f}}}},
  };
  auto it = kFields.find(type);
  return it == kFields.end() ? nullptr : &it->second;
}

class TensorWriter {
 public:
  TensorWriter(GgufBuilder& builder, const TinyModelOptions& options) : builder_(builder), options_(options) {}

  // Values are mean + scale * u; matrices take the options' weight type, the rest F32.
  void Add(const std::string& name, std::vector<int64_t> dims, bool is_matrix, float mean, float scale) {
    if (options_.omit_tensors.contains(name)) return;
    if (auto it = options_.shape_overrides.find(name); it != options_.shape_overrides.end()) {
      dims = it->second;
    }
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    Stream stream(static_cast<uint64_t>(options_.seed) ^ Fnv1a64(name));
    TensorType type = is_matrix ? options_.weight_type : TensorType::kF32;
    if (is_matrix) {
      // "blk.3.ffn_down.weight" is looked up as "ffn_down.weight".
      const size_t layer_end = name.rfind("blk.", 0) == 0 ? name.find('.', 4) : std::string::npos;
      const std::string base = layer_end == std::string::npos ? name : name.substr(layer_end + 1);
      if (auto it = options_.tensor_types.find(base); it != options_.tensor_types.end()) type = it->second;
    }
    if (const QuantFields* q = FindQuantFields(type)) {
      const TensorTypeTraits& t = GetTensorTypeTraits(type);
      const int64_t blocks = n / t.block_size;
      std::vector<uint8_t> data(static_cast<size_t>(blocks) * t.type_size);
      const float block_scale = scale / q->divisor;
      for (int64_t b = 0; b < blocks; ++b) {
        uint8_t* block = data.data() + b * t.type_size;
        for (uint32_t i = 0; i < t.type_size; ++i) block[i] = static_cast<uint8_t>(stream.Next() & 0xFF);
        for (const auto& [offset, multiplier] : q->fields) {
          PutHalf(data, b * t.type_size + offset, multiplier * block_scale * (1.25f + stream.Uniform() / 4.0f));
        }
      }
      builder_.AddTensor(name, std::move(dims), type, std::move(data));
      return;
    }
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = mean + scale * stream.Uniform();
    if (type == TensorType::kF16) {
      std::vector<uint8_t> data(values.size() * 2);
      for (size_t i = 0; i < values.size(); ++i) PutHalf(data, 2 * i, values[i]);
      builder_.AddTensor(name, std::move(dims), TensorType::kF16, std::move(data));
    } else {
      builder_.AddTensorF32(name, std::move(dims), values);
    }
  }

 private:
  GgufBuilder& builder_;
  const TinyModelOptions& options_;
};

}  // namespace

GgufBuilder TinyModelBuilder(const TinyModelOptions& o) {
  GgufBuilder b;
  const std::string p = o.architecture + ".";
  auto add_u32 = [&](const std::string& key, uint32_t v) {
    if (!o.omit_keys.contains(key)) b.AddUint32(p + key, v);
  };
  auto add_f32 = [&](const std::string& key, float v) {
    if (!o.omit_keys.contains(key)) b.AddFloat32(p + key, v);
  };
  b.AddString("general.architecture", o.architecture);
  b.AddString("general.name", "tiny-" + o.architecture);
  add_u32("block_count", o.n_layers);
  add_u32("context_length", o.context_length);
  add_u32("embedding_length", o.n_embd);
  add_u32("feed_forward_length", o.n_ff);
  add_u32("attention.head_count", o.n_heads);
  add_u32("attention.head_count_kv", o.n_kv_heads);
  add_f32("rope.freq_base", o.rope_freq_base);
  add_f32("attention.layer_norm_rms_epsilon", o.rms_norm_eps);
  add_u32("vocab_size", o.n_vocab);
  const int64_t head_dim = o.head_dim > 0 ? o.head_dim : o.n_embd / o.n_heads;
  if (o.head_dim > 0) {
    add_u32("attention.key_length", o.head_dim);
    add_u32("attention.value_length", o.head_dim);
  }
  if (o.sliding_window > 0) add_u32("attention.sliding_window", o.sliding_window);
  for (const auto& [key, value] : o.float_keys) add_f32(key, value);
  if (o.n_experts > 0) {
    add_u32("expert_count", o.n_experts);
    add_u32("expert_used_count", o.n_experts_used);
    if (o.n_ff_expert > 0) add_u32("expert_feed_forward_length", o.n_ff_expert);
    if (o.n_ff_shared > 0) add_u32("expert_shared_feed_forward_length", o.n_ff_shared);
  }

  const int64_t embd = o.n_embd;
  const int64_t q_dim = o.n_heads * head_dim;
  const int64_t kv_dim = o.n_kv_heads * head_dim;
  const float w = 0.02f;
  TensorWriter t(b, o);
  t.Add("token_embd.weight", {embd, o.n_vocab}, true, 0.0f, w);
  t.Add("output_norm.weight", {embd}, false, 1.0f, 0.1f);
  if (!o.tied_embeddings) t.Add("output.weight", {embd, o.n_vocab}, true, 0.0f, w);
  if (o.rope_freq_factors) t.Add("rope_freqs.weight", {head_dim / 2}, false, 4.5f, 3.5f);
  const bool fused = o.architecture == "phi3";
  const bool qk_norms = o.architecture == "qwen3" || o.architecture == "gemma3" || o.architecture == "qwen3moe";
  const bool whole_qk_norms = o.architecture == "olmoe";
  const bool biases = o.architecture == "qwen2" || o.architecture == "qwen2moe";
  const int64_t expert_ff = o.n_ff_expert > 0 ? o.n_ff_expert : o.n_ff;
  for (int i = 0; i < o.n_layers; ++i) {
    const std::string l = absl::StrCat("blk.", i, ".");
    t.Add(l + "attn_norm.weight", {embd}, false, 1.0f, 0.1f);
    if (fused) {
      t.Add(l + "attn_qkv.weight", {embd, q_dim + 2 * kv_dim}, true, 0.0f, w);
    } else {
      t.Add(l + "attn_q.weight", {embd, q_dim}, true, 0.0f, w);
      t.Add(l + "attn_k.weight", {embd, kv_dim}, true, 0.0f, w);
      t.Add(l + "attn_v.weight", {embd, kv_dim}, true, 0.0f, w);
    }
    if (biases) {
      t.Add(l + "attn_q.bias", {q_dim}, false, 0.0f, w);
      t.Add(l + "attn_k.bias", {kv_dim}, false, 0.0f, w);
      t.Add(l + "attn_v.bias", {kv_dim}, false, 0.0f, w);
    }
    if (qk_norms) {
      t.Add(l + "attn_q_norm.weight", {head_dim}, false, 1.0f, 0.1f);
      t.Add(l + "attn_k_norm.weight", {head_dim}, false, 1.0f, 0.1f);
    }
    if (whole_qk_norms) {
      t.Add(l + "attn_q_norm.weight", {q_dim}, false, 1.0f, 0.1f);
      t.Add(l + "attn_k_norm.weight", {kv_dim}, false, 1.0f, 0.1f);
    }
    t.Add(l + "attn_output.weight", {q_dim, embd}, true, 0.0f, w);
    if (o.architecture == "gemma3") t.Add(l + "post_attention_norm.weight", {embd}, false, 1.0f, 0.1f);
    t.Add(l + "ffn_norm.weight", {embd}, false, 1.0f, 0.1f);
    if (o.n_experts > 0) {
      t.Add(l + "ffn_gate_inp.weight", {embd, o.n_experts}, false, 0.0f, 0.5f);
      t.Add(l + "ffn_gate_exps.weight", {embd, expert_ff, o.n_experts}, true, 0.0f, w);
      t.Add(l + "ffn_up_exps.weight", {embd, expert_ff, o.n_experts}, true, 0.0f, w);
      t.Add(l + "ffn_down_exps.weight", {expert_ff, embd, o.n_experts}, true, 0.0f, w);
      if (o.architecture == "qwen2moe") {
        const int64_t shared_ff = o.n_ff_shared > 0 ? o.n_ff_shared : o.n_ff;
        t.Add(l + "ffn_gate_inp_shexp.weight", {embd}, false, 0.0f, 0.5f);
        t.Add(l + "ffn_gate_shexp.weight", {embd, shared_ff}, true, 0.0f, w);
        t.Add(l + "ffn_up_shexp.weight", {embd, shared_ff}, true, 0.0f, w);
        t.Add(l + "ffn_down_shexp.weight", {shared_ff, embd}, true, 0.0f, w);
      }
    } else if (fused) {
      t.Add(l + "ffn_up.weight", {embd, 2 * int64_t{o.n_ff}}, true, 0.0f, w);
    } else {
      t.Add(l + "ffn_gate.weight", {embd, o.n_ff}, true, 0.0f, w);
      t.Add(l + "ffn_up.weight", {embd, o.n_ff}, true, 0.0f, w);
    }
    if (o.n_experts == 0) t.Add(l + "ffn_down.weight", {o.n_ff, embd}, true, 0.0f, w);
    if (o.architecture == "gemma3") t.Add(l + "post_ffw_norm.weight", {embd}, false, 1.0f, 0.1f);
  }
  return b;
}

std::string WriteTinyModel(const TinyModelOptions& options, const std::string& file_name) {
  return WriteTempFile(TinyModelBuilder(options).Build(), file_name);
}

std::string WriteTinyAdapter(const std::string& model_path, const TinyAdapterOptions& o,
                             const std::string& file_name) {
  absl::StatusOr<std::unique_ptr<GgufFile>> model = GgufFile::Open(model_path);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return "";
  GgufBuilder b;
  b.AddString("general.architecture", o.architecture);
  b.AddString("general.type", o.general_type);
  b.AddString("adapter.type", o.adapter_type);
  if (o.write_alpha) b.AddFloat32("adapter.lora.alpha", o.alpha);
  TinyModelOptions generator;
  generator.seed = o.seed;
  generator.weight_type = o.type;
  TensorWriter t(b, generator);
  for (const std::string& target : o.targets) {
    const GgufTensorInfo* w = (*model)->FindTensor(target);
    EXPECT_NE(w, nullptr) << target;
    if (w == nullptr) return "";
    const int64_t inputs = w->dims[0], outputs = w->dims.size() > 1 ? w->dims[1] : 1;
    if (!o.omit_tensors.contains(target + ".lora_a")) t.Add(target + ".lora_a", {inputs, o.rank}, true, 0.0f, o.scale);
    if (!o.omit_tensors.contains(target + ".lora_b")) t.Add(target + ".lora_b", {o.rank, outputs}, true, 0.0f, o.scale);
  }
  for (const auto& [name, dims] : o.extra_f32_tensors) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    b.AddTensorF32(name, dims, std::vector<float>(static_cast<size_t>(n), 0.01f));
  }
  return WriteTempFile(b.Build(), file_name);
}

}  // namespace hetero::testing
