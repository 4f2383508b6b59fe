// The module's model runtime: weights uploaded once, a device KV pool in the CPU backend's
// block layout, and a forward pass of own kernels plus cuBLAS. Small passes (at most
// kGemvPassRows rows, kBlockGemvPassRows for block-format weights) use only own kernels, with the layer norms, q/k/v and gate/up/SwiGLU
// fused into GEMV launches; decode batches up to kGraphMaxRows rows are captured in a CUDA
// graph per shape (cuBLAS calls included) and replayed; inputs
// reach the graph through one fixed device buffer, so a step costs one upload, one graph
// launch, one download and one host synchronisation.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "src/gpu/cuda_kernels.cuh"
#include "src/gpu/cuda_resources.cuh"
#include "src/runtime/kv_layout.h"
#include "src/gpu/cuda_module_abi.h"

#define HETERO_CUDA_MODULE_EXPORT extern "C" __attribute__((visibility("default")))

namespace hetero::gpu {

struct Model;

namespace {

struct Layer {
  DeviceBuffer attn_norm, ffn_norm, q_bias, k_bias, v_bias;
  DeviceBuffer q_norm, k_norm, post_attn_norm, post_ffn_norm;  // each may be absent
  bool qk_norm_per_head = true;
  int rope_table = 0;
  int sliding_window = 0;
  // A mixture of experts (n_experts > 0) in place of gate/up/down.
  int n_experts = 0, experts_used = 0, expert_n_ff = 0, shared_n_ff = 0;
  bool normalize_expert_weights = false;
  DeviceBuffer router, shared_gate_input;
  Matrix expert_gate, expert_up, expert_down, shared_gate, shared_up, shared_down;
  DeviceBuffer expert_slot;  // with experts on the host: each expert's slot here, or -1
  DeviceBuffer expert_counts;  // n_experts unsigned long long: how often each was chosen
  bool host_experts = false;
  // The host callback's argument for this layer (its address is captured in the graphs).
  struct HostCall {
    Model* model = nullptr;
    int layer = 0;
  } host_call;
  // [q; k; v] and [gate; up] as one float16 matrix each for cuBLAS, where every part is
  // F16 (the parts then live here); else the prompt path stages them in the weight scratch.
  DeviceBuffer qkv_f16, gate_up_f16;
  Matrix q, k, v, o, gate, up, down;
};

}  // namespace

struct Model {
  hetero_cuda_model_desc desc{};
  cudaStream_t stream = nullptr;
  cudaStream_t copy_stream = nullptr;
  cublasHandle_t cublas = nullptr;
  DeviceBuffer output_norm, inv_freq, kv_pool, cublas_workspace;
  Matrix token_embd, output;
  bool tied_output = false;  // the output matrix is token_embd (one copy on the device)
  // The most rows a pass runs through the GEMV kernels (kMaxGemvRows at a time) rather than
  // cuBLAS: kGemvPassRows for F16 models, more where a matrix is in blocks, whose cuBLAS
  // path first dequantizes it (reading its blocks, writing and reading 2 bytes a weight):
  // up to 32 rows, four GEMV launches still move fewer bytes than that.
  int gemv_pass_rows = kGemvPassRows;
  // Float16 room for the largest block-format matrix (or group of matrices) a prompt's
  // cuBLAS GEMM reads, dequantized into it just before; the output in chunks of rows.
  DeviceBuffer weight_scratch;
  std::vector<std::unique_ptr<Layer>> layers;
  KvLayout kv{};
  // Scratch for max_rows rows.
  // x: the residual stream; h: the final norm's rows; qkv: q, k, v side by side; att:
  // attention output; ffn: SwiGLU output (GEMV path); gate_up: the fused GEMM's output;
  // half_in: float16 input of the next cuBLAS GEMM.
  DeviceBuffer x, h, qkv, att, ffn, gate_up, half_in, logits, greedy;
  // Mixture-of-experts scratch (only with such layers): the normed input, router logits,
  // each row's choices and weights, the experts' activations, the shared expert's.
  DeviceBuffer moe_h, moe_logits, moe_choices, moe_weights, moe_act, shared_act, shared_out;
  // Experts on the host (hetero_cuda_host_experts_fn): its inputs and output in pinned
  // memory, the output's device copy, the rows of the pass in flight (the captured host
  // nodes read it when they run), and the first failure the callback reported.
  PinnedBuffer host_in, host_out;
  DeviceBuffer host_out_device;
  int host_rows = 0;
  size_t host_used = 0;  // the most experts per token over the layers
  std::atomic<bool> host_failed{false};
  char host_message[512] = {};
  // Inputs at fixed device addresses (the captured graphs read them there), in one buffer
  // so that one copy moves them: tokens, positions, seq_of_row, logit_rows (max_rows
  // each), then the block tables.
  DeviceBuffer inputs;
  PinnedBuffer staging_in;
  int tables_capacity = 0;  // int32 entries
  // Captured decode graphs by (rows, logit rows, table stride).
  std::map<std::tuple<int, int, int>, cudaGraphExec_t> graphs;

  ~Model() {
    const CurrentDevice current(desc.device);  // the caller's thread may have another GPU current
    for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
    if (cublas != nullptr) cublasDestroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (copy_stream != nullptr) cudaStreamDestroy(copy_stream);
  }

  size_t device_bytes() const {
    size_t total = token_embd.device_bytes() + output_norm.bytes + inv_freq.bytes + kv_pool.bytes +
                   cublas_workspace.bytes + output.device_bytes() + weight_scratch.bytes;
    for (const auto& l : layers) {
      total += l->attn_norm.bytes + l->ffn_norm.bytes + l->q_bias.bytes + l->k_bias.bytes + l->v_bias.bytes +
               l->q_norm.bytes + l->k_norm.bytes + l->post_attn_norm.bytes + l->post_ffn_norm.bytes +
               l->qkv_f16.bytes + l->gate_up_f16.bytes;
      total += l->router.bytes + l->shared_gate_input.bytes;
      for (const Matrix* m : {&l->q, &l->k, &l->v, &l->o, &l->gate, &l->up, &l->down, &l->expert_gate, &l->expert_up,
                              &l->expert_down, &l->shared_gate, &l->shared_up, &l->shared_down}) {
        total += m->device_bytes();
      }
    }
    for (const auto& l : layers) total += l->expert_slot.bytes + l->expert_counts.bytes;
    for (const DeviceBuffer* b : {&x, &h, &qkv, &att, &ffn, &gate_up, &half_in, &logits, &greedy, &inputs, &moe_h,
                                  &moe_logits, &moe_choices, &moe_weights, &moe_act, &shared_act, &shared_out,
                                  &host_out_device}) {
      total += b->bytes;
    }
    return total;
  }

