#include "src/runtime/models/model_definition.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "src/runtime/tensor_type.h"

namespace hetero {

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c, const ModelDefinition& d) {
  const int64_t embd = c.n_embd;
  const int64_t q_dim = int64_t{c.n_heads} * c.head_dim;
  const int64_t k_dim = int64_t{c.n_kv_heads} * c.head_dim;
  const int64_t v_dim = int64_t{c.n_kv_heads} * c.head_dim_v;
  const int64_t o_dim = int64_t{c.n_heads} * c.head_dim_v;
  std::vector<ExpectedTensor> out;
  // Matrices: a slice's tensor has as many rows as its furthest slice reaches.
  std::map<std::string, size_t> matrix_index;
  auto vector = [&](const std::string& name, int64_t n) {
    if (!name.empty()) out.push_back({name, {n}, true});
  };
  auto matrix = [&](const TensorSlice& s, int64_t inputs, int64_t outputs) {
    if (!s.present()) return;
    const int64_t rows = s.rows > 0 ? s.row_begin + s.rows : outputs;
    auto [it, fresh] = matrix_index.emplace(s.tensor, out.size());
    if (fresh) {
      out.push_back({s.tensor, {inputs, rows}, true});
    } else {
      std::vector<int64_t>& shape = out[it->second].shape;
      shape[1] = std::max(shape[1], rows);
    }
  };
  matrix({d.token_embd}, embd, c.n_vocab);
  vector(d.output_norm, embd);
  if (d.output != d.token_embd) matrix({d.output}, embd, c.n_vocab);
  vector(d.rope_freqs, c.rope_dim / 2);
  for (const LayerDefinition& l : d.layers) {
    vector(l.attn_norm, embd);
    matrix(l.q, embd, q_dim);
    matrix(l.k, embd, k_dim);
    matrix(l.v, embd, v_dim);
    vector(l.q_bias, q_dim);
    vector(l.k_bias, k_dim);
    vector(l.v_bias, v_dim);
    vector(l.q_norm, l.qk_norm_per_head ? c.head_dim : q_dim);
    vector(l.k_norm, l.qk_norm_per_head ? c.head_dim : k_dim);
    matrix(l.o, o_dim, embd);
    vector(l.post_attn_norm, embd);
    vector(l.ffn_norm, embd);
    matrix(l.gate, embd, c.n_ff);
    matrix(l.up, embd, c.n_ff);
    matrix(l.down, c.n_ff, embd);
    if (const ExpertsDefinition& x = l.experts; x.present()) {
      out.push_back({x.router, {embd, x.count}, true});
      out.push_back({x.gate, {embd, x.n_ff, x.count}, true});
      out.push_back({x.up, {embd, x.n_ff, x.count}, true});
      out.push_back({x.down, {x.n_ff, embd, x.count}, true});
      if (x.has_shared()) {
        out.push_back({x.shared_gate_input, {embd}, true, /*may_be_one_row=*/true});
        matrix({x.shared_gate}, embd, x.shared_n_ff);
        matrix({x.shared_up}, embd, x.shared_n_ff);
        matrix({x.shared_down}, x.shared_n_ff, embd);
      }
    }
    vector(l.post_ffn_norm, embd);
  }
  return out;
}

GgufTensorInfo SliceTensor(const GgufFile& file, const TensorSlice& slice) {
  GgufTensorInfo info = *file.FindTensor(slice.tensor);
  if (slice.rows == 0) return info;
  const TensorTypeTraits& t = GetTensorTypeTraits(info.type);
  const uint64_t row_bytes = static_cast<uint64_t>(info.dims[0]) / t.block_size * t.type_size;
  info.dims[1] = slice.rows;
  info.n_elements = static_cast<uint64_t>(info.dims[0]) * slice.rows;
  info.n_bytes = row_bytes * slice.rows;
  info.offset += row_bytes * slice.row_begin;
  info.file_offset += row_bytes * slice.row_begin;
  info.data = info.data.subspan(row_bytes * slice.row_begin, info.n_bytes);
  return info;
}

