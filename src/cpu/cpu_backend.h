// The CPU backend: any model definition (src/runtime/models/) in f32 activations, matrix products through
// oneDNN and the native quantized kernels (see linear.h), mixtures of experts (experts.h), a paged f32 KV cache, a thread
// pool for our kernels (oneDNN threads itself with OpenMP).
#ifndef HETERO_CPU_CPU_BACKEND_H_
#define HETERO_CPU_CPU_BACKEND_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "src/runtime/sync.h"
#include "hetero/engine.h"
#include "hetero/model.h"
#include "src/cpu/attention.h"
#include "src/cpu/cpu_ops.h"
#include "src/cpu/experts.h"
#include "src/cpu/linear.h"
#include "src/cpu/thread_pool.h"
#include "src/runtime/backend.h"
#include "src/runtime/kv_cache.h"
#include "src/runtime/paged_backend.h"

namespace hetero {

// The thread count measured best here: every logical CPU (on the 2-vCPU development
// machine, 2 threads beat 1 for both prefill and decode; docs/PERFORMANCE.md).
int DefaultCpuThreads();
// Whether oneDNN can multiply in bf16 on this CPU (AVX-512 and up).
bool CpuHasBf16Matmul();

struct CpuBackendOptions {
  int threads = DefaultCpuThreads();  // threads of this backend's pool (and of oneDNN's OpenMP team)
  CpuPrecision precision = CpuPrecision::kAuto;
  int max_sequences = 8;
  int kv_block_tokens = 16;
  // KV capacity in tokens over all sequences; 0 means one full context. Blocks are
  // allocated when first used, so unused capacity costs no memory.
  int kv_capacity_tokens = 0;
  // Sequences starting with the same tokens share those tokens' KV blocks
  // (copy-on-write; src/runtime/kv_cache.h).
  bool share_kv_prefixes = true;
  // Prompt chunks of at least this many rows use the bf16 GEMM path for native weights.
  // 0: automatic. Where the AVX-512 VNNI kernels run, never: they beat the bf16 GEMM at
  // every prompt length measured (docs/PERFORMANCE.md). On a CPU with AVX-512 BF16 but no
  // VNNI, 8 rows (not measured: no such CPU here). Without AVX-512, never: oneDNN has no
  // bf16 matmul there, and setting this is an error.
  int bf16_min_rows = 0;
};

class CpuBackend : public PagedBackend {
 public:
  // `model` must outlive the backend (weights are read from its mapping).
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const Model& model, const CpuBackendOptions& options);

  const BackendInfo& info() const override { return info_; }
  int vocab_size() const override { return config_.n_vocab; }
  absl::StatusOr<SavedSequence> SwapOut(SequenceId seq) override;
  absl::StatusOr<SequenceId> SwapIn(const SavedSequence& saved) override;
  absl::Status Step(absl::Span<const SequenceChunk> chunks, absl::Span<float> logits) override;
  bool can_apply_adapters() const override { return true; }
  ExpertUsage expert_usage() const override;

  // Logits for every position of `tokens` appended to `seq` (tests: compare decode with
  // recompute). `logits` holds tokens.size() x vocab_size floats.
  absl::Status PrefillAllLogits(SequenceId seq, absl::Span<const int32_t> tokens, absl::Span<float> logits);

  // Sentence embeddings (Engine::Embed): each input's final-norm hidden states pooled (mean
  // over its tokens, or its last token) and scaled to unit length, n_embd floats each.
  // Inputs are batched into forward passes of up to kEmbedBatchTokens tokens (one matmul
  // per weight for all of them), in temporary sequences freed before returning; the cache
  // of live sequences is untouched. InvalidArgument for an empty input or a bad token id,
  // OutOfRange past the context length, ResourceExhausted when the KV cache has no room.
  static constexpr int kEmbedBatchTokens = 512;
  // `layers` > 0 runs only the first `layers` layers (then the final norm): a shallower,
  // faster embedding.
  bool can_embed() const override { return true; }
  absl::StatusOr<std::vector<std::vector<float>>> Embed(absl::Span<const std::vector<int32_t>> inputs,
                                                        EmbeddingPooling pooling, int layers = 0) override;

 private:
  // One layer of the model's definition (src/runtime/models/model_definition.h); empty
  // vectors are absent steps.
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;
    std::vector<float> q_bias, k_bias, v_bias;
    std::vector<float> q_norm, k_norm, post_attn_norm, post_ffn_norm;
    std::unique_ptr<Linear> q, k, v, o, gate, up, down;
    std::unique_ptr<CpuExperts> experts;  // in place of gate, up and down
    bool qk_norm_per_head = true;
    size_t rope = 0;  // index into ropes_
    int sliding_window = 0;
  };
  // One row of a forward batch: a token at a position of a sequence.
  struct Row {
    SequenceId seq;
    int32_t position;
    int32_t token;
  };

  CpuBackend(const Model& model, const CpuBackendOptions& options);
  absl::Status Init();
  // Runs `rows` through the model, appending them to their sequences. Writes the logits of
  // `logit_rows` into `logits`, or, when `hidden` is set, every row's final-norm output
  // (rows x n_embd) into it instead, after `hidden_layers` layers (0: all). Only
  // embeddings may stop early: the later layers' KV of those rows is then never written.
  // Adds each chunk's routed expert evaluations to its sequence's ExpertTraffic.
  void CountExperts(absl::Span<const SequenceChunk> chunks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status Forward(const std::vector<Row>& rows, const std::vector<int>& logit_rows, float* logits,
                       float* hidden = nullptr, int hidden_layers = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status CopyKvBlocks(absl::Span<const KvBlockTable::BlockCopy> copies) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  float* KvBlock(int block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Whether generated tokens' products take two int8 passes (CpuPrecision::kAuto on a CPU
  // with the AVX-512 VNNI kernels).
  bool GeneratedTokensTakeRemainders() const;
  absl::StatusOr<std::unique_ptr<Linear>> MakeLinear(const GgufTensorInfo& tensor);

  const Model& model_;
  const ModelConfig& config_;
  CpuBackendOptions options_;
  BackendInfo info_;
  LinearContext dnnl_;
  std::vector<Layer> layers_;
  std::vector<float> output_norm_;
  std::unique_ptr<Linear> output_;
  const GgufTensorInfo* token_embd_ = nullptr;
  std::vector<std::unique_ptr<Rope>> ropes_;  // one per DistinctRopes variant
  std::unique_ptr<Attention> attention_;
  std::unique_ptr<ThreadPool> pool_;  // options_.threads threads for the kernels' loops

  std::vector<std::unique_ptr<float[]>> kv_blocks_ ABSL_GUARDED_BY(mutex_);
  // Work buffers, reused across calls.
  struct Workspace {
    LinearScratch scratch;
    std::vector<float> x, h, q, k, v, att, gate, up, tmp;
  };
  Workspace ws_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace hetero

#endif  // HETERO_CPU_CPU_BACKEND_H_
