#include "src/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/cpu/cpu_features.h"
#include "src/cpu/lora_delta.h"
#include "src/cpu/quant_matmul.h"
#include "src/runtime/dequantize.h"
#include "src/runtime/model_impl.h"
#include "src/runtime/models/model_definition.h"
#include "src/runtime/status_macros.h"

namespace hetero {
namespace {


void AddBias(float* y, const std::vector<float>& bias, int rows) {
  if (bias.empty()) return;
  const size_t n = bias.size();
  for (int r = 0; r < rows; ++r) AddInPlace(y + r * n, bias.data(), n);
}

}  // namespace

bool CpuHasBf16Matmul() {
  const CpuInfo& cpu = DetectCpu();
  return cpu.avx512f && cpu.avx512bw && cpu.avx512vl;
}

int DefaultCpuThreads() { return std::max(1, DetectCpu().usable_cpus); }

CpuBackend::CpuBackend(const Model& model, const CpuBackendOptions& options)
    : PagedBackend("CPU backend", model.config(), options.kv_block_tokens,
                   options.kv_capacity_tokens > 0 ? options.kv_capacity_tokens : model.config().context_length,
                   options.max_sequences, options.share_kv_prefixes),
      model_(model),
      config_(model.config()),
      options_(options),
      pool_(std::make_unique<ThreadPool>(options.threads)) {}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const Model& model, const CpuBackendOptions& options) {
  if (options.threads < 1 || options.kv_block_tokens < 1 || options.max_sequences < 1 || options.bf16_min_rows < 0) {
    return absl::InvalidArgumentError("CPU backend options: threads, kv_block_tokens, max_sequences and "
                                      "bf16_min_rows must not be negative");
  }
  // oneDNN has bf16 matmuls only from AVX-512 on (emulated without AVX-512 BF16).
  if (!CpuHasBf16Matmul() && (options.precision == CpuPrecision::kBf16 || options.bf16_min_rows > 0)) {
    return absl::UnimplementedError(absl::StrCat("bf16 matrix products need a CPU with AVX-512; this one has: ",
                                                 DetectCpu().FeatureList()));
  }
  auto backend = std::unique_ptr<CpuBackend>(new CpuBackend(model, options));
  HETERO_RETURN_IF_ERROR(backend->Init());
  return backend;
}

// The second pass doubles the integer work of a decode step: with VNNI's vpdpbusd that
// cost 4-22% of decode (Intel Xeon, 2026-12-07); with AVX2's vpmaddubsw chains 24% (Q4_K_M)
// and 41% (Q4_0) there (docs/PERFORMANCE.md, "Decode's second int8 pass"), more than the
// AVX2-only CPUs' lead over llama.cpp (1.55-2.08x) would survive.
bool CpuBackend::GeneratedTokensTakeRemainders() const {
  return options_.precision == CpuPrecision::kAuto && QuantMatmulUsesAvx512();
}

absl::StatusOr<std::unique_ptr<Linear>> CpuBackend::MakeLinear(const GgufTensorInfo& tensor) {
  const bool bf16_cpu = DetectCpu().avx512_bf16;
  switch (options_.precision) {
    case CpuPrecision::kF32:
      return MakeOneDnnLinear(dnnl_, tensor, MatmulPrecision::kF32);
    case CpuPrecision::kBf16:
      return MakeOneDnnLinear(dnnl_, tensor, MatmulPrecision::kBf16);
    case CpuPrecision::kAuto:
    case CpuPrecision::kInt8:  // the same matrices; only generated tokens' rounding differs
      if (QuantizedWeights::Supports(tensor.type) && QuantMatmulIsFast(tensor.type)) {
        // Prompts go through bf16 oneDNN only where that beats the integer kernels: a CPU
        // with native AVX-512 BF16 but no VNNI. Elsewhere the native kernels take every batch
        // (oneDNN has no bf16 matmul at all below AVX-512).
        const bool bf16_prompts = !QuantMatmulUsesAvx512() && bf16_cpu;
        const int min_rows = options_.bf16_min_rows > 0 ? options_.bf16_min_rows : (bf16_prompts ? 8 : kNeverBf16);
        // The file's pages no kernel reads leave our resident set (MappedFile::AdviseUnneeded)
        // as packing goes, a few MiB at a time, so the file's bytes and the packed copy are
        // never both held. A tied embedding table too: a token's lookup reads its row back
        // from the file, one page, so only the rows of tokens seen return. (Gemma 3 270M's
        // table is 70% of its file: dropped only after packing, the load peaked at the file
        // plus the table's copy.)
        const GgufFile* file = model_.impl().gguf.get();
        return MakeQuantLinear(dnnl_, tensor, min_rows,
                               [file](const uint8_t* begin, size_t bytes) { file->AdviseUnneeded({begin, bytes}); });
      }
      return MakeOneDnnLinear(dnnl_, tensor, bf16_cpu ? MatmulPrecision::kBf16 : MatmulPrecision::kF32);
  }
  return absl::InternalError("unknown precision");
}

