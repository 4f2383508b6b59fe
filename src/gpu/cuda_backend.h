// The CUDA backend, libhetero's side: prepares the model's tensors on the host (float16
// copies for cuBLAS, the GGUF blocks of Q4_0/Q4_1/Q8_0 for the decode GEMVs), hands them
// to libhetero-cuda.so, keeps the sequences' KV block tables and drives forward passes
// through the module's C interface. KV blocks have the CPU backend's layout, so a
// sequence saved by one backend (SwapOut) continues on the other (SwapIn): the KV handoff.
#ifndef HETERO_GPU_CUDA_BACKEND_H_
#define HETERO_GPU_CUDA_BACKEND_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "hetero/model.h"
#include "hetero/scheduler.h"
#include "src/runtime/backend.h"
#include "src/runtime/paged_backend.h"

struct hetero_cuda_model;

namespace hetero {

class HostExperts;

struct CudaBackendOptions {
  int device = 0;
  int max_sequences = 64;
  int kv_block_tokens = 16;     // must match the CPU backend's for handoff
  int kv_capacity_tokens = 0;   // over all sequences; 0: four full contexts
  int max_rows_per_pass = 512;  // longer prompts run in several passes
  bool share_kv_prefixes = true;  // copy-on-write prefix sharing (src/runtime/kv_cache.h)
  // The most device memory the model may hold (0: no budget), and the policy that places a
  // mixture-of-experts model's routed experts within it; the others run on the host with
  // `host_threads` threads. Create fails (ResourceExhausted) when the budget cannot hold
  // what the device must.
  uint64_t memory_budget_bytes = 0;
  std::function<absl::StatusOr<ExpertPlacement>(const ExpertPlacementFacts&)> place_experts;
  int host_threads = 1;
  // Earlier runs' expert usage (EngineOptions::expert_usage_path), for the placement.
  ExpertUsage expert_usage;
};

class CudaBackend : public PagedBackend {
 public:
  // Unavailable (with the module's reason) where there is no usable GPU.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const Model& model, const CudaBackendOptions& options);
  ~CudaBackend() override;

  const BackendInfo& info() const override { return info_; }
  int vocab_size() const override { return config_.n_vocab; }
  absl::StatusOr<SavedSequence> SwapOut(SequenceId seq) override;
  absl::StatusOr<SequenceId> SwapIn(const SavedSequence& saved) override;
  absl::Status Step(absl::Span<const SequenceChunk> chunks, absl::Span<float> logits) override;
  // Chooses on the device: only the chosen ids cross the bus.
  absl::Status DecodeGreedy(absl::Span<const SequenceId> seqs, absl::Span<const int32_t> tokens,
                            absl::Span<int32_t> next) override;
  // Counted on the device, every layer with experts.
  ExpertUsage expert_usage() const override;

 private:
  struct Row {
    SequenceId seq;
    int32_t position;
    int32_t token;
  };
  struct Api;

  absl::Status CopyKvBlocks(absl::Span<const KvBlockTable::BlockCopy> copies) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  CudaBackend(const Model& model, const CudaBackendOptions& options);
  absl::Status Init();
  // The module's callback for the experts it leaves to the host.
  static int32_t RunHostExperts(void* self, int32_t layer, int32_t rows, const float* h, const int32_t* choices,
                                const float* weights, float* out, char* message, size_t message_size);
  // One pass of the module over `rows` (at most max_rows_per_pass), logits for `logit_rows`.
  // Logits into `logits` and/or greedy choices into `greedy` (either may be null).
  absl::Status Pass(const std::vector<Row>& rows, const std::vector<int>& logit_rows, float* logits, int32_t* greedy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Step's work; one output per chunk into `logits` (vocab floats) or `greedy` (one id).
  absl::Status Run(absl::Span<const SequenceChunk> chunks, float* logits, int32_t* greedy);

  const Model& model_;
  const ModelConfig& config_;
  CudaBackendOptions options_;
  BackendInfo info_;
  std::unique_ptr<Api> api_;
  hetero_cuda_model* device_model_ = nullptr;
  std::unique_ptr<HostExperts> host_experts_;  // null: every expert on the device
};

}  // namespace hetero

#endif  // HETERO_GPU_CUDA_BACKEND_H_
