#include "src/gpu/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hetero/devices.h"
#include "src/cpu/host_experts.h"
#include "src/runtime/rope.h"
#include "src/gpu/cuda_module_abi.h"
#include "src/gpu/cuda_module_loader.h"
#include "src/runtime/dequantize.h"
#include "src/runtime/fp16.h"
#include "src/runtime/model_impl.h"
#include "src/runtime/models/model_definition.h"
#include "src/runtime/expert_usage.h"
#include "src/runtime/log_internal.h"
#include "src/runtime/status_macros.h"

namespace hetero {

struct CudaBackend::Api {
  hetero_cuda_model_create_fn create = nullptr;
  hetero_cuda_model_destroy_fn destroy = nullptr;
  hetero_cuda_model_forward_fn forward = nullptr;
  hetero_cuda_model_copy_kv_fn copy_kv = nullptr;
  hetero_cuda_model_device_bytes_fn device_bytes = nullptr;
  hetero_cuda_model_expert_counts_fn expert_counts = nullptr;
};

namespace {

absl::Status ModuleStatus(int32_t code, const char* what, const char* message) {
  const std::string text = absl::StrCat("CUDA backend: ", what, ": ", message);
  switch (code) {
    case HETERO_CUDA_OK:
      return absl::OkStatus();
    case HETERO_CUDA_INVALID_ARGUMENT:
      return absl::InvalidArgumentError(text);
    case HETERO_CUDA_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(text);
    default:
      return absl::InternalError(text);
  }
}

// A matrix as the module takes it: its GGUF blocks in place where the module reads the
// format, else a float16 copy (the module's only copy then). view.f16 points into f16:
// move it, never copy it.
struct PreparedMatrix {
  std::vector<uint16_t> f16;
  hetero_cuda_matrix view{};
};

// The module's id for the formats its GEMV reads as GGUF blocks; F16 for the rest.
int32_t ModuleFormat(TensorType type) {
  static constexpr std::pair<TensorType, int32_t> kNative[] = {
      {TensorType::kQ4_0, HETERO_CUDA_WEIGHTS_Q4_0}, {TensorType::kQ4_1, HETERO_CUDA_WEIGHTS_Q4_1},
      {TensorType::kQ5_0, HETERO_CUDA_WEIGHTS_Q5_0}, {TensorType::kQ5_1, HETERO_CUDA_WEIGHTS_Q5_1},
      {TensorType::kQ8_0, HETERO_CUDA_WEIGHTS_Q8_0}, {TensorType::kQ4_K, HETERO_CUDA_WEIGHTS_Q4_K},
      {TensorType::kQ5_K, HETERO_CUDA_WEIGHTS_Q5_K}, {TensorType::kQ6_K, HETERO_CUDA_WEIGHTS_Q6_K},
      {TensorType::kQ2_K, HETERO_CUDA_WEIGHTS_Q2_K}, {TensorType::kQ3_K, HETERO_CUDA_WEIGHTS_Q3_K},
      {TensorType::kIQ4_NL, HETERO_CUDA_WEIGHTS_IQ4_NL}, {TensorType::kIQ4_XS, HETERO_CUDA_WEIGHTS_IQ4_XS}};
  for (const auto& [t, format] : kNative) {
    if (t == type) return format;
  }
  return HETERO_CUDA_WEIGHTS_F16;
}

absl::StatusOr<PreparedMatrix> PrepareMatrix(const GgufTensorInfo* t, absl::string_view name) {
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("tensor '", name, "' is missing"));
  if (t->dims.size() != 2) return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' is not a matrix"));
  PreparedMatrix m;
  const int64_t cols = t->dims[0], rows = t->dims[1];
  m.view.rows = static_cast<int32_t>(rows);
  m.view.cols = static_cast<int32_t>(cols);
  m.view.format = ModuleFormat(t->type);
  if (m.view.format != HETERO_CUDA_WEIGHTS_F16) {
    m.view.blocks = t->data.data();
    m.view.blocks_bytes = t->data.size();
    return m;
  }
  std::vector<float> f32(static_cast<size_t>(rows * cols));
  HETERO_RETURN_IF_ERROR(DequantizeTensor(*t, absl::MakeSpan(f32)));
  m.f16.resize(f32.size());
  for (size_t i = 0; i < f32.size(); ++i) m.f16[i] = Fp32ToFp16(f32[i]);
  m.view.f16 = m.f16.data();
  return m;  // moved (C++20 implicit move into the StatusOr): view.f16 stays valid
}


// The steps of a model definition the CUDA module does not run (everything else in the
// definition's shape it does); refused by name, and the model runs on the other devices.
absl::Status CheckModuleRuns(const ModelConfig& c, const ModelDefinition& d) {
  std::vector<std::string> missing;
  const auto need = [&](bool ok, const char* step) {
    if (!ok && std::find(missing.begin(), missing.end(), step) == missing.end()) missing.push_back(step);
  };
  for (const LayerDefinition& l : d.layers) {
    need(!l.experts.present() || l.experts.used <= 16, "more than 16 experts per token");
    // The module adds biases and norms q and k in one kernel, in that order, as the CPU does;
    // no architecture has both yet, so the pair is not tested and not taken.
    need((l.q_norm.empty() && l.k_norm.empty()) || (l.q_bias.empty() && l.k_bias.empty()), "q/k biases with q/k norms");
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat("the CUDA module does not run ", absl::StrJoin(missing, ", "),
                                               " (", c.architecture, ") yet"));
}

}  // namespace