absl::Status CpuBackend::Init() {
  omp_set_num_threads(options_.threads);
  const GgufFile& file = *model_.impl().gguf;
  const ModelDefinition& d = model_.impl().definition;
  const ModelConfig& c = config_;
  const auto optional_vector = [&](const std::string& name) -> absl::StatusOr<std::vector<float>> {
    if (name.empty()) return std::vector<float>{};
    return LoadFloatTensor(file, name);
  };
  const auto matrix = [&](const TensorSlice& slice) -> absl::StatusOr<std::unique_ptr<Linear>> {
    if (!slice.present()) return nullptr;
    return MakeLinear(SliceTensor(file, slice));
  };
  const CpuExperts::MakeLinearFn expert_matrix = [&](const GgufTensorInfo& t) { return MakeLinear(t); };
  token_embd_ = file.FindTensor(d.token_embd);
  HETERO_ASSIGN_OR_RETURN(output_norm_, LoadFloatTensor(file, d.output_norm));
  HETERO_ASSIGN_OR_RETURN(output_, MakeLinear(*file.FindTensor(d.output)));
  HETERO_ASSIGN_OR_RETURN(const std::vector<float> freq_factors, optional_vector(d.rope_freqs));
  attention_ = std::make_unique<Attention>(
      AttentionShape{c.n_heads, c.n_kv_heads, c.head_dim, options_.kv_block_tokens, d.attention_scale});
  // One rotation table per distinct (base, factor): Gemma 3 has two.
  const RopeVariants rope_variants = DistinctRopes(d);
  for (const auto& [base, factor] : rope_variants.base_and_factor) {
    ropes_.push_back(std::make_unique<Rope>(c, base, factor, freq_factors, d.rope_attn_factor));
  }
  layers_.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerDefinition& ld = d.layers[i];
    Layer& l = layers_[i];
    HETERO_ASSIGN_OR_RETURN(l.attn_norm, LoadFloatTensor(file, ld.attn_norm));
    HETERO_ASSIGN_OR_RETURN(l.ffn_norm, LoadFloatTensor(file, ld.ffn_norm));
    HETERO_ASSIGN_OR_RETURN(l.q_bias, optional_vector(ld.q_bias));
    HETERO_ASSIGN_OR_RETURN(l.k_bias, optional_vector(ld.k_bias));
    HETERO_ASSIGN_OR_RETURN(l.v_bias, optional_vector(ld.v_bias));
    HETERO_ASSIGN_OR_RETURN(l.q_norm, optional_vector(ld.q_norm));
    HETERO_ASSIGN_OR_RETURN(l.k_norm, optional_vector(ld.k_norm));
    HETERO_ASSIGN_OR_RETURN(l.post_attn_norm, optional_vector(ld.post_attn_norm));
    HETERO_ASSIGN_OR_RETURN(l.post_ffn_norm, optional_vector(ld.post_ffn_norm));
    HETERO_ASSIGN_OR_RETURN(l.q, matrix(ld.q));
    HETERO_ASSIGN_OR_RETURN(l.k, matrix(ld.k));
    HETERO_ASSIGN_OR_RETURN(l.v, matrix(ld.v));
    HETERO_ASSIGN_OR_RETURN(l.o, matrix(ld.o));
    HETERO_ASSIGN_OR_RETURN(l.gate, matrix(ld.gate));
    HETERO_ASSIGN_OR_RETURN(l.up, matrix(ld.up));
    HETERO_ASSIGN_OR_RETURN(l.down, matrix(ld.down));
    if (ld.experts.present()) {
      HETERO_ASSIGN_OR_RETURN(l.experts, CpuExperts::Create(file, ld.experts, d.activation, expert_matrix));
    }
    l.qk_norm_per_head = ld.qk_norm_per_head;
    l.sliding_window = ld.sliding_window;
    l.rope = static_cast<size_t>(rope_variants.of_layer[i]);
  }

  const CpuInfo& cpu = DetectCpu();
  info_.kind = DeviceKind::kCpu;
  info_.name = absl::StrCat("cpu (", cpu.name.empty() ? "unknown" : cpu.name, ", ", options_.threads,
                            options_.threads == 1 ? " thread)" : " threads)");
  info_.threads = options_.threads;
  uint64_t bytes = output_->resident_bytes();
  // Every kernel path the layers use, most matrices first (a Q4_K_M file mixes formats).
  std::vector<std::pair<std::string, int>> paths;
  for (const Layer& l : layers_) {
    std::vector<const Linear*> matrices = {l.q.get(), l.k.get(), l.v.get(), l.o.get()};
    if (l.experts != nullptr) {
      bytes += l.experts->router_bytes();
      const std::vector<const Linear*> more = l.experts->matrices();
      matrices.insert(matrices.end(), more.begin(), more.end());
    } else {
      matrices.insert(matrices.end(), {l.gate.get(), l.up.get(), l.down.get()});
    }
    for (const Linear* m : matrices) {
      bytes += m->resident_bytes();
      const std::string path = m->Describe();
      auto it = std::find_if(paths.begin(), paths.end(), [&](const auto& p) { return p.first == path; });
      if (it == paths.end()) {
        paths.emplace_back(path, 1);
      } else {
        ++it->second;
      }
    }
  }
  std::stable_sort(paths.begin(), paths.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  info_.weight_format = absl::StrCat(output_->Describe(), " output; ");
  if (paths.size() == 1) {
    absl::StrAppend(&info_.weight_format, paths.front().first, " layers");
  } else {
    absl::StrAppend(&info_.weight_format, "layers: ");
    for (size_t i = 0; i < paths.size(); ++i) {
      absl::StrAppend(&info_.weight_format, i == 0 ? "" : ", ", paths[i].second, " ", paths[i].first);
    }
  }
  if (absl::StrContains(info_.weight_format, "native ")) {
    absl::StrAppend(&info_.weight_format, GeneratedTokensTakeRemainders()
                                              ? "; int8 activations, two passes for generated tokens"
                                              : "; int8 activations, one pass");
  }
  info_.weight_bytes = bytes;
  info_.max_sequences = options_.max_sequences;
  info_.max_context = c.context_length;
  return absl::OkStatus();
}

