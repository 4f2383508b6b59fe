#include "src/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "src/cpu/cpu_features.h"

namespace hetero {
namespace {

using dnnl::memory;
using Type = memory::data_type;
constexpr memory::dim kRuntime = DNNL_RUNTIME_DIM_VAL;

}  // namespace

Attention::Attention(const LinearContext& ctx, const AttentionShape& shape) : ctx_(ctx), s_(shape) {
  const memory::dim hd = s_.head_dim;
  const memory::dim row_stride = static_cast<memory::dim>(s_.n_heads) * hd;
  // Q rows of one head are a strided view of the q buffer; so are the output rows.
  const memory::desc q_md({kRuntime, hd}, Type::f32, memory::dims{row_stride, 1});
  const memory::desc keys_md({hd, kRuntime}, Type::f32, memory::format_tag::ba);  // keys stored [keys][hd]
  const memory::desc scores_md({kRuntime, kRuntime}, Type::f32, memory::format_tag::ab);
  dnnl::primitive_attr scale_attr;
  scale_attr.set_output_scales(0, {1.0f / std::sqrt(static_cast<float>(hd))});
  scores_ = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(q_md, keys_md, scores_md), scale_attr, ctx_.engine));
  const memory::desc values_md({kRuntime, hd}, Type::f32, memory::format_tag::ab);
  mix_ = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(scores_md, values_md, q_md), ctx_.engine));
}

namespace internal {

void AttendDecodePortable(const DecodeQuery& query, float* scores, float* out) {
  const int hd = query.head_dim;
  const int n = query.n_keys;
  const int bt = query.block_tokens;
  const size_t ld = static_cast<size_t>(n + 15) / 16 * 16;
  for (int h = 0; h < query.group; ++h) {
    const float* qv = query.q + static_cast<size_t>(h) * hd;
    float* s = scores + h * ld;
    float max_score = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < n; ++j) {
      const float* k = query.blocks[j / bt] + query.k_offset + static_cast<size_t>(j % bt) * hd;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < hd; ++d) dot += qv[d] * k[d];
      s[j] = dot * query.scale;
      max_score = std::max(max_score, s[j]);
    }
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - max_score);
      sum += s[j];
    }
    const float inv = 1.0f / sum;
    float* o = out + static_cast<size_t>(h) * hd;
    std::fill(o, o + hd, 0.0f);
    for (int j = 0; j < n; ++j) {
      const float* v = query.blocks[j / bt] + query.v_offset + static_cast<size_t>(j % bt) * hd;
      const float p = s[j];
#pragma omp simd
      for (int d = 0; d < hd; ++d) o[d] += p * v[d];
    }
    for (int d = 0; d < hd; ++d) o[d] *= inv;
  }
}

}  // namespace internal

void Attention::RunSingle(const float* q, int position, const SequenceKv& kv, float* out) const {
  const int hd = s_.head_dim;
  const int group = s_.n_heads / s_.n_kv_heads;
  const size_t head_stride = static_cast<size_t>(s_.block_tokens) * hd;
  static const bool avx512 = DetectCpu().avx512f;
  const bool simd = avx512 && hd % 16 == 0;
  const int n_keys = position + 1;
  std::vector<float> scores(static_cast<size_t>(group) * ((n_keys + 15) / 16 * 16));
  for (int g = 0; g < s_.n_kv_heads; ++g) {
    internal::DecodeQuery query{q + static_cast<size_t>(g) * group * hd,
                                group,
                                hd,
                                n_keys,
                                kv.blocks.data(),
                                s_.block_tokens,
                                g * head_stride,
                                (s_.n_kv_heads + g) * head_stride,
                                1.0f / std::sqrt(static_cast<float>(hd))};
    float* o = out + static_cast<size_t>(g) * group * hd;
    if (simd) {
      internal::AttendDecodeAvx512(query, scores.data(), o);
    } else {
      internal::AttendDecodePortable(query, scores.data(), o);
    }
  }
}

