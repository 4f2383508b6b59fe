// The module's model runtime: weights uploaded once, a device KV pool in the CPU backend's
// block layout, and a forward pass of own kernels plus cuBLAS. Small passes (at most
// kGemvPassRows rows) use only own kernels, with the layer norms, q/k/v and gate/up/SwiGLU
// fused into GEMV launches; decode batches up to kGraphMaxRows rows are captured in a CUDA
// graph per shape (cuBLAS calls included) and replayed; inputs
// reach the graph through one fixed device buffer, so a step costs one upload, one graph
// launch, one download and one host synchronisation.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
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
#include "src/gpu/cuda_module_abi.h"

#define HETERO_CUDA_MODULE_EXPORT extern "C" __attribute__((visibility("default")))

namespace hetero::gpu {
namespace {

// A failed CUDA or cuBLAS call: the call, its error name and code.
struct Failure {
  int32_t code = HETERO_CUDA_OK;
  std::string message;
  bool ok() const { return code == HETERO_CUDA_OK; }
};

Failure FromCuda(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return {};
  cudaGetLastError();
  Failure f;
  f.code = e == cudaErrorMemoryAllocation ? HETERO_CUDA_OUT_OF_MEMORY : HETERO_CUDA_DEVICE_ERROR;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s failed: %s (%d): %s", call, cudaGetErrorName(e), static_cast<int>(e),
                cudaGetErrorString(e));
  f.message = buf;
  return f;
}

Failure FromCublas(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  Failure f;
  f.code = s == CUBLAS_STATUS_ALLOC_FAILED ? HETERO_CUDA_OUT_OF_MEMORY : HETERO_CUDA_DEVICE_ERROR;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s failed: %s (%d)", call, cublasGetStatusName(s), static_cast<int>(s));
  f.message = buf;
  return f;
}

Failure Invalid(const std::string& message) { return {HETERO_CUDA_INVALID_ARGUMENT, message}; }

#define HETERO_CUDA_TRY(call)                                  \
  do {                                                         \
    if (Failure f_ = FromCuda((call), #call); !f_.ok()) return f_; \
  } while (0)
#define HETERO_CUBLAS_TRY(call)                                  \
  do {                                                           \
    if (Failure f_ = FromCublas((call), #call); !f_.ok()) return f_; \
  } while (0)
#define HETERO_FAILURE_TRY(expr)              \
  do {                                        \
    if (Failure f_ = (expr); !f_.ok()) return f_; \
  } while (0)

int32_t Report(const Failure& f, char* message, size_t size) {
  if (!f.ok() && message != nullptr && size > 0) std::snprintf(message, size, "%s", f.message.c_str());
  return f.code;
}

// Device memory freed with its owner.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
  Failure Allocate(size_t n, const char* what) {
    if (ptr != nullptr) cudaFree(ptr);
    ptr = nullptr;
    bytes = 0;
    if (n == 0) return {};
    if (Failure f = FromCuda(cudaMalloc(&ptr, n), what); !f.ok()) {
      ptr = nullptr;
      return f;
    }
    bytes = n;
    return {};
  }
  Failure Upload(const void* host, size_t n, const char* what) {
    HETERO_FAILURE_TRY(Allocate(n, what));
    if (n > 0) HETERO_CUDA_TRY(cudaMemcpy(ptr, host, n, cudaMemcpyHostToDevice));
    return {};
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

struct PinnedBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  ~PinnedBuffer() {
    if (ptr != nullptr) cudaFreeHost(ptr);
  }
  Failure Allocate(size_t n) {
    if (ptr != nullptr) cudaFreeHost(ptr);
    ptr = nullptr;
    bytes = 0;
    HETERO_CUDA_TRY(cudaHostAlloc(&ptr, n, cudaHostAllocDefault));
    bytes = n;
    return {};
  }
};

struct Matrix {
  int format = 0;
  int rows = 0, cols = 0;
  DeviceBuffer blocks;  // quantized blocks (none for F16)
  DeviceBuffer f16;     // rows x cols half

  Failure Upload(const hetero_cuda_matrix& m, const char* name) {
    if (m.rows <= 0 || m.cols <= 0 || m.cols % 32 != 0 || m.f16 == nullptr) {
      return Invalid(std::string("matrix ") + name + ": bad shape or no float16 copy");
    }
    if (m.format != HETERO_CUDA_WEIGHTS_F16 && m.format != HETERO_CUDA_WEIGHTS_Q4_0 &&
        m.format != HETERO_CUDA_WEIGHTS_Q4_1 && m.format != HETERO_CUDA_WEIGHTS_Q8_0) {
      return Invalid(std::string("matrix ") + name + ": unknown weight format " + std::to_string(m.format));
    }
    format = m.format;
    rows = m.rows;
    cols = m.cols;
    if (format != HETERO_CUDA_WEIGHTS_F16) {
      const size_t block_bytes = format == HETERO_CUDA_WEIGHTS_Q8_0 ? 34 : (format == HETERO_CUDA_WEIGHTS_Q4_1 ? 20 : 18);
      const size_t expected = static_cast<size_t>(rows) * (cols / 32) * block_bytes;
      if (m.blocks == nullptr || m.blocks_bytes != expected) {
        return Invalid(std::string("matrix ") + name + ": block data size does not match its shape");
      }
      HETERO_FAILURE_TRY(blocks.Upload(m.blocks, expected, "cudaMalloc(weight blocks)"));
    }
    return f16.Upload(m.f16, static_cast<size_t>(rows) * cols * sizeof(__half), "cudaMalloc(float16 weights)");
  }
  size_t device_bytes() const { return blocks.bytes + f16.bytes; }
};

struct Layer {
  DeviceBuffer attn_norm, ffn_norm, q_bias, k_bias, v_bias;
  Matrix q, k, v, o, gate, up, down;
};

}  // namespace

struct Model {
  hetero_cuda_model_desc desc{};
  cudaStream_t stream = nullptr;
  cudaStream_t copy_stream = nullptr;
  cublasHandle_t cublas = nullptr;
  DeviceBuffer token_embd, output_norm, inv_freq, kv_pool, cublas_workspace;
  Matrix output;
  std::vector<std::unique_ptr<Layer>> layers;
  KvLayout kv{};
  // Scratch for max_rows rows.
  DeviceBuffer x, h, q, k, v, att, gate, up, tmp, half_in, logits;
  // Inputs at fixed device addresses (the captured graphs read them there), in one buffer
  // so that one copy moves them: tokens, positions, seq_of_row, logit_rows (max_rows
  // each), then the block tables.
  DeviceBuffer inputs;
  PinnedBuffer staging_in;
  int tables_capacity = 0;  // int32 entries
  // Captured decode graphs by (rows, logit rows, table stride).
  std::map<std::tuple<int, int, int>, cudaGraphExec_t> graphs;

  ~Model() {
    for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
    if (cublas != nullptr) cublasDestroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (copy_stream != nullptr) cudaStreamDestroy(copy_stream);
  }

  size_t device_bytes() const {
    size_t total = token_embd.bytes + output_norm.bytes + inv_freq.bytes + kv_pool.bytes + cublas_workspace.bytes +
                   output.device_bytes();
    for (const auto& l : layers) {
      total += l->attn_norm.bytes + l->ffn_norm.bytes + l->q_bias.bytes + l->k_bias.bytes + l->v_bias.bytes;
      for (const Matrix* m : {&l->q, &l->k, &l->v, &l->o, &l->gate, &l->up, &l->down}) total += m->device_bytes();
    }
    for (const DeviceBuffer* b : {&x, &h, &q, &k, &v, &att, &gate, &up, &tmp, &half_in, &logits, &inputs}) {
      total += b->bytes;
    }
    return total;
  }

  Failure Create(const hetero_cuda_model_desc& d) {
    desc = d;
    const auto& c = desc;
    if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 || c.n_ff <= 0 ||
        c.n_vocab <= 0 || c.kv_block_tokens <= 0 || c.kv_blocks <= 0 || c.max_rows <= 0 || c.layers == nullptr ||
        c.token_embd_f16 == nullptr || c.output_norm == nullptr || c.rope_inv_freq == nullptr) {
      return Invalid("model description has a zero size or a missing tensor");
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
    HETERO_FAILURE_TRY(token_embd.Upload(c.token_embd_f16, static_cast<size_t>(c.n_vocab) * c.n_embd * sizeof(__half),
                                         "cudaMalloc(token embeddings)"));
    HETERO_FAILURE_TRY(output_norm.Upload(c.output_norm, c.n_embd * sizeof(float), "cudaMalloc(output norm)"));
    HETERO_FAILURE_TRY(inv_freq.Upload(c.rope_inv_freq, c.rope_dim / 2 * sizeof(double), "cudaMalloc(rope)"));
    HETERO_FAILURE_TRY(output.Upload(c.output, "output"));
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
      HETERO_FAILURE_TRY(l->q.Upload(src.q, "q"));
      HETERO_FAILURE_TRY(l->k.Upload(src.k, "k"));
      HETERO_FAILURE_TRY(l->v.Upload(src.v, "v"));
      HETERO_FAILURE_TRY(l->o.Upload(src.o, "o"));
      HETERO_FAILURE_TRY(l->gate.Upload(src.gate, "gate"));
      HETERO_FAILURE_TRY(l->up.Upload(src.up, "up"));
      HETERO_FAILURE_TRY(l->down.Upload(src.down, "down"));
      if (l->q.rows != qd || l->k.rows != kvd || l->v.rows != kvd || l->o.rows != c.n_embd || l->gate.rows != c.n_ff ||
          l->up.rows != c.n_ff || l->down.rows != c.n_embd || l->down.cols != c.n_ff || l->q.cols != c.n_embd) {
        return Invalid("layer " + std::to_string(i) + ": matrix shapes do not match the model description");
      }
      layers.push_back(std::move(l));
    }
    kv.block_tokens = c.kv_block_tokens;
    kv.head_floats = static_cast<size_t>(c.kv_block_tokens) * c.head_dim;
    kv.layer_floats = 2 * static_cast<size_t>(c.n_kv_heads) * kv.head_floats;
    kv.block_floats = static_cast<size_t>(c.n_layers) * kv.layer_floats;
    HETERO_FAILURE_TRY(kv_pool.Allocate(static_cast<size_t>(c.kv_blocks) * kv.block_floats * sizeof(float),
                                        "cudaMalloc(KV pool)"));
    kv.pool = kv_pool.as<float>();
    const size_t rows = c.max_rows;
    const size_t widest = std::max<size_t>({static_cast<size_t>(c.n_embd), static_cast<size_t>(qd),
                                            static_cast<size_t>(c.n_ff)});
    HETERO_FAILURE_TRY(x.Allocate(rows * c.n_embd * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(h.Allocate(rows * c.n_embd * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(q.Allocate(rows * qd * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(k.Allocate(rows * kvd * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(v.Allocate(rows * kvd * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(att.Allocate(rows * qd * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(gate.Allocate(rows * c.n_ff * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(up.Allocate(rows * c.n_ff * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(tmp.Allocate(rows * c.n_embd * sizeof(float), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(half_in.Allocate(rows * widest * sizeof(__half), "cudaMalloc(scratch)"));
    HETERO_FAILURE_TRY(logits.Allocate(rows * c.n_vocab * sizeof(float), "cudaMalloc(logits)"));
    return {};
  }

  int32_t* input_at(int slot) const { return inputs.as<int32_t>() + static_cast<size_t>(slot) * desc.max_rows; }

  // Own GEMV over decode-sized batches: `mats` multiplied by the same rows in one launch
  // where they share a format (else one launch each); `norm` fuses the RMSNorm before.
  Failure Gemv(std::initializer_list<std::pair<const Matrix*, float*>> mats, const float* in, int rows, bool accumulate,
               const float* norm, bool swiglu = false) {
    GemvLaunch launch;
    launch.x = in;
    launch.rows = rows;
    launch.norm_weight = norm;
    launch.eps = desc.rms_norm_eps;
    launch.swiglu = swiglu;
    bool same = true;
    for (const auto& [m, out] : mats) same = same && m->format == mats.begin()->first->format;
    auto segment = [&](const Matrix& m, float* out) {
      return GemvSegment{m.format == HETERO_CUDA_WEIGHTS_F16 ? m.f16.ptr : m.blocks.ptr, out, m.rows, accumulate};
    };
    if (same) {
      launch.format = mats.begin()->first->format;
      launch.k = mats.begin()->first->cols;
      for (const auto& [m, out] : mats) launch.segments[launch.n_segments++] = segment(*m, out);
      HETERO_CUDA_TRY(LaunchGemv(launch, stream));
      return {};
    }
    if (swiglu) {  // mixed formats: gate and up apart, then the product
      const Matrix& g = *mats.begin()->first;
      const Matrix& u = *(mats.begin() + 1)->first;
      HETERO_FAILURE_TRY(Gemv({{&g, gate.as<float>()}}, in, rows, false, norm));
      HETERO_FAILURE_TRY(Gemv({{&u, up.as<float>()}}, in, rows, false, norm));
      LaunchSiluMul(gate.as<float>(), up.as<float>(), static_cast<size_t>(rows) * g.rows, stream);
      return {};
    }
    for (const auto& [m, out] : mats) HETERO_FAILURE_TRY(Gemv({{m, out}}, in, rows, accumulate, norm));
    return {};
  }

  // y (+)= x W^T through cuBLAS in float16 (prompt passes).
  Failure MatMul(const Matrix& w, const float* in, int rows, float* out, bool accumulate) {
    LaunchToHalf(in, static_cast<size_t>(rows) * w.cols, half_in.as<__half>(), stream);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    // Row-major y (rows x n) = x (rows x k) W^T, as column-major y^T = W x^T.
    HETERO_CUBLAS_TRY(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, w.rows, rows, w.cols, &alpha, w.f16.ptr, CUDA_R_16F,
                                   w.cols, half_in.ptr, CUDA_R_16F, w.cols, &beta, out, CUDA_R_32F, w.rows,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return {};
  }

  // Every kernel of one pass, on `stream` (captured into a graph for decode shapes).
  Failure Enqueue(int n_rows, int n_logit_rows, int table_stride) {
    const auto& c = desc;
    RowMap map{input_at(0), input_at(1), input_at(2), input_at(4), table_stride};
    const int32_t* logit_index = input_at(3);
    RopeArgs rope{c.n_heads, c.n_kv_heads, c.head_dim, c.rope_dim, c.rope_neox != 0, inv_freq.as<double>()};
    const bool decode = n_rows <= kGemvPassRows;
    float* xs = x.as<float>();
    LaunchEmbed(token_embd.as<__half>(), map.tokens, n_rows, c.n_embd, xs, stream);
    for (int i = 0; i < c.n_layers; ++i) {
      Layer& l = *layers[i];
      if (decode) {
        HETERO_FAILURE_TRY(Gemv({{&l.q, q.as<float>()}, {&l.k, k.as<float>()}, {&l.v, v.as<float>()}}, xs, n_rows, false,
                                l.attn_norm.as<float>()));
      } else {
        LaunchRmsNorm(xs, nullptr, l.attn_norm.as<float>(), n_rows, c.n_embd, c.rms_norm_eps, h.as<float>(), stream);
        HETERO_FAILURE_TRY(MatMul(l.q, h.as<float>(), n_rows, q.as<float>(), false));
        HETERO_FAILURE_TRY(MatMul(l.k, h.as<float>(), n_rows, k.as<float>(), false));
        HETERO_FAILURE_TRY(MatMul(l.v, h.as<float>(), n_rows, v.as<float>(), false));
      }
      LaunchRopeAndStore(q.as<float>(), k.as<float>(), v.as<float>(), l.q_bias.as<float>(), l.k_bias.as<float>(),
                         l.v_bias.as<float>(), n_rows, rope, map, kv, i, stream);
      LaunchAttention(q.as<float>(), n_rows, c.n_heads, c.n_kv_heads, c.head_dim, map, kv, i, att.as<float>(), stream);
      if (decode) {
        HETERO_FAILURE_TRY(Gemv({{&l.o, xs}}, att.as<float>(), n_rows, true, nullptr));
        HETERO_FAILURE_TRY(Gemv({{&l.gate, gate.as<float>()}, {&l.up, up.as<float>()}}, xs, n_rows, false,
                                l.ffn_norm.as<float>(), /*swiglu=*/true));
        HETERO_FAILURE_TRY(Gemv({{&l.down, xs}}, gate.as<float>(), n_rows, true, nullptr));
      } else {
        HETERO_FAILURE_TRY(MatMul(l.o, att.as<float>(), n_rows, xs, true));
        LaunchRmsNorm(xs, nullptr, l.ffn_norm.as<float>(), n_rows, c.n_embd, c.rms_norm_eps, h.as<float>(), stream);
        HETERO_FAILURE_TRY(MatMul(l.gate, h.as<float>(), n_rows, gate.as<float>(), false));
        HETERO_FAILURE_TRY(MatMul(l.up, h.as<float>(), n_rows, up.as<float>(), false));
        LaunchSiluMul(gate.as<float>(), up.as<float>(), static_cast<size_t>(n_rows) * c.n_ff, stream);
        HETERO_FAILURE_TRY(MatMul(l.down, gate.as<float>(), n_rows, xs, true));
      }
    }
    LaunchRmsNorm(xs, logit_index, output_norm.as<float>(), n_logit_rows, c.n_embd, c.rms_norm_eps, h.as<float>(),
                  stream);
    if (n_logit_rows <= kGemvPassRows) {
      HETERO_FAILURE_TRY(Gemv({{&output, logits.as<float>()}}, h.as<float>(), n_logit_rows, false, nullptr));
    } else {
      HETERO_FAILURE_TRY(MatMul(output, h.as<float>(), n_logit_rows, logits.as<float>(), false));
    }
    HETERO_CUDA_TRY(cudaGetLastError());
    return {};
  }

  Failure Forward(const hetero_cuda_forward_args& a) {
    const auto& c = desc;
    if (a.n_rows <= 0 || a.n_rows > c.max_rows || a.n_seqs <= 0 || a.table_stride <= 0 || a.n_logit_rows <= 0 ||
        a.n_logit_rows > a.n_rows || a.tokens == nullptr || a.positions == nullptr || a.seq_of_row == nullptr ||
        a.block_tables == nullptr || a.logit_rows == nullptr || a.logits == nullptr) {
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
      HETERO_FAILURE_TRY(Enqueue(a.n_rows, a.n_logit_rows, a.table_stride));
    }
    const size_t logit_bytes = static_cast<size_t>(a.n_logit_rows) * c.n_vocab * sizeof(float);
    // Straight into the caller's memory: no second host copy of every logit.
    HETERO_CUDA_TRY(cudaMemcpyAsync(a.logits, logits.ptr, logit_bytes, cudaMemcpyDeviceToHost, stream));
    HETERO_CUDA_TRY(cudaStreamSynchronize(stream));
    return {};
  }

  Failure CopyKv(bool to_host, const int32_t* blocks, int n_blocks, float* host) {
    if (n_blocks < 0 || (n_blocks > 0 && (blocks == nullptr || host == nullptr))) return Invalid("copy_kv: bad arguments");
    for (int i = 0; i < n_blocks; ++i) {
      if (blocks[i] < 0 || blocks[i] >= desc.kv_blocks) return Invalid("copy_kv: block id out of range");
    }
    // Pending compute may still write these blocks: order the copy stream after it.
    cudaEvent_t computed = nullptr;
    HETERO_CUDA_TRY(cudaEventCreateWithFlags(&computed, cudaEventDisableTiming));
    Failure f = FromCuda(cudaEventRecord(computed, stream), "cudaEventRecord");
    if (f.ok()) f = FromCuda(cudaStreamWaitEvent(copy_stream, computed, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(computed);
    if (!f.ok()) return f;
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

HETERO_CUDA_MODULE_EXPORT uint64_t hetero_cuda_model_device_bytes(const hetero_cuda_model* model) {
  return model == nullptr ? 0 : model->model.device_bytes();
}