absl::StatusOr<SavedSequence> CpuBackend::SwapOut(SequenceId seq) {
  MutexLock lock(&mutex_);
  HETERO_ASSIGN_OR_RETURN(int length, kv_.Length(seq));
  SavedSequence saved;
  saved.tokens = length;
  saved.token_ids = kv_.Tokens(seq);
  saved.adapter = AdapterOf(seq);
  const std::vector<int32_t>& blocks = kv_.Blocks(seq);
  HETERO_ASSIGN_OR_RETURN(saved.data, HostMemoryPool::Default()->Allocate(blocks.size() * kv_block_floats_));
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::copy_n(KvBlock(blocks[i]), kv_block_floats_, saved.data.data() + i * kv_block_floats_);
  }
  kv_.FreeSequence(seq);
  expert_traffic_.erase(seq);
  adapters_.erase(seq);
  return saved;
}

absl::StatusOr<SequenceId> CpuBackend::SwapIn(const SavedSequence& saved) {
  HETERO_RETURN_IF_ERROR(SavedBlocks(saved).status());
  MutexLock lock(&mutex_);
  HETERO_ASSIGN_OR_RETURN(const SwapInTarget target, NewSequenceFor(saved));
  const std::vector<int32_t>& blocks = kv_.Blocks(target.seq);
  for (size_t i = target.first_block_to_copy; i < blocks.size(); ++i) {
    std::copy_n(saved.data.data() + i * kv_block_floats_, kv_block_floats_, KvBlock(blocks[i]));
  }
  kv_.Advance(target.seq, saved.tokens - target.attached_tokens);
  return target.seq;
}