GgufTensorInfo ExpertMatrix(const GgufFile& file, const std::string& tensor, int expert) {
  GgufTensorInfo info = *file.FindTensor(tensor);
  const TensorTypeTraits& t = GetTensorTypeTraits(info.type);
  const uint64_t bytes = static_cast<uint64_t>(info.dims[0]) / t.block_size * t.type_size * info.dims[1];
  info.dims.resize(2);
  info.n_elements = static_cast<uint64_t>(info.dims[0]) * info.dims[1];
  info.n_bytes = bytes;
  info.offset += bytes * expert;
  info.file_offset += bytes * expert;
  info.data = info.data.subspan(bytes * expert, bytes);
  return info;
}

GgufTensorInfo StackedExperts(const GgufFile& file, const std::string& tensor) {
  GgufTensorInfo info = *file.FindTensor(tensor);
  info.dims = {info.dims[0], info.dims[1] * info.dims[2]};  // the bytes are already in this order
  return info;
}

RopeVariants DistinctRopes(const ModelDefinition& definition) {
  RopeVariants v;
  for (const LayerDefinition& l : definition.layers) {
    const std::pair<float, float> key{l.rope_freq_base, l.rope_linear_factor};
    auto it = std::find(v.base_and_factor.begin(), v.base_and_factor.end(), key);
    if (it == v.base_and_factor.end()) it = v.base_and_factor.insert(it, key);
    v.of_layer.push_back(static_cast<int>(it - v.base_and_factor.begin()));
  }
  return v;
}

LayerDefinition StandardLayer(int i, const ModelConfig& config) {
  const std::string p = absl::StrCat("blk.", i, ".");
  LayerDefinition l;
  l.attn_norm = p + "attn_norm.weight";
  l.q = {p + "attn_q.weight"};
  l.k = {p + "attn_k.weight"};
  l.v = {p + "attn_v.weight"};
  l.o = {p + "attn_output.weight"};
  l.ffn_norm = p + "ffn_norm.weight";
  l.gate = {p + "ffn_gate.weight"};
  l.up = {p + "ffn_up.weight"};
  l.down = {p + "ffn_down.weight"};
  l.rope_freq_base = config.rope_freq_base;
  l.rope_linear_factor = config.rope_scaling == RopeScaling::kLinear ? config.rope_scaling_factor : 1.0f;
  return l;
}

void AddAttentionBiases(int i, LayerDefinition& l) {
  const std::string p = absl::StrCat("blk.", i, ".");
  l.q_bias = p + "attn_q.bias";
  l.k_bias = p + "attn_k.bias";
  l.v_bias = p + "attn_v.bias";
}

void AddQkNorms(int i, LayerDefinition& l) {
  const std::string p = absl::StrCat("blk.", i, ".");
  l.q_norm = p + "attn_q_norm.weight";
  l.k_norm = p + "attn_k_norm.weight";
}

void UseExperts(int i, const ModelConfig& c, bool normalize_weights, LayerDefinition& l) {
  const std::string p = absl::StrCat("blk.", i, ".");
  l.gate = l.up = l.down = {};
  ExpertsDefinition& x = l.experts;
  x.router = p + "ffn_gate_inp.weight";
  x.gate = p + "ffn_gate_exps.weight";
  x.up = p + "ffn_up_exps.weight";
  x.down = p + "ffn_down_exps.weight";
  x.count = c.n_experts;
  x.used = c.n_experts_used;
  x.n_ff = c.n_ff_expert;
  x.normalize_weights = normalize_weights;
}

void AddSharedExpert(int i, int shared_n_ff, LayerDefinition& l) {
  const std::string p = absl::StrCat("blk.", i, ".");
  ExpertsDefinition& x = l.experts;
  x.shared_gate_input = p + "ffn_gate_inp_shexp.weight";
  x.shared_gate = p + "ffn_gate_shexp.weight";
  x.shared_up = p + "ffn_up_shexp.weight";
  x.shared_down = p + "ffn_down_shexp.weight";
  x.shared_n_ff = shared_n_ff;
}

std::string DescribeExperts(const ExpertsDefinition& x) {
  std::string out = absl::StrCat("mixture of experts: ", x.used, " of ", x.count, " experts per token (FFN ", x.n_ff,
                                 "), weights ", x.normalize_weights ? "renormalised over the chosen" : "as routed");
  if (x.has_shared()) absl::StrAppend(&out, ", and a gated shared expert (FFN ", x.shared_n_ff, ")");
  return out;
}

void AddFeature(ModelConfig& config, std::string feature) {
  if (std::find(config.features.begin(), config.features.end(), feature) == config.features.end()) {
    config.features.push_back(std::move(feature));
  }
}

}  // namespace hetero