CudaBackend::CudaBackend(const Model& model, const CudaBackendOptions& options)
    : PagedBackend("CUDA backend", model.config(), options.kv_block_tokens,
                   options.kv_capacity_tokens > 0 ? options.kv_capacity_tokens : 4 * model.config().context_length,
                   options.max_sequences, options.share_kv_prefixes),
      model_(model),
      config_(model.config()),
      options_(options),
      api_(std::make_unique<Api>()) {}

CudaBackend::~CudaBackend() {
  if (device_model_ != nullptr) api_->destroy(device_model_);
}

int32_t CudaBackend::RunHostExperts(void* self, int32_t layer, int32_t rows, const float* h, const int32_t* choices,
                                    const float* weights, float* out, char* message, size_t message_size) {
  auto* backend = static_cast<CudaBackend*>(self);
  const absl::Status s = backend->host_experts_ == nullptr
                             ? absl::FailedPreconditionError("no host experts")
                             : backend->host_experts_->Evaluate(layer, rows, h, choices, weights, out);
  if (s.ok()) return 0;
  std::snprintf(message, message_size, "%s", std::string(s.message()).c_str());
  return 1;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const Model& model, const CudaBackendOptions& options) {
  if (options.device < 0 || options.max_sequences < 1 || options.kv_block_tokens < 1 || options.kv_capacity_tokens < 0 ||
      options.max_rows_per_pass < 1) {
    return absl::InvalidArgumentError("CUDA backend options: device, max_sequences, kv_block_tokens and "
                                      "max_rows_per_pass must be positive");
  }
  const CudaInfo& cuda = CudaProbe();
  if (!cuda.available) return absl::UnavailableError(absl::StrCat("no usable CUDA device: ", cuda.notice));
  if (options.device >= static_cast<int>(cuda.devices.size())) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", options.device, " does not exist (",
                                                   cuda.devices.size(), " found)"));
  }
  auto backend = std::unique_ptr<CudaBackend>(new CudaBackend(model, options));
  HETERO_RETURN_IF_ERROR(backend->Init());
  return backend;
}