absl::Status CpuBackend::CopyKvBlocks(absl::Span<const KvBlockTable::BlockCopy> copies) {
  for (const KvBlockTable::BlockCopy& c : copies) std::copy_n(KvBlock(c.from), kv_block_floats_, KvBlock(c.to));
  return absl::OkStatus();
}

float* CpuBackend::KvBlock(int block) {
  if (static_cast<size_t>(block) >= kv_blocks_.size()) kv_blocks_.resize(block + 1);
  auto& storage = kv_blocks_[block];
  if (storage == nullptr) storage.reset(new float[kv_block_floats_]);
  return storage.get();
}

ExpertUsage CpuBackend::expert_usage() const {
  ExpertUsage usage;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].experts != nullptr) usage.layers.push_back({static_cast<int>(i), layers_[i].experts->usage()});
  }
  return usage;
}

absl::Status CpuBackend::Forward(const std::vector<Row>& rows, const std::vector<int>& logit_rows, float* logits,
                                float* hidden, int hidden_layers) {
  const ModelConfig& c = config_;
  const ModelDefinition& d = model_.impl().definition;
  const int T = static_cast<int>(rows.size());
  const int E = c.n_embd;
  const int qd = c.n_heads * c.head_dim;
  const int kvd = c.n_kv_heads * c.head_dim;
  const int F = c.n_ff;
  Workspace& w = ws_;
  // Our kernels run on the backend's pool whichever thread calls. oneDNN (the f32 and bf16
  // modes) uses OpenMP, whose thread count is per calling thread: set it here too, or a
  // worker thread's oneDNN calls would use every CPU the process can see.
  const ScopedThreadPool use_pool(pool_.get());
  omp_set_num_threads(options_.threads);
  w.x.resize(static_cast<size_t>(T) * E);
  w.h.resize(static_cast<size_t>(T) * E);
  w.q.resize(static_cast<size_t>(T) * qd);
  w.k.resize(static_cast<size_t>(T) * kvd);
  w.v.resize(static_cast<size_t>(T) * kvd);
  w.att.resize(static_cast<size_t>(T) * qd);
  w.gate.resize(static_cast<size_t>(T) * F);
  w.up.resize(static_cast<size_t>(T) * F);
  w.tmp.resize(static_cast<size_t>(T) * E);

  // Token embeddings: dequantize each token's row.
  const TensorTypeTraits& et = GetTensorTypeTraits(token_embd_->type);
  const size_t embd_row_bytes = static_cast<size_t>(E) / et.block_size * et.type_size;
  std::vector<int32_t> positions(T);
  for (int r = 0; r < T; ++r) {
    positions[r] = rows[r].position;
    if (rows[r].token < 0 || rows[r].token >= c.n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", rows[r].token, " is outside the vocabulary (0..",
                                                     c.n_vocab - 1, ")"));
    }
    HETERO_RETURN_IF_ERROR(Dequantize(token_embd_->type,
                                      token_embd_->data.subspan(rows[r].token * embd_row_bytes, embd_row_bytes),
                                      absl::MakeSpan(w.x.data() + static_cast<size_t>(r) * E, E)));
  }
  if (d.embedding_scale != 1.0f) ScaleInPlace(w.x.data(), d.embedding_scale, static_cast<size_t>(T) * E);
  // x += residual_scale * norm(tmp), the norm where the layer has one after its block.
  const auto add_residual = [&](const std::vector<float>& post_norm, int rows_) {
    const size_t n = static_cast<size_t>(rows_) * E;
    if (!post_norm.empty()) RmsNorm(w.tmp.data(), post_norm.data(), rows_, E, c.rms_norm_eps, w.tmp.data());
    if (d.residual_scale == 1.0f) {
      AddInPlace(w.x.data(), w.tmp.data(), n);
    } else {
      AddScaledInPlace(w.x.data(), w.tmp.data(), d.residual_scale, n);
    }
  };

  // LoRA: the runs of consecutive rows whose sequence has an adapter, and the low-rank term
  // each adds after a matrix product (input and output rows as the adapter's matrix says).
  struct AdapterRun {
    int begin, end;
    const LoraAdapter* adapter;
    float scale;
  };
  std::vector<AdapterRun> adapter_runs;
  if (!adapters_.empty()) {
    for (int r = 0; r < T; ++r) {
      if (r == 0 || rows[r].seq != rows[r - 1].seq) {
        const SequenceAdapter& a = AdapterOf(rows[r].seq);
        if (a.active()) adapter_runs.push_back({r, r + 1, a.adapter.get(), a.scale});
      } else if (!adapter_runs.empty() && adapter_runs.back().end == r) {
        adapter_runs.back().end = r + 1;
      }
    }
  }
  const auto add_lora = [&](int l, LoraMatrix LoraLayer::*matrix, const float* x, float* y) {
    for (const AdapterRun& run : adapter_runs) {
      const LoraMatrix& m = run.adapter->layers[static_cast<size_t>(l)].*matrix;
      if (!m.present()) continue;
      AddLoraDelta(m, run.scale, x + static_cast<size_t>(run.begin) * m.inputs, run.end - run.begin,
                   y + static_cast<size_t>(run.begin) * m.outputs);
    }
  };

  // The rotation of this batch's positions, once per distinct rope (Gemma 3 has two).
  std::vector<RopeAngles> rope_angles;
  for (const auto& rope : ropes_) rope_angles.push_back(rope->Angles(positions.data(), T));

  const int bt = options_.kv_block_tokens;
  const size_t layer_stride = kv_layout_.layer_floats();
  const int n_layers = hidden != nullptr && hidden_layers > 0 ? std::min(hidden_layers, c.n_layers) : c.n_layers;
  for (int l = 0; l < n_layers; ++l) {
    Layer& layer = layers_[l];
    // Attention block.
    RmsNorm(w.x.data(), layer.attn_norm.data(), T, E, c.rms_norm_eps, w.h.data());
    {
      const Linear* qkv[] = {layer.q.get(), layer.k.get(), layer.v.get()};
      float* out[] = {w.q.data(), w.k.data(), w.v.data()};
      HETERO_RETURN_IF_ERROR(ForwardSameInput(qkv, w.h.data(), T, out, w.scratch));
      add_lora(l, &LoraLayer::q, w.h.data(), w.q.data());
      add_lora(l, &LoraLayer::k, w.h.data(), w.k.data());
      add_lora(l, &LoraLayer::v, w.h.data(), w.v.data());
    }
    AddBias(w.q.data(), layer.q_bias, T);
    AddBias(w.k.data(), layer.k_bias, T);
    AddBias(w.v.data(), layer.v_bias, T);
    if (layer.qk_norm_per_head) {
      if (!layer.q_norm.empty()) RmsNorm(w.q.data(), layer.q_norm.data(), T * c.n_heads, c.head_dim, c.rms_norm_eps, w.q.data());
      if (!layer.k_norm.empty()) {
        RmsNorm(w.k.data(), layer.k_norm.data(), T * c.n_kv_heads, c.head_dim, c.rms_norm_eps, w.k.data());
      }
    } else {  // one norm over each row's whole q, and its whole k (OLMoE)
      if (!layer.q_norm.empty()) RmsNorm(w.q.data(), layer.q_norm.data(), T, qd, c.rms_norm_eps, w.q.data());
      if (!layer.k_norm.empty()) RmsNorm(w.k.data(), layer.k_norm.data(), T, kvd, c.rms_norm_eps, w.k.data());
    }
    const Rope& rope = *ropes_[layer.rope];
    rope.Apply(w.q.data(), T, c.n_heads, rope_angles[layer.rope]);
    rope.Apply(w.k.data(), T, c.n_kv_heads, rope_angles[layer.rope]);
    // Store this layer's keys and values in the shared block layout (src/runtime/kv_layout.h).
    for (int r = 0; r < T; ++r) {
      float* block = KvBlock(kv_.BlockOf(rows[r].seq, rows[r].position));
      const int slot = rows[r].position % bt;
      for (int g = 0; g < c.n_kv_heads; ++g) {
        std::copy_n(w.k.data() + static_cast<size_t>(r) * kvd + g * c.head_dim, c.head_dim,
                    block + kv_layout_.Offset(l, /*values=*/false, g, slot));
        std::copy_n(w.v.data() + static_cast<size_t>(r) * kvd + g * c.head_dim, c.head_dim,
                    block + kv_layout_.Offset(l, /*values=*/true, g, slot));
      }
    }
    // Each sequence's KV blocks for this layer.
    std::vector<SequenceKv> seq_kv;
    std::vector<const SequenceKv*> row_kv(T);
    for (int r = 0; r < T; ++r) {
      if (r == 0 || rows[r].seq != rows[r - 1].seq) {
        SequenceKv skv;
        for (int32_t b : kv_.Blocks(rows[r].seq)) skv.blocks.push_back(KvBlock(b) + l * layer_stride);
        seq_kv.push_back(std::move(skv));
      }
    }
    for (int r = 0, i = -1; r < T; ++r) {
      if (r == 0 || rows[r].seq != rows[r - 1].seq) ++i;
      row_kv[r] = &seq_kv[i];
    }
    attention_->Run(w.q.data(), T, positions.data(), row_kv, layer.sliding_window, w.att.data());
    HETERO_RETURN_IF_ERROR(layer.o->Forward(w.att.data(), T, w.tmp.data(), w.scratch));
    add_lora(l, &LoraLayer::o, w.att.data(), w.tmp.data());
    add_residual(layer.post_attn_norm, T);
    // Feed-forward block.
    RmsNorm(w.x.data(), layer.ffn_norm.data(), T, E, c.rms_norm_eps, w.h.data());
    if (layer.experts != nullptr) {
      HETERO_RETURN_IF_ERROR(layer.experts->Forward(w.h.data(), T, w.tmp.data(), w.scratch));
    } else {
      const Linear* gate_up[] = {layer.gate.get(), layer.up.get()};
      float* out[] = {w.gate.data(), w.up.data()};
      HETERO_RETURN_IF_ERROR(ForwardSameInput(gate_up, w.h.data(), T, out, w.scratch));
      add_lora(l, &LoraLayer::gate, w.h.data(), w.gate.data());
      add_lora(l, &LoraLayer::up, w.h.data(), w.up.data());
      if (d.activation == FfnActivation::kGeluTanh) {
        GeluTanhMul(w.gate.data(), w.up.data(), static_cast<size_t>(T) * F);
      } else {
        SiluMul(w.gate.data(), w.up.data(), static_cast<size_t>(T) * F);
      }
      HETERO_RETURN_IF_ERROR(layer.down->Forward(w.gate.data(), T, w.tmp.data(), w.scratch));
      add_lora(l, &LoraLayer::down, w.gate.data(), w.tmp.data());
    }
    add_residual(layer.post_ffn_norm, T);
  }
  if (hidden != nullptr) {  // embeddings: every row's final-norm output, no logits
    RmsNorm(w.x.data(), output_norm_.data(), T, E, c.rms_norm_eps, hidden);
    for (const Row& r : rows) kv_.Advance(r.seq, 1);
    return absl::OkStatus();
  }
  // Final norm and logits, only for the rows asked for.
  const int n_out = static_cast<int>(logit_rows.size());
  for (int i = 0; i < n_out; ++i) {
    std::copy_n(w.x.data() + static_cast<size_t>(logit_rows[i]) * E, E, w.tmp.data() + static_cast<size_t>(i) * E);
  }
  RmsNorm(w.tmp.data(), output_norm_.data(), n_out, E, c.rms_norm_eps, w.h.data());
  HETERO_RETURN_IF_ERROR(output_->Forward(w.h.data(), n_out, logits, w.scratch));
  for (const AdapterRun& run : adapter_runs) {
    const LoraMatrix& m = run.adapter->output;
    if (!m.present()) continue;
    for (int i = 0; i < n_out; ++i) {
      if (logit_rows[i] >= run.begin && logit_rows[i] < run.end) {
        AddLoraDelta(m, run.scale, w.h.data() + static_cast<size_t>(i) * E, 1, logits + static_cast<size_t>(i) * c.n_vocab);
      }
    }
  }
  if (d.logit_scale != 1.0f) ScaleInPlace(logits, d.logit_scale, static_cast<size_t>(n_out) * c.n_vocab);
  for (const Row& r : rows) kv_.Advance(r.seq, 1);
  return absl::OkStatus();
}

