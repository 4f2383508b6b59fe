// Device-level benchmarks, like llama-bench's: one backend alone, outside the engine's
// scheduling and batching, on random tokens. What `hetero-bench` measures.
//   pp<P>: one prefill of P tokens into an empty sequence;
//   tg<N>: N greedy decode steps of one sequence (the choice made where the backend decodes);
//   tg<N>_b<B>: B sequences (8 prompt tokens each) decoded together, aggregate tokens/s.
// With a depth D (llama-bench's -d), pp and tg start from a sequence already holding D
// tokens (prefilled, not timed): decode at a long context reads the KV cache as well as
// the weights.
#ifndef HETERO_BENCHMARK_H_
#define HETERO_BENCHMARK_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "hetero/export.h"
#include "hetero/scheduler.h"
#include "hetero/transfer.h"

namespace hetero {

struct BackendBenchmarkOptions {
  Device device = Device::kCpu;
  int threads = 0;                   // CPU threads; 0: the default
  std::string cpu_precision = "auto";  // ParseCpuPrecision
  int bf16_min_rows = 0;             // CPU: prompt rows from which the bf16 GEMM is used; 0: default
  int prompt_tokens = 512;           // 0: no pp test
  int generate_tokens = 128;         // 0: no tg tests
  int depth_tokens = 0;              // context before the pp and tg tests (not the batched ones)
  std::vector<int> batches;          // batched decode sizes
  int repetitions = 5;               // each after one warm-up run that is not counted
  uint32_t seed = 42;                // of the random tokens
  // GPU: EngineOptions::gpu_memory_budget_bytes (0: none); a mixture-of-experts model's
  // experts are then placed by PlaceExpertsWithinBudget.
  uint64_t gpu_memory_budget_bytes = 0;
  // Earlier runs' counts for that placement (EngineOptions::expert_usage_path's); checked
  // against the model (InvalidArgument when they do not fit it).
  ExpertUsage expert_usage;
};

struct BackendBenchmarkResult {
  std::string backend;        // the backend's description
  std::string weight_format;  // how it holds the matrices
  uint64_t weight_bytes = 0;  // memory the prepared model holds beyond the mapped file (a GPU: all it holds)
  uint64_t decode_weight_bytes = 0;  // Model::decode_weight_bytes: what one decode step reads
  std::vector<double> prefill_tokens_per_s;  // one per repetition
  std::vector<double> decode_tokens_per_s;
  std::vector<std::pair<int, std::vector<double>>> batched_decode_tokens_per_s;  // (batch, runs)
  ExpertUsage expert_usage;  // the backend's counts over the whole run (Engine::expert_usage)
};

// InvalidArgument for counts below their minimum (repetitions, threads, batches < 1);
// Unavailable when the device is not there (a GPU without CUDA), with the reason.
HETERO_EXPORT absl::StatusOr<BackendBenchmarkResult> BenchmarkBackend(const std::string& model_path,
                                                                       const BackendBenchmarkOptions& options);

struct TransferBandwidth {
  uint64_t bytes = 0;
  bool pinned = false;
  double host_to_device_gb_per_s = 0;
  double device_to_host_gb_per_s = 0;
};

struct TransferBenchmarkResult {
  std::vector<TransferBandwidth> plain_copies;  // 1, 16, 256 MiB, pinned and pageable
  // With a model: a 4096-token KV cache of it moved to the GPU and back through the transfer
  // layer (pooled pinned memory); medians of 5 after a warm-up.
  bool kv_swap_measured = false;
  int kv_tokens = 0;
  uint64_t kv_bytes = 0;
  bool kv_pinned = false;
  double kv_swap_in_gb_per_s = 0;
  double kv_swap_out_gb_per_s = 0;
  HostPoolStats pool;
};

// Host<->GPU bandwidth (the first GPU). Unavailable without a GPU. `model_path` empty or
// not found: only the plain copies.
HETERO_EXPORT absl::StatusOr<TransferBenchmarkResult> BenchmarkTransfers(const std::string& model_path);

}  // namespace hetero

#endif  // HETERO_BENCHMARK_H_