absl::Status CudaBackend::Init() {
  Api& api = *api_;
  api.create = reinterpret_cast<hetero_cuda_model_create_fn>(CudaModuleSymbol(HETERO_CUDA_MODEL_CREATE_SYMBOL));
  api.destroy = reinterpret_cast<hetero_cuda_model_destroy_fn>(CudaModuleSymbol(HETERO_CUDA_MODEL_DESTROY_SYMBOL));
  api.forward = reinterpret_cast<hetero_cuda_model_forward_fn>(CudaModuleSymbol(HETERO_CUDA_MODEL_FORWARD_SYMBOL));
  api.copy_kv = reinterpret_cast<hetero_cuda_model_copy_kv_fn>(CudaModuleSymbol(HETERO_CUDA_MODEL_COPY_KV_SYMBOL));
  api.device_bytes =
      reinterpret_cast<hetero_cuda_model_device_bytes_fn>(CudaModuleSymbol(HETERO_CUDA_MODEL_DEVICE_BYTES_SYMBOL));
  api.expert_counts =
      reinterpret_cast<hetero_cuda_model_expert_counts_fn>(CudaModuleSymbol(HETERO_CUDA_MODEL_EXPERT_COUNTS_SYMBOL));
  if (api.create == nullptr || api.destroy == nullptr || api.forward == nullptr || api.copy_kv == nullptr ||
      api.device_bytes == nullptr || api.expert_counts == nullptr) {
    return absl::UnavailableError("the CUDA module lacks the model entry points");
  }
  const ModelConfig& c = config_;
  const GgufFile& file = *model_.impl().gguf;
  const ModelDefinition& def = model_.impl().definition;
  HETERO_RETURN_IF_ERROR(CheckModuleRuns(c, def));
  std::vector<float> freq_factors;
  if (!def.rope_freqs.empty()) {
    HETERO_ASSIGN_OR_RETURN(freq_factors, LoadFloatTensor(file, def.rope_freqs));
  }
  // One RoPE table per distinct (base, linear factor) among the layers, back to back.
  const RopeVariants rope_variants = DistinctRopes(def);
  std::vector<double> rope_inv_freq;
  for (const auto& [base, factor] : rope_variants.base_and_factor) {
    const std::vector<double> table = RopeInverseFrequencies(c.rope_dim, base, factor, freq_factors);
    rope_inv_freq.insert(rope_inv_freq.end(), table.begin(), table.end());
  }

  // Host copies live until the module has uploaded them.
  const GgufTensorInfo* token_embd = file.FindTensor(def.token_embd);
  HETERO_ASSIGN_OR_RETURN(PreparedMatrix embd, PrepareMatrix(token_embd, def.token_embd));
  HETERO_ASSIGN_OR_RETURN(std::vector<float> output_norm, LoadFloatTensor(file, def.output_norm));
  PreparedMatrix output;
  if (def.output == def.token_embd) {
    output.view = embd.view;  // the same data, which tells the module to hold one copy
  } else {
    HETERO_ASSIGN_OR_RETURN(output, PrepareMatrix(file.FindTensor(def.output), def.output));
  }
  struct HostLayer {
    std::vector<float> attn_norm, ffn_norm, q_bias, k_bias, v_bias, q_norm, k_norm, post_attn_norm, post_ffn_norm;
    std::vector<float> router, shared_gate_input;
    PreparedMatrix q, k, v, o, gate, up, down, expert_gate, expert_up, expert_down, shared_gate, shared_up, shared_down;
  };
  const auto optional_vector = [&](const std::string& name) -> absl::StatusOr<std::vector<float>> {
    if (name.empty()) return std::vector<float>{};
    return LoadFloatTensor(file, name);
  };
  std::vector<HostLayer> host(c.n_layers);
  std::set<std::string> native, as_f16;  // the matrix formats, by how decode reads them
  const auto note_format = [&](const PreparedMatrix& m, TensorType type) {
    (m.view.format == HETERO_CUDA_WEIGHTS_F16 && type != TensorType::kF16 ? as_f16 : native).insert(TensorTypeName(type));
  };
  note_format(output, file.FindTensor(def.output)->type);
  std::vector<hetero_cuda_layer> layers(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerDefinition& ld = def.layers[i];
    HostLayer& h = host[i];
    HETERO_ASSIGN_OR_RETURN(h.attn_norm, LoadFloatTensor(file, ld.attn_norm));
    HETERO_ASSIGN_OR_RETURN(h.ffn_norm, LoadFloatTensor(file, ld.ffn_norm));
    HETERO_ASSIGN_OR_RETURN(h.q_bias, optional_vector(ld.q_bias));
    HETERO_ASSIGN_OR_RETURN(h.k_bias, optional_vector(ld.k_bias));
    HETERO_ASSIGN_OR_RETURN(h.v_bias, optional_vector(ld.v_bias));
    HETERO_ASSIGN_OR_RETURN(h.q_norm, optional_vector(ld.q_norm));
    HETERO_ASSIGN_OR_RETURN(h.k_norm, optional_vector(ld.k_norm));
    HETERO_ASSIGN_OR_RETURN(h.post_attn_norm, optional_vector(ld.post_attn_norm));
    HETERO_ASSIGN_OR_RETURN(h.post_ffn_norm, optional_vector(ld.post_ffn_norm));
    const bool moe = ld.experts.present();
    std::vector<std::pair<PreparedMatrix*, const TensorSlice*>> matrices = {
        {&h.q, &ld.q}, {&h.k, &ld.k}, {&h.v, &ld.v}, {&h.o, &ld.o}};
    if (!moe) matrices.insert(matrices.end(), {{&h.gate, &ld.gate}, {&h.up, &ld.up}, {&h.down, &ld.down}});
    for (const auto& [dst, slice] : matrices) {
      const GgufTensorInfo view = SliceTensor(file, *slice);
      HETERO_ASSIGN_OR_RETURN(*dst, PrepareMatrix(&view, slice->tensor));
      note_format(*dst, view.type);
    }
    hetero_cuda_layer& l = layers[i];
    if (moe) {
      const ExpertsDefinition& e = ld.experts;
      HETERO_ASSIGN_OR_RETURN(h.router, LoadFloatTensor(file, e.router));
      // Each kind of expert matrix whole, read in place where its format has a GEMV.
      const auto stacked = [&](const std::string& name, PreparedMatrix& dst) -> absl::Status {
        const GgufTensorInfo view = StackedExperts(file, name);
        HETERO_ASSIGN_OR_RETURN(dst, PrepareMatrix(&view, name));
        note_format(dst, view.type);
        return absl::OkStatus();
      };
      HETERO_RETURN_IF_ERROR(stacked(e.gate, h.expert_gate));
      HETERO_RETURN_IF_ERROR(stacked(e.up, h.expert_up));
      HETERO_RETURN_IF_ERROR(stacked(e.down, h.expert_down));
      l.n_experts = e.count;
      l.n_experts_used = e.used;
      l.expert_n_ff = e.n_ff;
      l.normalize_expert_weights = e.normalize_weights ? 1 : 0;
      l.router = h.router.data();
      l.expert_gate = h.expert_gate.view;
      l.expert_up = h.expert_up.view;
      l.expert_down = h.expert_down.view;
      if (e.has_shared()) {
        HETERO_ASSIGN_OR_RETURN(h.shared_gate_input, LoadFloatTensor(file, e.shared_gate_input));
        const std::pair<PreparedMatrix*, const std::string*> shared[] = {
            {&h.shared_gate, &e.shared_gate}, {&h.shared_up, &e.shared_up}, {&h.shared_down, &e.shared_down}};
        for (const auto& [dst, name] : shared) {
          HETERO_ASSIGN_OR_RETURN(*dst, PrepareMatrix(file.FindTensor(*name), *name));
          note_format(*dst, file.FindTensor(*name)->type);
        }
        l.shared_gate_input = h.shared_gate_input.data();
        l.shared_n_ff = e.shared_n_ff;
        l.shared_gate = h.shared_gate.view;
        l.shared_up = h.shared_up.view;
        l.shared_down = h.shared_down.view;
      }
    }
    l.attn_norm = h.attn_norm.data();
    l.ffn_norm = h.ffn_norm.data();
    l.q_bias = h.q_bias.empty() ? nullptr : h.q_bias.data();
    l.k_bias = h.k_bias.empty() ? nullptr : h.k_bias.data();
    l.v_bias = h.v_bias.empty() ? nullptr : h.v_bias.data();
    l.q_norm = h.q_norm.empty() ? nullptr : h.q_norm.data();
    l.k_norm = h.k_norm.empty() ? nullptr : h.k_norm.data();
    l.qk_norm_per_head = ld.qk_norm_per_head ? 1 : 0;
    l.post_attn_norm = h.post_attn_norm.empty() ? nullptr : h.post_attn_norm.data();
    l.post_ffn_norm = h.post_ffn_norm.empty() ? nullptr : h.post_ffn_norm.data();
    l.rope_table = rope_variants.of_layer[i];
    l.sliding_window = ld.sliding_window;
    l.q = h.q.view;
    l.k = h.k.view;
    l.v = h.v.view;
    l.o = h.o.view;
    l.gate = h.gate.view;
    l.up = h.up.view;
    l.down = h.down.view;
  }
  // Where the GPU holds only some routed experts: each MoE layer's slot map and matrices
  // compacted to the held experts (`keep`, per layer; empty for a dense layer).
  struct Held {
    std::vector<int32_t> slot;
    std::vector<uint8_t> blocks[3];
    std::vector<uint16_t> f16[3];
  };
  std::vector<Held> held(c.n_layers);
  const auto hold = [&](const std::vector<std::vector<bool>>& keep) {
    for (int i = 0; i < c.n_layers; ++i) {
      if (keep[i].empty()) continue;
      const int count = def.layers[i].experts.count;
      Held& k = held[i];
      k.slot.assign(count, -1);
      int n = 0;
      for (int e = 0; e < count; ++e) {
        if (keep[i][e]) k.slot[e] = n++;
      }
      const PreparedMatrix* from[3] = {&host[i].expert_gate, &host[i].expert_up, &host[i].expert_down};
      hetero_cuda_matrix* to[3] = {&layers[i].expert_gate, &layers[i].expert_up, &layers[i].expert_down};
      for (int m = 0; m < 3; ++m) {
        const hetero_cuda_matrix& src = from[m]->view;
        hetero_cuda_matrix& dst = *to[m];
        dst = src;
        dst.rows = src.rows / count * n;
        k.blocks[m].clear();
        k.f16[m].clear();
        if (src.blocks != nullptr) {
          const size_t per = src.blocks_bytes / count;
          for (int e = 0; e < count; ++e) {
            if (!keep[i][e]) continue;
            const auto* b = static_cast<const uint8_t*>(src.blocks) + per * e;
            k.blocks[m].insert(k.blocks[m].end(), b, b + per);
          }
          dst.blocks = k.blocks[m].empty() ? nullptr : k.blocks[m].data();
          dst.blocks_bytes = k.blocks[m].size();
        }
        if (src.f16 != nullptr) {
          const size_t per = static_cast<size_t>(src.rows / count) * src.cols;
          for (int e = 0; e < count; ++e) {
            if (keep[i][e]) k.f16[m].insert(k.f16[m].end(), src.f16 + per * e, src.f16 + per * (e + 1));
          }
          dst.f16 = k.f16[m].empty() ? nullptr : k.f16[m].data();
        }
      }
      layers[i].expert_slot = k.slot.data();
    }
  };
  hetero_cuda_model_desc d{};
  d.host_experts = &CudaBackend::RunHostExperts;
  d.host_experts_context = this;
  d.n_layers = c.n_layers;
  d.n_embd = c.n_embd;
  d.n_heads = c.n_heads;
  d.n_kv_heads = c.n_kv_heads;
  d.head_dim = c.head_dim;
  d.n_ff = c.n_ff;
  d.n_vocab = c.n_vocab;
  d.context_length = c.context_length;
  d.rope_dim = c.rope_dim;
  d.rope_neox = c.rope_style == RopeStyle::kNeox ? 1 : 0;
  d.n_rope_tables = static_cast<int32_t>(rope_variants.base_and_factor.size());
  d.rope_inv_freq = rope_inv_freq.data();
  d.rope_attn_factor = def.rope_attn_factor;
  d.rms_norm_eps = c.rms_norm_eps;
  d.embedding_scale = def.embedding_scale;
  d.attention_scale = def.attention_scale;
  d.residual_scale = def.residual_scale;
  d.logit_scale = def.logit_scale;
  d.activation = def.activation == FfnActivation::kGeluTanh ? HETERO_CUDA_ACTIVATION_GELU_TANH : HETERO_CUDA_ACTIVATION_SILU;
  d.kv_block_tokens = options_.kv_block_tokens;
  {
    MutexLock lock(&mutex_);
    d.kv_blocks = kv_.max_blocks();
  }
  d.max_rows = options_.max_rows_per_pass;
  d.device = options_.device;
  d.token_embd = embd.view;
  d.output_norm = output_norm.data();
  d.output = output.view;
  d.layers = layers.data();
  char message[512] = {};
  const auto create = [&]() -> absl::Status {
    if (device_model_ != nullptr) api.destroy(device_model_);
    device_model_ = nullptr;
    return ModuleStatus(api.create(&d, &device_model_, message, sizeof message), "creating the model", message);
  };
  const uint64_t budget = options_.memory_budget_bytes;
  std::string expert_placement;
  std::vector<ExpertLayerFacts> moe;
  for (int i = 0; i < c.n_layers; ++i) {
    const ExpertsDefinition& e = def.layers[i].experts;
    if (!e.present()) continue;
    uint64_t bytes = 0;
    for (const PreparedMatrix* m : {&host[i].expert_gate, &host[i].expert_up, &host[i].expert_down}) {
      bytes += m->view.format == HETERO_CUDA_WEIGHTS_F16 ? static_cast<uint64_t>(m->view.rows) * m->view.cols * 2
                                                         : m->view.blocks_bytes;
    }
    moe.push_back({i, e.count, e.used, bytes / e.count, {}});
  }
  if (budget > 0 && !moe.empty()) {
    if (!options_.place_experts) return absl::InvalidArgumentError("a GPU memory budget needs an expert placement policy");
    // What the device holds whatever the placement: measured with no routed expert on it.
    std::vector<std::vector<bool>> keep(c.n_layers);
    for (const ExpertLayerFacts& l : moe) keep[l.layer].assign(l.experts, false);
    hold(keep);
    HETERO_RETURN_IF_ERROR(create());
    ExpertPlacementFacts facts;
    facts.gpu = Device::Gpu(options_.device);
    facts.budget_bytes = budget;
    facts.fixed_bytes = api.device_bytes(device_model_);
    facts.layers = moe;
    FillExpertLayerUsage(options_.expert_usage, facts.layers);
    api.destroy(device_model_);
    device_model_ = nullptr;
    HETERO_ASSIGN_OR_RETURN(ExpertPlacement placement, options_.place_experts(facts));
    HETERO_ASSIGN_OR_RETURN(uint64_t resident, ResidentExpertBytes(facts, placement));
    if (facts.fixed_bytes + resident > budget) {
      return absl::ResourceExhaustedError(absl::StrCat("the expert placement holds ", facts.fixed_bytes + resident,
                                                       " bytes on the GPU, over the budget of ", budget));
    }
    std::vector<std::vector<bool>> on_host(c.n_layers);
    bool any_host = false;
    for (size_t k = 0; k < moe.size(); ++k) {
      keep[moe[k].layer] = placement.on_gpu[k];
      std::vector<bool> off(moe[k].experts);
      for (int e = 0; e < moe[k].experts; ++e) off[e] = !placement.on_gpu[k][e];
      if (std::find(off.begin(), off.end(), true) != off.end()) {
        on_host[moe[k].layer] = std::move(off);
        any_host = true;
      }
    }
    if (any_host) {
      HETERO_ASSIGN_OR_RETURN(host_experts_, HostExperts::Create(file, def, on_host, options_.host_threads));
      hold(keep);
    } else {
      for (hetero_cuda_layer& l : layers) l.expert_slot = nullptr;
      for (const ExpertLayerFacts& l : moe) {
        layers[l.layer].expert_gate = host[l.layer].expert_gate.view;
        layers[l.layer].expert_up = host[l.layer].expert_up.view;
        layers[l.layer].expert_down = host[l.layer].expert_down.view;
      }
    }
    expert_placement = placement.reason;
  }
  HETERO_RETURN_IF_ERROR(create());
  if (budget > 0 && api.device_bytes(device_model_) > budget) {
    const uint64_t bytes = api.device_bytes(device_model_);
    api.destroy(device_model_);
    device_model_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrCat("the model needs ", bytes >> 20, " MiB of ", DeviceName(Device::Gpu(options_.device)),
                                                     "'s memory (weights, KV cache, scratch), over the budget of ",
                                                     budget >> 20, " MiB; raise the budget or lower kv_capacity_tokens"));
  }

  const CudaDeviceInfo& dev = CudaProbe().devices[options_.device];
  info_.kind = DeviceKind::kGpu;
  info_.name = absl::StrCat("cuda:", options_.device, " (", dev.name, ")");
  // Decode reads the GGUF blocks of the formats with a GEMV kernel, the float16 copy of the rest.
  std::string decode;
  if (!native.empty()) decode = absl::StrCat("native ", absl::StrJoin(native, "/"), " GEMV");
  if (!as_f16.empty()) {
    absl::StrAppend(&decode, decode.empty() ? "" : " and ", "float16 GEMV for ", absl::StrJoin(as_f16, "/"),
                    " (no native kernel)");
  }
  info_.weight_format = absl::StrCat(decode, " for decode, cuBLAS for prompts (float16; blocks dequantized a matrix at a time)");
  if (!expert_placement.empty()) absl::StrAppend(&info_.weight_format, "; experts: ", expert_placement);
  info_.threads = 1;
  info_.weight_bytes = api.device_bytes(device_model_);
  info_.max_sequences = max_sequences_;
  info_.max_context = c.context_length;
  return absl::OkStatus();
}