void CpuBackend::CountExperts(absl::Span<const SequenceChunk> chunks) {
  if (const int per_token = RoutedEvaluationsPerToken(model_.impl().definition); per_token > 0) {
    for (const SequenceChunk& c : chunks) {
      AddExpertTraffic(c.seq, {static_cast<int64_t>(c.tokens.size()) * per_token, 0, 0, 0});
    }
  }
}

absl::Status CpuBackend::PrefillAllLogits(SequenceId seq, absl::Span<const int32_t> tokens, absl::Span<float> logits) {
  if (logits.size() < tokens.size() * config_.n_vocab) return absl::InvalidArgumentError("logits buffer too small");
  if (tokens.empty()) return absl::InvalidArgumentError("PrefillAllLogits needs at least one token");
  const SequenceChunk chunk{seq, tokens};
  MutexLock lock(&mutex_);
  HETERO_ASSIGN_OR_RETURN(std::vector<int> lengths, ReserveChunks({&chunk, 1}));
  std::vector<Row> rows;
  std::vector<int> all;
  for (size_t i = 0; i < tokens.size(); ++i) {
    rows.push_back({seq, static_cast<int32_t>(lengths[0] + i), tokens[i]});
    all.push_back(static_cast<int>(i));
  }
  absl::Status s = Forward(rows, all, logits.data());
  if (!s.ok()) {
    RollBack({&chunk, 1}, lengths);
    return s;
  }
  CountExperts({&chunk, 1});
  return s;
}