  Failure Create(const hetero_cuda_model_desc& d) {
    desc = d;
    const auto& c = desc;
    if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 || c.n_ff <= 0 ||
        c.n_vocab <= 0 || c.kv_block_tokens <= 0 || c.kv_blocks <= 0 || c.max_rows <= 0 || c.layers == nullptr ||
        c.output_norm == nullptr || c.rope_inv_freq == nullptr || c.n_rope_tables <= 0) {
      return Invalid("model description has a zero size or a missing tensor");
    }
    if (c.activation != HETERO_CUDA_ACTIVATION_SILU && c.activation != HETERO_CUDA_ACTIVATION_GELU_TANH) {
      return Invalid("unknown FFN activation " + std::to_string(c.activation));
    }
    const auto positive = [](float v) { return v > 0 && std::isfinite(v); };
    if (!positive(c.embedding_scale) || !positive(c.attention_scale) || !positive(c.residual_scale) ||
        !positive(c.logit_scale) || !positive(c.rope_attn_factor)) {
      return Invalid("model description: scales must be positive and finite");
    }
    if (c.head_dim % 32 != 0 || c.head_dim > 32 * kMaxHeadDimPerLane || c.n_heads % c.n_kv_heads != 0 ||
        c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
      return Invalid("unsupported attention shape: head_dim must be a multiple of 32 up to 256, heads a multiple "
                     "of KV heads");
    }
    HETERO_CUDA_TRY(cudaSetDevice(c.device));
    HETERO_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    HETERO_CUDA_TRY(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    HETERO_CUBLAS_TRY(cublasCreate(&cublas));
    HETERO_CUBLAS_TRY(cublasSetStream(cublas, stream));
    // A workspace of our own, so cuBLAS allocates nothing inside a graph capture.
    HETERO_FAILURE_TRY(cublas_workspace.Allocate(size_t{32} << 20, "cudaMalloc(cuBLAS workspace)"));
    HETERO_CUBLAS_TRY(cublasSetWorkspace(cublas, cublas_workspace.ptr, cublas_workspace.bytes));
    if (c.token_embd.rows != c.n_vocab || c.token_embd.cols != c.n_embd || c.output.rows != c.n_vocab ||
        c.output.cols != c.n_embd) {
      return Invalid("token embeddings or output matrix not n_vocab x n_embd");
    }
    HETERO_FAILURE_TRY(token_embd.Upload(c.token_embd, "token embeddings"));
    // The logit scale folded into the final norm's weights: one multiply fewer per logit.
    std::vector<float> scaled_norm(c.output_norm, c.output_norm + c.n_embd);
    for (float& w : scaled_norm) w *= c.logit_scale;
    HETERO_FAILURE_TRY(output_norm.Upload(scaled_norm.data(), c.n_embd * sizeof(float), "cudaMalloc(output norm)"));
    HETERO_FAILURE_TRY(inv_freq.Upload(c.rope_inv_freq, static_cast<size_t>(c.n_rope_tables) * (c.rope_dim / 2) * sizeof(double),
                                       "cudaMalloc(rope)"));
    tied_output = c.output.format == c.token_embd.format &&
                  (c.output.format == HETERO_CUDA_WEIGHTS_F16 ? c.output.f16 == c.token_embd.f16
                                                              : c.output.blocks == c.token_embd.blocks);
    if (!tied_output) HETERO_FAILURE_TRY(output.Upload(c.output, "output"));
    const int qd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim;
    for (int i = 0; i < c.n_layers; ++i) {
      const hetero_cuda_layer& src = c.layers[i];
      auto l = std::make_unique<Layer>();
      if (src.attn_norm == nullptr || src.ffn_norm == nullptr) return Invalid("layer without norm weights");
      HETERO_FAILURE_TRY(l->attn_norm.Upload(src.attn_norm, c.n_embd * sizeof(float), "cudaMalloc(norm)"));
      HETERO_FAILURE_TRY(l->ffn_norm.Upload(src.ffn_norm, c.n_embd * sizeof(float), "cudaMalloc(norm)"));
      if (src.q_bias != nullptr) HETERO_FAILURE_TRY(l->q_bias.Upload(src.q_bias, qd * sizeof(float), "cudaMalloc(bias)"));
      if (src.k_bias != nullptr) HETERO_FAILURE_TRY(l->k_bias.Upload(src.k_bias, kvd * sizeof(float), "cudaMalloc(bias)"));
      if (src.v_bias != nullptr) HETERO_FAILURE_TRY(l->v_bias.Upload(src.v_bias, kvd * sizeof(float), "cudaMalloc(bias)"));
      l->qk_norm_per_head = src.qk_norm_per_head != 0;
      const size_t q_norm_floats = l->qk_norm_per_head ? c.head_dim : qd, k_norm_floats = l->qk_norm_per_head ? c.head_dim : kvd;
      if (src.q_norm != nullptr) HETERO_FAILURE_TRY(l->q_norm.Upload(src.q_norm, q_norm_floats * sizeof(float), "cudaMalloc(norm)"));
      if (src.k_norm != nullptr) HETERO_FAILURE_TRY(l->k_norm.Upload(src.k_norm, k_norm_floats * sizeof(float), "cudaMalloc(norm)"));
      if (src.post_attn_norm != nullptr) {
        HETERO_FAILURE_TRY(l->post_attn_norm.Upload(src.post_attn_norm, c.n_embd * sizeof(float), "cudaMalloc(norm)"));
      }
      if (src.post_ffn_norm != nullptr) {
        HETERO_FAILURE_TRY(l->post_ffn_norm.Upload(src.post_ffn_norm, c.n_embd * sizeof(float), "cudaMalloc(norm)"));
      }
      if (src.rope_table < 0 || src.rope_table >= c.n_rope_tables || src.sliding_window < 0) {
        return Invalid("layer " + std::to_string(i) + ": RoPE table out of range or a negative sliding window");
      }
      l->rope_table = src.rope_table;
      l->sliding_window = src.sliding_window;
      // Shapes first: the fused buffers are filled at fixed offsets.
      const bool moe = src.n_experts > 0;
      const struct {
        const hetero_cuda_matrix& m;
        int rows, cols;
      } expect[] = {{src.q, qd, c.n_embd},     {src.k, kvd, c.n_embd},  {src.v, kvd, c.n_embd}, {src.o, c.n_embd, qd},
                    {src.gate, moe ? 0 : c.n_ff, moe ? 0 : c.n_embd}, {src.up, moe ? 0 : c.n_ff, moe ? 0 : c.n_embd},
                    {src.down, moe ? 0 : c.n_embd, moe ? 0 : c.n_ff}};
      for (const auto& e : expect) {
        if (e.m.rows != e.rows || e.m.cols != e.cols) {
          return Invalid("layer " + std::to_string(i) + ": matrix shapes do not match the model description");
        }
      }
      const auto all_f16 = [](std::initializer_list<const hetero_cuda_matrix*> parts) {
        for (const hetero_cuda_matrix* m : parts) {
          if (m->format != HETERO_CUDA_WEIGHTS_F16) return false;
        }
        return true;
      };
      __half* qkv = nullptr;
      if (all_f16({&src.q, &src.k, &src.v})) {
        HETERO_FAILURE_TRY(l->qkv_f16.Allocate(static_cast<size_t>(qd + 2 * kvd) * c.n_embd * sizeof(__half),
                                               "cudaMalloc(float16 weights)"));
        qkv = l->qkv_f16.as<__half>();
      }
      HETERO_FAILURE_TRY(l->q.Upload(src.q, "q", qkv));
      HETERO_FAILURE_TRY(l->k.Upload(src.k, "k", qkv ? qkv + static_cast<size_t>(qd) * c.n_embd : nullptr));
      HETERO_FAILURE_TRY(l->v.Upload(src.v, "v", qkv ? qkv + static_cast<size_t>(qd + kvd) * c.n_embd : nullptr));
      HETERO_FAILURE_TRY(l->o.Upload(src.o, "o"));
      if (moe) {
        HETERO_FAILURE_TRY(UploadExperts(src, i, *l));
      } else {
        __half* gate_up = nullptr;
        if (all_f16({&src.gate, &src.up})) {
          HETERO_FAILURE_TRY(l->gate_up_f16.Allocate(2 * static_cast<size_t>(c.n_ff) * c.n_embd * sizeof(__half),
                                                     "cudaMalloc(float16 weights)"));
          gate_up = l->gate_up_f16.as<__half>();
        }
        HETERO_FAILURE_TRY(l->gate.Upload(src.gate, "gate", gate_up));
        HETERO_FAILURE_TRY(l->up.Upload(src.up, "up", gate_up ? gate_up + static_cast<size_t>(c.n_ff) * c.n_embd : nullptr));
        HETERO_FAILURE_TRY(l->down.Upload(src.down, "down"));
      }
      layers.push_back(std::move(l));
    }
    // The block layout every backend shares (src/runtime/kv_layout.h), as strides.
    const KvBlockLayout layout{c.n_layers, c.n_kv_heads, c.head_dim, c.kv_block_tokens};
    kv.block_tokens = layout.block_tokens;
    kv.head_floats = layout.head_floats();
    kv.layer_floats = layout.layer_floats();
    kv.block_floats = layout.block_floats();
    HETERO_FAILURE_TRY(kv_pool.Allocate(static_cast<size_t>(c.kv_blocks) * kv.block_floats * sizeof(float),
                                        "cudaMalloc(KV pool)"));
    kv.pool = kv_pool.as<float>();
    const size_t rows = c.max_rows;
    const size_t widest = std::max<size_t>({static_cast<size_t>(c.n_embd), static_cast<size_t>(qd),
                                            static_cast<size_t>(c.n_ff)});
    HETERO_FAILURE_TRY(x.Allocate(rows * c.n_embd * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(h.Allocate(rows * c.n_embd * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(qkv.Allocate(rows * (qd + 2 * kvd) * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(att.Allocate(rows * qd * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(ffn.Allocate(rows * c.n_ff * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(gate_up.Allocate(rows * 2 * c.n_ff * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(half_in.Allocate(rows * widest * sizeof(__half), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(greedy.Allocate(rows * sizeof(int32_t), "cudaMalloc(greedy tokens)"));
    HETERO_FAILURE_TRY(logits.Allocate(rows * c.n_vocab * sizeof(float), "cudaMalloc(logits)"));
    bool any_blocks = !output_matrix().is_f16();
    for (const auto& l : layers) {
      for (const Matrix* m : {&l->q, &l->k, &l->v, &l->o, &l->gate, &l->up, &l->down}) {
        any_blocks = any_blocks || (m->format != 0 && !m->is_f16());
      }
    }
    gemv_pass_rows = any_blocks ? kBlockGemvPassRows : kGemvPassRows;
    // No scratch where every pass takes the GEMV path.
    if (c.max_rows > gemv_pass_rows) {
      HETERO_FAILURE_TRY(weight_scratch.Allocate(WeightScratchHalves() * sizeof(__half), "cudaMalloc(weight scratch)"));
    }
    size_t most_experts = 0, most_used = 0, most_expert_ff = 0, most_shared_ff = 0;
    for (const auto& l : layers) {
      most_experts = std::max<size_t>(most_experts, l->n_experts);
      most_used = std::max<size_t>(most_used, l->experts_used);
      most_expert_ff = std::max<size_t>(most_expert_ff, l->expert_n_ff);
      most_shared_ff = std::max<size_t>(most_shared_ff, l->shared_n_ff);
    }
    if (most_experts > 0) {
      HETERO_FAILURE_TRY(moe_h.Allocate(rows * c.n_embd * sizeof(float), "cudaMalloc(scratch)"));
      HETERO_FAILURE_TRY(moe_logits.Allocate(rows * most_experts * sizeof(float), "cudaMalloc(scratch)"));
      HETERO_FAILURE_TRY(moe_choices.Allocate(rows * most_used * sizeof(int32_t), "cudaMalloc(scratch)"));
      HETERO_FAILURE_TRY(moe_weights.Allocate(rows * most_used * sizeof(float), "cudaMalloc(scratch)"));
      HETERO_FAILURE_TRY(moe_act.Allocate(rows * most_used * most_expert_ff * sizeof(float), "cudaMalloc(scratch)"));
    }
    bool any_host = false;
    for (const auto& l : layers) any_host = any_host || l->host_experts;
    if (any_host) {
      if (c.host_experts == nullptr) return Invalid("experts left to the host, but no host_experts function");
      host_used = most_used;
      // h, then choices, then weights.
      HETERO_FAILURE_TRY(host_in.Allocate(rows * (c.n_embd + 2 * most_used) * sizeof(float)));
      HETERO_FAILURE_TRY(host_out.Allocate(rows * c.n_embd * sizeof(float)));
      HETERO_FAILURE_TRY(host_out_device.Allocate(rows * c.n_embd * sizeof(float), "cudaMalloc(scratch)"));
    }
    if (most_shared_ff > 0) {
      HETERO_FAILURE_TRY(shared_act.Allocate(rows * most_shared_ff * sizeof(float), "cudaMalloc(scratch)"));
      HETERO_FAILURE_TRY(shared_out.Allocate(rows * c.n_embd * sizeof(float), "cudaMalloc(scratch)"));
      // The GEMV's mixed-format fallback stages gate and up side by side here.
      if (gate_up.bytes < rows * 2 * most_shared_ff * sizeof(float)) {
        HETERO_FAILURE_TRY(gate_up.Allocate(rows * 2 * most_shared_ff * sizeof(float), "cudaMalloc(scratch)"));
      }
    }
    return {};
  }

  // A mixture-of-experts layer's router and matrices.
  Failure UploadExperts(const hetero_cuda_layer& src, int i, Layer& l) {
    const auto& c = desc;
    const std::string where = "layer " + std::to_string(i) + ": ";
    if (src.n_experts_used < 1 || src.n_experts_used > kMaxExpertsUsed || src.n_experts_used > src.n_experts ||
        src.n_experts > 1024 || src.expert_n_ff <= 0 || src.router == nullptr) {
      return Invalid(where + "bad expert counts (at most " + std::to_string(kMaxExpertsUsed) +
                     " of at most 1024 experts per token) or no router");
    }
    // With a slot map, the matrices hold the experts that have a slot (0..held-1, each once).
    int held = src.n_experts;
    if (src.expert_slot != nullptr) {
      std::vector<int> seen;
      for (int e = 0; e < src.n_experts; ++e) {
        if (src.expert_slot[e] >= 0) seen.push_back(src.expert_slot[e]);
        if (src.expert_slot[e] < -1) return Invalid(where + "expert slot below -1");
      }
      std::sort(seen.begin(), seen.end());
      for (size_t k = 0; k < seen.size(); ++k) {
        if (seen[k] != static_cast<int>(k)) return Invalid(where + "expert slots are not 0..n-1, each once");
      }
      held = static_cast<int>(seen.size());
      l.host_experts = held < src.n_experts;
    }
    const size_t stacked = static_cast<size_t>(held) * src.expert_n_ff;
    if ((held > 0 && (src.expert_gate.cols != c.n_embd || src.expert_up.cols != c.n_embd ||
                      src.expert_down.cols != src.expert_n_ff)) ||
        static_cast<size_t>(src.expert_gate.rows) != stacked || static_cast<size_t>(src.expert_up.rows) != stacked ||
        static_cast<size_t>(src.expert_down.rows) != static_cast<size_t>(held) * c.n_embd) {
      return Invalid(where + "expert matrix shapes do not match the expert counts");
    }
    if (src.expert_gate.format != src.expert_up.format) {
      return Invalid(where + "expert gate and up matrices in different formats");
    }
    l.n_experts = src.n_experts;
    l.experts_used = src.n_experts_used;
    l.expert_n_ff = src.expert_n_ff;
    l.normalize_expert_weights = src.normalize_expert_weights != 0;
    HETERO_FAILURE_TRY(l.router.Upload(src.router, static_cast<size_t>(src.n_experts) * c.n_embd * sizeof(float),
                                       "cudaMalloc(router)"));
    if (src.expert_slot != nullptr) {
      HETERO_FAILURE_TRY(l.expert_slot.Upload(src.expert_slot, src.n_experts * sizeof(int32_t), "cudaMalloc(expert slots)"));
    }
    HETERO_FAILURE_TRY(l.expert_counts.Allocate(src.n_experts * sizeof(unsigned long long), "cudaMalloc(expert counts)"));
    // Zeroed on the compute stream and waited for: before any pass adds, and before a read
    // on the copy stream could see the allocation's old bytes.
    HETERO_CUDA_TRY(cudaMemsetAsync(l.expert_counts.ptr, 0, l.expert_counts.bytes, stream));
    HETERO_CUDA_TRY(cudaStreamSynchronize(stream));
    l.host_call = {this, i};
    if (held > 0) {
      HETERO_FAILURE_TRY(l.expert_gate.Upload(src.expert_gate, "expert gate"));
      HETERO_FAILURE_TRY(l.expert_up.Upload(src.expert_up, "expert up"));
      HETERO_FAILURE_TRY(l.expert_down.Upload(src.expert_down, "expert down"));
    }
    if (src.shared_gate_input == nullptr) return {};
    if (src.shared_n_ff <= 0 || src.shared_gate.rows != src.shared_n_ff || src.shared_gate.cols != c.n_embd ||
        src.shared_up.rows != src.shared_n_ff || src.shared_up.cols != c.n_embd || src.shared_down.rows != c.n_embd ||
        src.shared_down.cols != src.shared_n_ff) {
      return Invalid(where + "shared expert shapes do not match");
    }
    l.shared_n_ff = src.shared_n_ff;
    HETERO_FAILURE_TRY(l.shared_gate_input.Upload(src.shared_gate_input, c.n_embd * sizeof(float), "cudaMalloc(shared gate)"));
    HETERO_FAILURE_TRY(l.shared_gate.Upload(src.shared_gate, "shared gate"));
    HETERO_FAILURE_TRY(l.shared_up.Upload(src.shared_up, "shared up"));
    HETERO_FAILURE_TRY(l.shared_down.Upload(src.shared_down, "shared down"));
    return {};
  }

  // A mixture-of-experts FFN over n_rows rows of the residual stream: into `out`, added
  // (times the residual scale) with `accumulate`. Own kernels only, whatever the row count.
  Failure ExpertsFfn(Layer& l, int n_rows, float* out, bool accumulate) {
    const auto& c = desc;
    LaunchRmsNorm(x.as<float>(), nullptr, l.ffn_norm.as<float>(), n_rows, c.n_embd, c.rms_norm_eps, moe_h.as<float>(),
                  nullptr, stream);
    ExpertStep step;
    step.h = moe_h.as<float>();
    step.rows = n_rows;
    step.n_embd = c.n_embd;
    step.n_experts = l.n_experts;
    step.used = l.experts_used;
    step.n_ff = l.expert_n_ff;
    step.normalize = l.normalize_expert_weights;
    step.gelu = c.activation == HETERO_CUDA_ACTIVATION_GELU_TANH;
    step.router = l.router.as<float>();
    step.gate_up_format = l.expert_gate.format;
    step.down_format = l.expert_down.format;
    const bool any_held = l.expert_gate.rows > 0;
    step.gate = any_held ? l.expert_gate.gemv_weights() : nullptr;
    step.up = any_held ? l.expert_up.gemv_weights() : nullptr;
    step.down = any_held ? l.expert_down.gemv_weights() : nullptr;
    step.slot_of = l.expert_slot.bytes > 0 ? l.expert_slot.as<int32_t>() : nullptr;
    step.logits = moe_logits.as<float>();
    step.choices = moe_choices.as<int32_t>();
    step.weights = moe_weights.as<float>();
    step.counts = l.expert_counts.as<unsigned long long>();
    step.act = moe_act.as<float>();
    step.out = out;
    step.accumulate = accumulate;
    step.scale = c.residual_scale;
    HETERO_CUDA_TRY(LaunchExperts(step, stream));
    if (l.host_experts) {
      // The host's experts: their inputs down, the callback in stream order, its sum back.
      float* in = static_cast<float*>(host_in.ptr);
      const size_t rows = desc.max_rows;
      HETERO_CUDA_TRY(cudaMemcpyAsync(in, moe_h.ptr, static_cast<size_t>(n_rows) * c.n_embd * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream));
      HETERO_CUDA_TRY(cudaMemcpyAsync(in + rows * c.n_embd, moe_choices.ptr,
                                      static_cast<size_t>(n_rows) * l.experts_used * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, stream));
      HETERO_CUDA_TRY(cudaMemcpyAsync(in + rows * (c.n_embd + host_used), moe_weights.ptr,
                                      static_cast<size_t>(n_rows) * l.experts_used * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream));
      HETERO_CUDA_TRY(cudaLaunchHostFunc(stream, &Model::RunHostExperts, &l.host_call));
      HETERO_CUDA_TRY(cudaMemcpyAsync(host_out_device.ptr, host_out.ptr, static_cast<size_t>(n_rows) * c.n_embd * sizeof(float),
                                      cudaMemcpyHostToDevice, stream));
      LaunchAddScaled(out, host_out_device.as<float>(), static_cast<size_t>(n_rows) * c.n_embd,
                      accumulate ? c.residual_scale : 1.0f, stream);
    }
    if (l.shared_n_ff == 0) return {};
    // The shared expert (Gemv takes eight rows per launch).
    float* act = shared_act.as<float>();
    HETERO_FAILURE_TRY(Gemv({{&l.shared_gate, act, l.shared_n_ff}, {&l.shared_up, nullptr, l.shared_n_ff}},
                            moe_h.as<float>(), n_rows, false, nullptr, /*swiglu=*/true));
    HETERO_FAILURE_TRY(Gemv({{&l.shared_down, shared_out.as<float>(), c.n_embd}}, act, n_rows, false, nullptr));
    LaunchAddGatedShared(moe_h.as<float>(), l.shared_gate_input.as<float>(), shared_out.as<float>(), n_rows, c.n_embd,
                         accumulate ? c.residual_scale : 1.0f, out, stream);
    return {};
  }

  // A host node of the pass: the layer's host experts over the pass's rows (host_rows, set
  // before the pass runs). No CUDA calls here; a failure is kept for Forward to report.
  static void CUDART_CB RunHostExperts(void* arg) {
    const auto* call = static_cast<const Layer::HostCall*>(arg);
    Model& m = *call->model;
    if (m.host_failed.load()) return;
    const size_t rows = m.desc.max_rows;
    const float* in = static_cast<const float*>(m.host_in.ptr);
    char message[sizeof m.host_message] = {};
    const int32_t rc = m.desc.host_experts(m.desc.host_experts_context, call->layer, m.host_rows, in,
                                           reinterpret_cast<const int32_t*>(in + rows * m.desc.n_embd),
                                           in + rows * (m.desc.n_embd + m.host_used), static_cast<float*>(m.host_out.ptr),
                                           message, sizeof message);
    if (rc != 0) {
      std::memcpy(m.host_message, message, sizeof message);
      m.host_message[sizeof m.host_message - 1] = 0;
      m.host_failed.store(true);
    }
  }

  int32_t* input_at(int slot) const { return inputs.as<int32_t>() + static_cast<size_t>(slot) * desc.max_rows; }

  // Own GEMV over decode-sized batches: matrices multiplied by the same rows in one launch
  // where they share a format (else one launch each); `norm` fuses the RMSNorm before.
  struct Target {
    const Matrix* m;
    float* out;
    int ld;
  };
  // Passes of more rows than one launch takes (block-format models run passes of up to
  // kBlockGemvPassRows rows here) go kMaxGemvRows rows at a time.
  Failure Gemv(std::initializer_list<Target> mats, const float* in, int rows, bool accumulate, const float* norm,
               bool swiglu = false) {
    const int n = static_cast<int>(mats.size());
    if (n < 1 || n > 3) return Invalid("GEMV of 1 to 3 matrices");
    const int k = mats.begin()->m->cols;
    for (int r0 = 0; r0 < rows; r0 += kMaxGemvRows) {
      Target chunk[3];
      int i = 0;
      for (const Target& t : mats) chunk[i++] = {t.m, t.out != nullptr ? t.out + static_cast<size_t>(r0) * t.ld : nullptr, t.ld};
      HETERO_FAILURE_TRY(GemvRows(chunk, n, in + static_cast<size_t>(r0) * k, std::min(kMaxGemvRows, rows - r0),
                                  accumulate, norm, swiglu));
    }
    return {};
  }

  // At most kMaxGemvRows rows.
  Failure GemvRows(const Target* mats, int n, const float* in, int rows, bool accumulate, const float* norm,
                   bool swiglu) {
    GemvLaunch launch;
    launch.x = in;
    launch.rows = rows;
    launch.norm_weight = norm;
    launch.eps = desc.rms_norm_eps;
    launch.swiglu = swiglu;
    launch.gelu = desc.activation == HETERO_CUDA_ACTIVATION_GELU_TANH;
    bool same = true;
    for (int i = 0; i < n; ++i) same = same && mats[i].m->format == mats[0].m->format;
    if (same) {
      launch.format = mats[0].m->format;
      launch.k = mats[0].m->cols;
      for (int i = 0; i < n; ++i) {
        const Target& t = mats[i];
        launch.segments[launch.n_segments++] =
            GemvSegment{t.m->gemv_weights(), t.out, t.m->rows, t.ld, accumulate, desc.residual_scale};
      }
      HETERO_CUDA_TRY(LaunchGemv(launch, stream));
      return {};
    }
    if (swiglu) {  // mixed formats: gate and up side by side, then the product, then back to float
      const Target& g = mats[0];
      const Target& u = mats[1];
      const int n_ff = g.m->rows;
      const Target gate_part{g.m, gate_up.as<float>(), 2 * n_ff}, up_part{u.m, gate_up.as<float>() + n_ff, 2 * n_ff};
      HETERO_FAILURE_TRY(GemvRows(&gate_part, 1, in, rows, false, norm, false));
      HETERO_FAILURE_TRY(GemvRows(&up_part, 1, in, rows, false, norm, false));
      LaunchGatedActivation(gate_up.as<float>(), rows, n_ff, launch.gelu, g.out, nullptr, stream);
      return {};
    }
    for (int i = 0; i < n; ++i) HETERO_FAILURE_TRY(GemvRows(&mats[i], 1, in, rows, accumulate, norm, false));
    return {};
  }

  // out = in W^T, or with `accumulate` out += residual_scale in W^T, over `rows` float16 rows
  // through cuBLAS, W float16 (n x k, row-major), out rows `ldc` floats apart.
  Failure MatMul(const __half* w, int n, int k, const __half* in, int rows, float* out, int ldc, bool accumulate) {
    const float alpha = accumulate ? desc.residual_scale : 1.0f, beta = accumulate ? 1.0f : 0.0f;
    // Row-major out (rows x n) = in (rows x k) W^T, as column-major out^T = W in^T.
    HETERO_CUBLAS_TRY(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &alpha, w, CUDA_R_16F, k, in,
                                   CUDA_R_16F, k, &beta, out, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
    return {};
  }

  const Matrix& output_matrix() const { return tied_output ? token_embd : output; }

  // Whether a prompt GEMM over `parts` (stacked row after row) stages them in the weight
  // scratch: not where the layer fused them as float16 (`fused`), nor for one F16 matrix.
  static bool StagedInScratch(std::initializer_list<const Matrix*> parts, const __half* fused) {
    return fused == nullptr && !(parts.size() == 1 && (*parts.begin())->is_f16());
  }

  // The weight scratch's size: the largest matrix group a prompt GEMM stages there, and for
  // a block-format output at least 16 Mi elements of it (fewer, larger GEMMs over its
  // rows), at most all of it.
  size_t WeightScratchHalves() const {
    size_t most = 0;
    const auto staged = [&](std::initializer_list<const Matrix*> parts, const __half* fused) {
      if (!StagedInScratch(parts, fused)) return;
      size_t n = 0;
      for (const Matrix* m : parts) n += m->elements();
      most = std::max(most, n);
    };
    for (const auto& l : layers) {
      staged({&l->q, &l->k, &l->v}, l->qkv_f16.as<__half>());
      staged({&l->o}, nullptr);
      if (l->n_experts > 0) continue;
      staged({&l->gate, &l->up}, l->gate_up_f16.as<__half>());
      staged({&l->down}, nullptr);
    }
    const Matrix& out = output_matrix();
    if (!out.is_f16()) most = std::max(most, std::min(out.elements(), std::max<size_t>(most, size_t{16} << 20)));
    return most;
  }

  // Rows [first, first + count) of `m` as row-major float16 at `dst`, on the stream.
  Failure StageHalf(const Matrix& m, int first, int count, __half* dst) {
    if (m.is_f16()) {
      HETERO_CUDA_TRY(cudaMemcpyAsync(dst, m.f16 + static_cast<size_t>(first) * m.cols,
                                      static_cast<size_t>(count) * m.cols * sizeof(__half), cudaMemcpyDeviceToDevice,
                                      stream));
      return {};
    }
    const BlockGeometry g = GemvBlock(m.format);
    const uint8_t* at = m.blocks.as<uint8_t>() + static_cast<size_t>(first) * (m.cols / g.elements) * g.bytes;
    HETERO_CUDA_TRY(LaunchDequantizeToHalf(m.format, at, count, m.cols, dst, stream));
    return {};
  }

  // The float16 weights of `parts` stacked row after row, for one cuBLAS GEMM: the layer's
  // fused buffer, an F16 matrix itself, or the parts staged in the weight scratch.
  Failure PromptWeights(std::initializer_list<const Matrix*> parts, const __half* fused, const __half** w) {
    if (!StagedInScratch(parts, fused)) {
      *w = fused != nullptr ? fused : (*parts.begin())->f16;
      return {};
    }
    __half* dst = weight_scratch.as<__half>();
    size_t at = 0;
    for (const Matrix* m : parts) {
      if ((at + m->elements()) * sizeof(__half) > weight_scratch.bytes) return Invalid("weight scratch too small");
      HETERO_FAILURE_TRY(StageHalf(*m, 0, m->rows, dst + at));
      at += m->elements();
    }
    *w = dst;
    return {};
  }

  // out = in W^T over `rows` float16 rows for one matrix (accumulating as MatMul does).
  Failure PromptMatMul(const Matrix& m, const __half* in, int rows, float* out, int ldc, bool accumulate) {
    const __half* w = nullptr;
    HETERO_FAILURE_TRY(PromptWeights({&m}, nullptr, &w));
    return MatMul(w, m.rows, m.cols, in, rows, out, ldc, accumulate);
  }

  // The logits of `rows` float16 rows: a block-format output a chunk of its rows at a time.
  Failure OutputMatMul(const __half* in, int rows, float* logits_out) {
    const Matrix& m = output_matrix();
    if (m.is_f16()) return MatMul(m.f16, m.rows, m.cols, in, rows, logits_out, m.rows, false);
    const size_t fit = weight_scratch.bytes / sizeof(__half) / m.cols;
    if (fit == 0) return Invalid("weight scratch too small for an output row");
    const int chunk = static_cast<int>(std::min<size_t>(fit, m.rows));
    __half* w = weight_scratch.as<__half>();
    for (int first = 0; first < m.rows; first += chunk) {
      const int count = std::min(chunk, m.rows - first);
      HETERO_FAILURE_TRY(StageHalf(m, first, count, w));
      HETERO_FAILURE_TRY(MatMul(w, count, m.cols, in, rows, logits_out + first, m.rows, false));
    }
    return {};
  }

  // Every kernel of one pass, on `stream` (captured into a graph for decode shapes).
  Failure Enqueue(int n_rows, int n_logit_rows, int table_stride) {
    const auto& c = desc;
    RowMap map{input_at(0), input_at(1), input_at(2), input_at(4), table_stride};
    const int32_t* logit_index = input_at(3);
    RopeArgs rope{c.n_heads, c.n_kv_heads, c.head_dim, c.rope_dim, c.rope_neox != 0, nullptr, c.rope_attn_factor};
    const bool gemv = n_rows <= gemv_pass_rows;
    const int qd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim, qkv_stride = qd + 2 * kvd;
    float* xs = x.as<float>();
    float* q = qkv.as<float>();
    __half* h16 = half_in.as<__half>();
    // A block's output goes straight into the residual stream (GEMV and GEMM accumulate,
    // residual scale included) unless the layer norms it first: then through `block_out`.
    float* block_out = h.as<float>();
    HETERO_CUDA_TRY(LaunchEmbed(token_embd.format, token_embd.gemv_weights(), map.tokens, n_rows, c.n_embd,
                                c.embedding_scale, xs, stream));
    for (int i = 0; i < c.n_layers; ++i) {
      Layer& l = *layers[i];
      rope.inv_freq = inv_freq.as<double>() + static_cast<size_t>(l.rope_table) * (c.rope_dim / 2);
      const bool post_attn = l.post_attn_norm.ptr != nullptr, post_ffn = l.post_ffn_norm.ptr != nullptr;
      if (gemv) {
        HETERO_FAILURE_TRY(Gemv({{&l.q, q, qkv_stride}, {&l.k, q + qd, qkv_stride}, {&l.v, q + qd + kvd, qkv_stride}},
                                xs, n_rows, false, l.attn_norm.as<float>()));
      } else {
        LaunchRmsNorm(xs, nullptr, l.attn_norm.as<float>(), n_rows, c.n_embd, c.rms_norm_eps, nullptr, h16, stream);
        const __half* w = nullptr;
        HETERO_FAILURE_TRY(PromptWeights({&l.q, &l.k, &l.v}, l.qkv_f16.as<__half>(), &w));
        HETERO_FAILURE_TRY(MatMul(w, qkv_stride, c.n_embd, h16, n_rows, q, qkv_stride, false));
      }
      QkvSteps steps;
      steps.q_bias = l.q_bias.as<float>();
      steps.k_bias = l.k_bias.as<float>();
      steps.v_bias = l.v_bias.as<float>();
      steps.q_norm = l.q_norm.as<float>();
      steps.k_norm = l.k_norm.as<float>();
      steps.qk_norm_per_head = l.qk_norm_per_head;
      steps.eps = c.rms_norm_eps;
      LaunchRopeAndStore(q, qkv_stride, steps, n_rows, rope, map, kv, i, stream);
      LaunchAttention(q, qkv_stride, n_rows, c.n_heads, c.n_kv_heads, c.head_dim, c.attention_scale, l.sliding_window,
                      map, kv, i, att.as<float>(), stream);
      // The attention block's output projection, into the residual stream or through the norm.
      if (gemv) {
        HETERO_FAILURE_TRY(Gemv({{&l.o, post_attn ? block_out : xs, c.n_embd}}, att.as<float>(), n_rows, !post_attn, nullptr));
      } else {
        LaunchToHalf(att.as<float>(), static_cast<size_t>(n_rows) * qd, h16, stream);
        HETERO_FAILURE_TRY(PromptMatMul(l.o, h16, n_rows, post_attn ? block_out : xs, c.n_embd, !post_attn));
      }
      if (post_attn) {
        LaunchAddToResidual(xs, block_out, l.post_attn_norm.as<float>(), n_rows, c.n_embd, c.rms_norm_eps,
                            c.residual_scale, stream);
      }
      // The feed-forward block: experts, decode-sized GEMVs, or cuBLAS.
      float* ffn_out = post_ffn ? block_out : xs;
      if (l.n_experts > 0) {
        HETERO_FAILURE_TRY(ExpertsFfn(l, n_rows, ffn_out, !post_ffn));
      } else if (gemv) {
        HETERO_FAILURE_TRY(Gemv({{&l.gate, ffn.as<float>(), c.n_ff}, {&l.up, nullptr, c.n_ff}}, xs, n_rows, false,
                                l.ffn_norm.as<float>(), /*swiglu=*/true));
        HETERO_FAILURE_TRY(Gemv({{&l.down, ffn_out, c.n_embd}}, ffn.as<float>(), n_rows, !post_ffn, nullptr));
      } else {
        LaunchRmsNorm(xs, nullptr, l.ffn_norm.as<float>(), n_rows, c.n_embd, c.rms_norm_eps, nullptr, h16, stream);
        const __half* w = nullptr;
        HETERO_FAILURE_TRY(PromptWeights({&l.gate, &l.up}, l.gate_up_f16.as<__half>(), &w));
        HETERO_FAILURE_TRY(MatMul(w, 2 * c.n_ff, c.n_embd, h16, n_rows, gate_up.as<float>(), 2 * c.n_ff, false));
        LaunchGatedActivation(gate_up.as<float>(), n_rows, c.n_ff, c.activation == HETERO_CUDA_ACTIVATION_GELU_TANH,
                              nullptr, h16, stream);
        HETERO_FAILURE_TRY(PromptMatMul(l.down, h16, n_rows, ffn_out, c.n_embd, !post_ffn));
      }
      if (post_ffn) {
        LaunchAddToResidual(xs, block_out, l.post_ffn_norm.as<float>(), n_rows, c.n_embd, c.rms_norm_eps, c.residual_scale,
                            stream);
      }
    }
    if (n_logit_rows <= gemv_pass_rows) {
      LaunchRmsNorm(xs, logit_index, output_norm.as<float>(), n_logit_rows, c.n_embd, c.rms_norm_eps, h.as<float>(),
                    nullptr, stream);
      HETERO_FAILURE_TRY(
          Gemv({{&output_matrix(), logits.as<float>(), c.n_vocab}}, h.as<float>(), n_logit_rows, false, nullptr));
    } else {
      LaunchRmsNorm(xs, logit_index, output_norm.as<float>(), n_logit_rows, c.n_embd, c.rms_norm_eps, nullptr, h16,
                    stream);
      HETERO_FAILURE_TRY(OutputMatMul(h16, n_logit_rows, logits.as<float>()));
    }
    HETERO_CUDA_TRY(cudaGetLastError());
    return {};
  }

  Failure Forward(const hetero_cuda_forward_args& a) {
    const auto& c = desc;
    // Each engine device has its own worker thread, but a thread may serve several GPUs
    // (tests, benchmarks): this model's GPU is current for the call.
    const CurrentDevice current(c.device);
    HETERO_CUDA_TRY(current.error());
    host_rows = a.n_rows;
    host_failed.store(false);
    if (a.n_rows <= 0 || a.n_rows > c.max_rows || a.n_seqs <= 0 || a.table_stride <= 0 || a.n_logit_rows <= 0 ||
        a.n_logit_rows > a.n_rows || a.tokens == nullptr || a.positions == nullptr || a.seq_of_row == nullptr ||
        a.block_tables == nullptr || a.logit_rows == nullptr || (a.logits == nullptr && a.greedy_tokens == nullptr)) {
      return Invalid("forward: bad row counts or a missing array (rows must be 1.." + std::to_string(c.max_rows) + ")");
    }
    // Every index the kernels follow is checked here, on the host.
    for (int r = 0; r < a.n_rows; ++r) {
      if (a.tokens[r] < 0 || a.tokens[r] >= c.n_vocab) return Invalid("forward: token id outside the vocabulary");
      if (a.seq_of_row[r] < 0 || a.seq_of_row[r] >= a.n_seqs) return Invalid("forward: row names no sequence");
      if (a.positions[r] < 0 || a.positions[r] / c.kv_block_tokens >= a.table_stride) {
        return Invalid("forward: position beyond the sequence's block table");
      }
    }
    for (int i = 0; i < a.n_seqs * a.table_stride; ++i) {
      if (a.block_tables[i] < -1 || a.block_tables[i] >= c.kv_blocks) return Invalid("forward: block id out of range");
    }
    for (int r = 0; r < a.n_rows; ++r) {
      for (int b = 0; b <= a.positions[r] / c.kv_block_tokens; ++b) {
        if (a.block_tables[static_cast<size_t>(a.seq_of_row[r]) * a.table_stride + b] < 0) {
          return Invalid("forward: a row's keys lie in an unassigned block");
        }
      }
    }
    for (int i = 0; i < a.n_logit_rows; ++i) {
      if (a.logit_rows[i] < 0 || a.logit_rows[i] >= a.n_rows) return Invalid("forward: logit row out of range");
    }
    const int table_entries = a.n_seqs * a.table_stride;
    if (table_entries > tables_capacity) {
      // The graphs hold the old address.
      HETERO_CUDA_TRY(cudaStreamSynchronize(stream));
      for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
      graphs.clear();
      const int capacity = std::max(table_entries, 2 * tables_capacity);
      const size_t entries = 4 * static_cast<size_t>(c.max_rows) + capacity;
      HETERO_FAILURE_TRY(inputs.Allocate(entries * sizeof(int32_t), "cudaMalloc(inputs)"));
      HETERO_FAILURE_TRY(staging_in.Allocate(entries * sizeof(int32_t)));
      tables_capacity = capacity;
    }
    auto* staged = static_cast<int32_t*>(staging_in.ptr);
    const size_t stride = c.max_rows;
    std::memcpy(staged, a.tokens, a.n_rows * sizeof(int32_t));
    std::memcpy(staged + stride, a.positions, a.n_rows * sizeof(int32_t));
    std::memcpy(staged + 2 * stride, a.seq_of_row, a.n_rows * sizeof(int32_t));
    std::memcpy(staged + 3 * stride, a.logit_rows, a.n_logit_rows * sizeof(int32_t));
    std::memcpy(staged + 4 * stride, a.block_tables, table_entries * sizeof(int32_t));
    HETERO_CUDA_TRY(cudaMemcpyAsync(inputs.ptr, staged, (4 * stride + table_entries) * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, stream));
    if (a.n_rows <= kGraphMaxRows) {
      const auto key = std::make_tuple(a.n_rows, a.n_logit_rows, a.table_stride);
      auto it = graphs.find(key);
      if (it == graphs.end()) {
        cudaGraph_t graph = nullptr;
        HETERO_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        Failure enqueued = Enqueue(a.n_rows, a.n_logit_rows, a.table_stride);
        const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
        if (!enqueued.ok()) {
          if (graph != nullptr) cudaGraphDestroy(graph);
          return enqueued;
        }
        HETERO_CUDA_TRY(ended);
        cudaGraphExec_t exec = nullptr;
        const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        HETERO_CUDA_TRY(instantiated);
        it = graphs.emplace(key, exec).first;
      }
      HETERO_CUDA_TRY(cudaGraphLaunch(it->second, stream));
    } else {
      if (Failure enqueued = Enqueue(a.n_rows, a.n_logit_rows, a.table_stride); !enqueued.ok()) {
        // Host nodes already queued still run and use the host buffers: let them finish
        // before the next pass reuses them.
        cudaStreamSynchronize(stream);
        return enqueued;
      }
    }
    if (a.greedy_tokens != nullptr) {
      LaunchArgmax(logits.as<float>(), a.n_logit_rows, c.n_vocab, greedy.as<int32_t>(), stream);
      HETERO_CUDA_TRY(cudaGetLastError());
      HETERO_CUDA_TRY(cudaMemcpyAsync(staging_in.ptr, greedy.ptr, a.n_logit_rows * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, stream));
    }
    if (a.logits != nullptr) {
      // Straight into the caller's memory: no second host copy of every logit.
      const size_t logit_bytes = static_cast<size_t>(a.n_logit_rows) * c.n_vocab * sizeof(float);
      HETERO_CUDA_TRY(cudaMemcpyAsync(a.logits, logits.ptr, logit_bytes, cudaMemcpyDeviceToHost, stream));
    }
    HETERO_CUDA_TRY(cudaStreamSynchronize(stream));
    if (host_failed.load()) return {HETERO_CUDA_DEVICE_ERROR, std::string("experts on the host: ") + host_message};
    if (a.greedy_tokens != nullptr) {
      std::memcpy(a.greedy_tokens, staging_in.ptr, a.n_logit_rows * sizeof(int32_t));
    }
    return {};
  }

  Failure ExpertCounts(int layer, uint64_t* counts, int n_experts) {
    const CurrentDevice current(desc.device);
    HETERO_CUDA_TRY(current.error());
    if (layer < 0 || layer >= static_cast<int>(layers.size()) || layers[layer]->n_experts == 0) {
      return Invalid("expert_counts: the layer has no experts");
    }
    const Layer& l = *layers[layer];
    if (counts == nullptr || n_experts != l.n_experts) return Invalid("expert_counts: bad arguments");
    // On the copy stream, not ordered against the passes: a pass in flight may still add.
    static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
    HETERO_CUDA_TRY(cudaMemcpyAsync(counts, l.expert_counts.ptr, l.expert_counts.bytes, cudaMemcpyDeviceToHost,
                                    copy_stream));
    HETERO_CUDA_TRY(cudaStreamSynchronize(copy_stream));
    return {};
  }

  Failure CopyKv(bool to_host, const int32_t* blocks, int n_blocks, float* host) {
    const CurrentDevice current(desc.device);
    HETERO_CUDA_TRY(current.error());
    if (n_blocks < 0 || (n_blocks > 0 && (blocks == nullptr || host == nullptr))) return Invalid("copy_kv: bad arguments");
    for (int i = 0; i < n_blocks; ++i) {
      if (blocks[i] < 0 || blocks[i] >= desc.kv_blocks) return Invalid("copy_kv: block id out of range");
    }
    // No ordering against the compute stream: every forward pass has finished when it
    // returns, and the caller copies only blocks no pass in flight touches. So a copy here
    // overlaps other sequences' passes (the copy stream is the module's own).
    const size_t bytes = kv.block_floats * sizeof(float);
    // Runs of consecutive block ids move in one copy.
    for (int i = 0; i < n_blocks;) {
      int j = i + 1;
      while (j < n_blocks && blocks[j] == blocks[j - 1] + 1) ++j;
      float* device = kv.pool + static_cast<size_t>(blocks[i]) * kv.block_floats;
      float* h_ptr = host + static_cast<size_t>(i) * kv.block_floats;
      const size_t n = bytes * (j - i);
      if (to_host) {
        HETERO_CUDA_TRY(cudaMemcpyAsync(h_ptr, device, n, cudaMemcpyDeviceToHost, copy_stream));
      } else {
        HETERO_CUDA_TRY(cudaMemcpyAsync(device, h_ptr, n, cudaMemcpyHostToDevice, copy_stream));
      }
      i = j;
    }
    HETERO_CUDA_TRY(cudaStreamSynchronize(copy_stream));
    return {};
  }
};

}  // namespace hetero::gpu

struct hetero_cuda_model {
  hetero::gpu::Model model;
};

using hetero::gpu::Failure;

HETERO_CUDA_MODULE_EXPORT int32_t hetero_cuda_model_create(const hetero_cuda_model_desc* desc,
                                                           hetero_cuda_model** out, char* message,
                                                           size_t message_size) {
  if (desc == nullptr || out == nullptr) {
    return hetero::gpu::Report(hetero::gpu::Invalid("model_create: null argument"), message, message_size);
  }
  *out = nullptr;
  auto* m = new (std::nothrow) hetero_cuda_model;
  if (m == nullptr) return hetero::gpu::Report({HETERO_CUDA_OUT_OF_MEMORY, "host memory"}, message, message_size);
  Failure f = m->model.Create(*desc);
  if (!f.ok()) {
    delete m;
    return hetero::gpu::Report(f, message, message_size);
  }
  *out = m;
  return HETERO_CUDA_OK;
}

HETERO_CUDA_MODULE_EXPORT void hetero_cuda_model_destroy(hetero_cuda_model* model) { delete model; }

HETERO_CUDA_MODULE_EXPORT int32_t hetero_cuda_model_forward(hetero_cuda_model* model,
                                                            const hetero_cuda_forward_args* args, char* message,
                                                            size_t message_size) {
  if (model == nullptr || args == nullptr) {
    return hetero::gpu::Report(hetero::gpu::Invalid("forward: null argument"), message, message_size);
  }
  return hetero::gpu::Report(model->model.Forward(*args), message, message_size);
}

HETERO_CUDA_MODULE_EXPORT int32_t hetero_cuda_model_copy_kv(hetero_cuda_model* model, int32_t to_host,
                                                            const int32_t* blocks, int32_t n_blocks, float* host,
                                                            char* message, size_t message_size) {
  if (model == nullptr) return hetero::gpu::Report(hetero::gpu::Invalid("copy_kv: null model"), message, message_size);
  return hetero::gpu::Report(model->model.CopyKv(to_host != 0, blocks, n_blocks, host), message, message_size);
}

HETERO_CUDA_MODULE_EXPORT int32_t hetero_cuda_model_expert_counts(hetero_cuda_model* model, int32_t layer,
                                                                  uint64_t* counts, int32_t n_experts, char* message,
                                                                  size_t message_size) {
  if (model == nullptr) {
    return hetero::gpu::Report(hetero::gpu::Invalid("expert_counts: null model"), message, message_size);
  }
  return hetero::gpu::Report(model->model.ExpertCounts(layer, counts, n_experts), message, message_size);
}

HETERO_CUDA_MODULE_EXPORT uint64_t hetero_cuda_model_device_bytes(const hetero_cuda_model* model) {
  return model == nullptr ? 0 : model->model.device_bytes();
}