// The copies run without the lock, so other sequences' passes go on meanwhile (the
// module's copy stream overlaps its compute stream); the sequence itself is used by its
// session alone, and its blocks stay allocated until the copy is done.
absl::StatusOr<SavedSequence> CudaBackend::SwapOut(SequenceId seq) {
  SavedSequence saved;
  std::vector<int32_t> blocks;
  {
    MutexLock lock(&mutex_);
    HETERO_ASSIGN_OR_RETURN(int length, kv_.Length(seq));
    saved.tokens = length;
    saved.token_ids = kv_.Tokens(seq);
    blocks = kv_.Blocks(seq);
  }
  HETERO_ASSIGN_OR_RETURN(saved.data, HostMemoryPool::Default()->Allocate(blocks.size() * kv_block_floats_));
  char message[512] = {};
  HETERO_RETURN_IF_ERROR(ModuleStatus(api_->copy_kv(device_model_, 1, blocks.data(), static_cast<int32_t>(blocks.size()),
                                                    saved.data.data(), message, sizeof message),
                                      "copying KV to the host", message));
  MutexLock lock(&mutex_);
  kv_.FreeSequence(seq);
  expert_traffic_.erase(seq);
  return saved;
}

absl::StatusOr<SequenceId> CudaBackend::SwapIn(const SavedSequence& saved) {
  HETERO_RETURN_IF_ERROR(SavedBlocks(saved).status());
  SwapInTarget target;
  std::vector<int32_t> blocks;
  {
    MutexLock lock(&mutex_);
    HETERO_ASSIGN_OR_RETURN(target, NewSequenceFor(saved));
    const std::vector<int32_t>& all = kv_.Blocks(target.seq);
    blocks.assign(all.begin() + static_cast<ptrdiff_t>(target.first_block_to_copy), all.end());
  }
  absl::Status s;
  if (!blocks.empty()) {  // else shared blocks still on the device held all of it
    char message[512] = {};
    s = ModuleStatus(api_->copy_kv(device_model_, 0, blocks.data(), static_cast<int32_t>(blocks.size()),
                                   const_cast<float*>(saved.data.data()) + target.first_block_to_copy * kv_block_floats_,
                                   message, sizeof message),
                     "copying KV to the device", message);
  }
  MutexLock lock(&mutex_);
  if (!s.ok()) {
    kv_.FreeSequence(target.seq);
    return s;
  }
  kv_.Advance(target.seq, saved.tokens - target.attached_tokens);
  return target.seq;
}