absl::Status CpuBackend::Step(absl::Span<const SequenceChunk> chunks, absl::Span<float> logits) {
  if (logits.size() < chunks.size() * config_.n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat("logits buffer holds ", logits.size(), " floats, need ",
                                                   chunks.size() * config_.n_vocab));
  }
  MutexLock lock(&mutex_);
  HETERO_ASSIGN_OR_RETURN(std::vector<int> lengths, ReserveChunks(chunks));
  // Prompt chunks, then generated ones, each group one pass: their activations are rounded
  // differently (SequenceChunk::generated). The engine never mixes them in one step.
  const size_t V = static_cast<size_t>(config_.n_vocab);
  absl::Status s = absl::OkStatus();
  for (const bool generated : {false, true}) {
    std::vector<Row> rows;
    std::vector<int> last_rows;
    std::vector<size_t> chosen;
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (chunks[i].generated != generated) continue;
      for (size_t t = 0; t < chunks[i].tokens.size(); ++t) {
        rows.push_back({chunks[i].seq, static_cast<int32_t>(lengths[i] + t), chunks[i].tokens[t]});
      }
      last_rows.push_back(static_cast<int>(rows.size()) - 1);
      chosen.push_back(i);
    }
    if (chosen.empty()) continue;
    const bool whole_step = chosen.size() == chunks.size();
    std::vector<float> part(whole_step ? 0 : chosen.size() * V);
    ws_.scratch.decode = generated || rows.size() == chosen.size();  // one token per sequence
    ws_.scratch.remainders = generated && GeneratedTokensTakeRemainders();
    s = Forward(rows, last_rows, whole_step ? logits.data() : part.data());
    ws_.scratch.decode = ws_.scratch.remainders = false;
    if (!s.ok()) break;
    for (size_t c = 0; c < part.size() / V; ++c) {
      std::copy_n(part.data() + c * V, V, logits.data() + chosen[c] * V);
    }
  }
  if (!s.ok()) {
    RollBack(chunks, lengths);
    return s;
  }
  CountExperts(chunks);
  return s;
}