absl::Status Attention::RunPrompt(const float* q, int rows, int first_position, const SequenceKv& kv, float* out) {
  const int hd = s_.head_dim;
  const int group = s_.n_heads / s_.n_kv_heads;
  const int bt = s_.block_tokens;
  const size_t head_stride = static_cast<size_t>(bt) * hd;
  const int n_keys = first_position + rows;
  const memory::dim row_stride = static_cast<memory::dim>(s_.n_heads) * hd;
  keys_.resize(static_cast<size_t>(n_keys) * hd);
  values_.resize(static_cast<size_t>(n_keys) * hd);
  probs_.resize(static_cast<size_t>(rows) * n_keys);
  try {
    memory keys_mem({{hd, n_keys}, Type::f32, memory::format_tag::ba}, ctx_.engine, keys_.data());
    memory values_mem({{n_keys, hd}, Type::f32, memory::format_tag::ab}, ctx_.engine, values_.data());
    memory probs_mem({{rows, n_keys}, Type::f32, memory::format_tag::ab}, ctx_.engine, probs_.data());
    // Causal softmax over each row's keys: masked scores are -inf, so they get weight 0.
    if (rows != softmax_rows_ || n_keys != softmax_keys_) {
      softmax_ = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(
          dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, probs_mem.get_desc(), 1), ctx_.engine));
      softmax_rows_ = rows;
      softmax_keys_ = n_keys;
    }
    for (int g = 0; g < s_.n_kv_heads; ++g) {
      // Gather this kv head's keys and values into contiguous [keys][hd] buffers.
      for (int j = 0; j < n_keys; ++j) {
        const float* block = kv.blocks[j / bt] + static_cast<size_t>(j % bt) * hd;
        std::copy_n(block + g * head_stride, hd, keys_.data() + static_cast<size_t>(j) * hd);
        std::copy_n(block + (s_.n_kv_heads + g) * head_stride, hd, values_.data() + static_cast<size_t>(j) * hd);
      }
      for (int h = g * group; h < (g + 1) * group; ++h) {
        memory q_mem({{rows, hd}, Type::f32, memory::dims{row_stride, 1}}, ctx_.engine,
                     const_cast<float*>(q) + static_cast<size_t>(h) * hd);
        memory out_mem({{rows, hd}, Type::f32, memory::dims{row_stride, 1}}, ctx_.engine,
                       out + static_cast<size_t>(h) * hd);
        scores_.execute(ctx_.stream, {{DNNL_ARG_SRC, q_mem}, {DNNL_ARG_WEIGHTS, keys_mem}, {DNNL_ARG_DST, probs_mem}});
        ctx_.stream.wait();
        for (int r = 0; r < rows; ++r) {
          float* row = probs_.data() + static_cast<size_t>(r) * n_keys;
          std::fill(row + first_position + r + 1, row + n_keys, -std::numeric_limits<float>::infinity());
        }
        softmax_.execute(ctx_.stream, {{DNNL_ARG_SRC, probs_mem}, {DNNL_ARG_DST, probs_mem}});
        mix_.execute(ctx_.stream, {{DNNL_ARG_SRC, probs_mem}, {DNNL_ARG_WEIGHTS, values_mem}, {DNNL_ARG_DST, out_mem}});
        ctx_.stream.wait();
      }
    }
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN attention: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status Attention::Run(const float* q, int rows, const int32_t* positions, const std::vector<const SequenceKv*>& kv,
                            float* out) {
  const size_t row_floats = static_cast<size_t>(s_.n_heads) * s_.head_dim;
  // Prompt chunks (consecutive rows of one sequence) as matrices; lone rows one by one.
  std::vector<int> singles;
  for (int r = 0; r < rows;) {
    int end = r + 1;
    while (end < rows && kv[end] == kv[r]) ++end;
    if (end - r >= 4) {
      absl::Status s = RunPrompt(q + r * row_floats, end - r, positions[r], *kv[r], out + r * row_floats);
      if (!s.ok()) return s;
    } else {
      for (int i = r; i < end; ++i) singles.push_back(i);
    }
    r = end;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < singles.size(); ++i) {
    const int r = singles[i];
    RunSingle(q + r * row_floats, positions[r], *kv[r], out + r * row_floats);
  }
  return absl::OkStatus();
}

}  // namespace hetero