// Copy-on-write is rare (a session's turn cutting into a block other sessions share: at
// most one block per turn), so it goes through host memory with the module's block copy
// rather than a device-to-device entry point in the module ABI.
absl::Status CudaBackend::CopyKvBlocks(absl::Span<const KvBlockTable::BlockCopy> copies) {
  std::vector<int32_t> from, to;
  for (const KvBlockTable::BlockCopy& c : copies) {
    from.push_back(c.from);
    to.push_back(c.to);
  }
  HETERO_ASSIGN_OR_RETURN(HostBuffer staging, HostMemoryPool::Default()->Allocate(from.size() * kv_block_floats_));
  char message[512] = {};
  HETERO_RETURN_IF_ERROR(ModuleStatus(api_->copy_kv(device_model_, 1, from.data(), static_cast<int32_t>(from.size()),
                                                    staging.data(), message, sizeof message),
                                      "copying shared KV blocks to the host", message));
  return ModuleStatus(api_->copy_kv(device_model_, 0, to.data(), static_cast<int32_t>(to.size()), staging.data(),
                                    message, sizeof message),
                      "copying KV blocks back to the device", message);
}

absl::Status CudaBackend::Pass(const std::vector<Row>& rows, const std::vector<int>& logit_rows, float* logits,
                               int32_t* greedy) {
  // Sequences in row order, each with its block table padded to a common stride.
  std::vector<SequenceId> seqs;
  std::vector<int32_t> seq_of_row(rows.size()), tokens(rows.size()), positions(rows.size());
  int stride = 1;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (seqs.empty() || seqs.back() != rows[r].seq) seqs.push_back(rows[r].seq);
    seq_of_row[r] = static_cast<int32_t>(seqs.size() - 1);
    tokens[r] = rows[r].token;
    positions[r] = rows[r].position;
    if (rows[r].token < 0 || rows[r].token >= config_.n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", rows[r].token, " is outside the vocabulary (0..",
                                                     config_.n_vocab - 1, ")"));
    }
  }
  for (SequenceId s : seqs) stride = std::max(stride, static_cast<int>(kv_.Blocks(s).size()));
  // A power of two (at least 8): decode graphs are captured per table stride, so a growing
  // context re-captures a few times rather than every kv_block_tokens tokens.
  int rounded = 8;
  while (rounded < stride) rounded *= 2;
  stride = rounded;
  std::vector<int32_t> tables(seqs.size() * stride, -1);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::vector<int32_t>& b = kv_.Blocks(seqs[i]);
    std::copy(b.begin(), b.end(), tables.begin() + i * stride);
  }
  hetero_cuda_forward_args a{};
  a.n_rows = static_cast<int32_t>(rows.size());
  a.tokens = tokens.data();
  a.positions = positions.data();
  a.seq_of_row = seq_of_row.data();
  a.n_seqs = static_cast<int32_t>(seqs.size());
  a.block_tables = tables.data();
  a.table_stride = stride;
  a.n_logit_rows = static_cast<int32_t>(logit_rows.size());
  a.logit_rows = logit_rows.data();
  a.logits = logits;
  a.greedy_tokens = greedy;
  char message[512] = {};
  if (host_experts_ != nullptr) host_experts_->BeginPass(a.n_rows);
  HETERO_RETURN_IF_ERROR(ModuleStatus(api_->forward(device_model_, &a, message, sizeof message), "forward", message));
  for (const Row& r : rows) kv_.Advance(r.seq, 1);
  if (const int per_token = RoutedEvaluationsPerToken(model_.impl().definition); per_token > 0) {
    for (size_t r = 0; r < rows.size(); ++r) {
      ExpertTraffic t{0, per_token, 0, 0};
      if (host_experts_ != nullptr) {
        const std::vector<int64_t>& on_host = host_experts_->pass_evaluations();
        t.cpu_evaluations = r < on_host.size() ? on_host[r] : 0;
        t.gpu_evaluations -= t.cpu_evaluations;
        t.bytes_moved = host_experts_->pass_bytes_per_row();
        t.wait_ms = host_experts_->pass_ms() / static_cast<double>(rows.size());  // shared by the pass's rows
      }
      AddExpertTraffic(rows[r].seq, t);
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Step(absl::Span<const SequenceChunk> chunks, absl::Span<float> logits) {
  if (logits.size() < chunks.size() * config_.n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat("logits buffer holds ", logits.size(), " floats, need ",
                                                   chunks.size() * config_.n_vocab));
  }
  return Run(chunks, logits.data(), nullptr);
}

ExpertUsage CudaBackend::expert_usage() const {
  ExpertUsage usage;
  if (device_model_ == nullptr) return usage;
  const ModelDefinition& def = model_.impl().definition;
  for (size_t i = 0; i < def.layers.size(); ++i) {
    const ExpertsDefinition& e = def.layers[i].experts;
    if (!e.present()) continue;
    ExpertUsage::Layer layer{static_cast<int>(i), std::vector<uint64_t>(e.count)};
    char message[256] = {};
    if (api_->expert_counts(device_model_, static_cast<int32_t>(i), layer.evaluations.data(), e.count, message,
                            sizeof message) != HETERO_CUDA_OK) {
      internal::Log(LogLevel::kWarning, absl::StrCat("CUDA backend: expert counts of layer ", i, ": ", message));
      continue;
    }
    usage.layers.push_back(std::move(layer));
  }
  return usage;
}

absl::Status CudaBackend::DecodeGreedy(absl::Span<const SequenceId> seqs, absl::Span<const int32_t> tokens,
                                       absl::Span<int32_t> next) {
  if (seqs.size() != tokens.size() || seqs.empty()) {
    return absl::InvalidArgumentError("DecodeGreedy needs one token per sequence and at least one sequence");
  }
  if (next.size() < seqs.size()) return absl::InvalidArgumentError("DecodeGreedy: `next` is too small");
  std::vector<SequenceChunk> chunks;
  chunks.reserve(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) chunks.push_back({seqs[i], tokens.subspan(i, 1), /*generated=*/true});
  return Run(chunks, nullptr, next.data());
}

absl::Status CudaBackend::Run(absl::Span<const SequenceChunk> chunks, float* logits, int32_t* greedy) {
  MutexLock lock(&mutex_);
  HETERO_ASSIGN_OR_RETURN(std::vector<int> lengths, ReserveChunks(chunks));
  auto rollback = [&] { RollBack(chunks, lengths); };
  // Passes of at most max_rows_per_pass rows; each chunk's output comes from the pass
  // holding its last token.
  const int max_rows = options_.max_rows_per_pass;
  const size_t V = config_.n_vocab;
  std::vector<Row> rows;
  std::vector<int> logit_rows;
  std::vector<size_t> logit_chunks;
  std::vector<float> pass_logits;
  std::vector<int32_t> pass_greedy;
  auto flush = [&]() -> absl::Status {
    if (rows.empty()) return absl::OkStatus();
    std::vector<int> out_rows = logit_rows;
    if (out_rows.empty()) out_rows.push_back(static_cast<int>(rows.size()) - 1);  // the pass needs one
    // Outputs for consecutive chunks go straight to the caller's buffers.
    bool direct = !logit_chunks.empty() && logit_chunks.size() == out_rows.size();
    for (size_t i = 1; direct && i < logit_chunks.size(); ++i) direct = logit_chunks[i] == logit_chunks[0] + i;
    float* pass_logits_out = nullptr;
    int32_t* pass_greedy_out = nullptr;
    if (logits != nullptr) {
      if (!direct) pass_logits.resize(out_rows.size() * V);
      pass_logits_out = direct ? logits + logit_chunks[0] * V : pass_logits.data();
    }
    if (greedy != nullptr) {
      if (!direct) pass_greedy.resize(out_rows.size());
      pass_greedy_out = direct ? greedy + logit_chunks[0] : pass_greedy.data();
    }
    HETERO_RETURN_IF_ERROR(Pass(rows, out_rows, pass_logits_out, pass_greedy_out));
    for (size_t i = 0; !direct && i < logit_chunks.size(); ++i) {
      if (logits != nullptr) std::copy_n(pass_logits.data() + i * V, V, logits + logit_chunks[i] * V);
      if (greedy != nullptr) greedy[logit_chunks[i]] = pass_greedy[i];
    }
    rows.clear();
    logit_rows.clear();
    logit_chunks.clear();
    return absl::OkStatus();
  };
  for (size_t i = 0; i < chunks.size(); ++i) {
    for (size_t t = 0; t < chunks[i].tokens.size(); ++t) {
      rows.push_back({chunks[i].seq, static_cast<int32_t>(lengths[i] + t), chunks[i].tokens[t]});
      if (t + 1 == chunks[i].tokens.size()) {
        logit_rows.push_back(static_cast<int>(rows.size()) - 1);
        logit_chunks.push_back(i);
      }
      if (static_cast<int>(rows.size()) == max_rows) {
        if (absl::Status s = flush(); !s.ok()) {
          rollback();
          return s;
        }
      }
    }
  }
  if (absl::Status s = flush(); !s.ok()) {
    rollback();
    return s;
  }
  return absl::OkStatus();
}

}  // namespace hetero