absl::StatusOr<std::vector<std::vector<float>>> CpuBackend::Embed(absl::Span<const std::vector<int32_t>> inputs,
                                                                  EmbeddingPooling pooling, int layers) {
  const int E = config_.n_embd;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) return absl::InvalidArgumentError(absl::StrCat("embedding input ", i, " has no tokens"));
    if (static_cast<int64_t>(inputs[i].size()) > config_.context_length) {
      return absl::OutOfRangeError(absl::StrCat("embedding input ", i, " has ", inputs[i].size(),
                                                " tokens, more than the context length ", config_.context_length));
    }
  }
  std::vector<std::vector<float>> out(inputs.size());
  std::vector<float> hidden;
  MutexLock lock(&mutex_);
  for (size_t first = 0; first < inputs.size();) {
    // The next group: inputs while they total at most kEmbedBatchTokens tokens and fit in
    // the KV blocks free now (at least one input; if even that does not fit, Reserve says so).
    const int bt = kv_.block_tokens();
    const int free_blocks = kv_.available_blocks();
    size_t last = first, tokens = 0;
    int blocks = 0;
    while (last < inputs.size()) {
      const int need = static_cast<int>((inputs[last].size() + bt - 1) / bt);
      if (last > first && (tokens + inputs[last].size() > kEmbedBatchTokens || blocks + need > free_blocks)) break;
      tokens += inputs[last].size();
      blocks += need;
      ++last;
    }
    std::vector<SequenceChunk> chunks;
    for (size_t i = first; i < last; ++i) {
      chunks.push_back({kv_.NewSequence(), inputs[i]});
      kv_.MarkPrivate(chunks.back().seq);  // early exit leaves later layers unwritten: never share
    }
    absl::StatusOr<std::vector<int>> lengths = ReserveChunks(chunks);
    absl::Status status = lengths.status();
    if (status.ok()) {
      std::vector<Row> rows;
      for (const SequenceChunk& chunk : chunks) {
        for (size_t t = 0; t < chunk.tokens.size(); ++t) rows.push_back({chunk.seq, static_cast<int32_t>(t), chunk.tokens[t]});
      }
      hidden.resize(rows.size() * static_cast<size_t>(E));
      status = Forward(rows, {}, nullptr, hidden.data(), layers);
    }
    for (const SequenceChunk& chunk : chunks) kv_.FreeSequence(chunk.seq);
    if (!status.ok()) return status;
    // Pool in double, then scale to unit length.
    size_t row = 0;
    for (size_t i = first; i < last; ++i) {
      const size_t n = inputs[i].size();
      std::vector<double> sum(E, 0.0);
      const size_t from = pooling == EmbeddingPooling::kLastToken ? row + n - 1 : row;
      for (size_t r = from; r < row + n; ++r) {
        for (int e = 0; e < E; ++e) sum[e] += hidden[r * E + e];
      }
      double norm = 0;
      for (double v : sum) norm += v * v;
      norm = std::sqrt(norm);
      out[i].resize(E);
      for (int e = 0; e < E; ++e) out[i][e] = norm > 0 ? static_cast<float>(sum[e] / norm) : 0.0f;
      row += n;
    }
    first = last;
  }
  return out;
}

}  // namespace hetero
