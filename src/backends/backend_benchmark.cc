// hetero/benchmark.h: one backend alone, made here because only the backend registration
// knows the concrete backends.
#include "hetero/benchmark.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "hetero/devices.h"
#include "hetero/engine.h"
#include "hetero/model.h"
#include "src/cpu/cpu_backend.h"
#include "src/gpu/cuda_backend.h"
#include "src/gpu/cuda_module_abi.h"
#include "src/gpu/cuda_module_loader.h"
#include "src/runtime/expert_usage.h"
#include "src/runtime/model_impl.h"
#include "src/runtime/sampler.h"
#include "src/runtime/status_macros.h"

namespace hetero {

namespace {

using SteadyClock = std::chrono::steady_clock;

double Seconds(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const Model& model, const BackendBenchmarkOptions& o,
                                                     int kv_tokens, int max_batch) {
  if (o.device.is_gpu()) {
    const CudaInfo& cuda = QueryDevices().cuda;
    if (!cuda.available) return absl::UnavailableError(absl::StrCat("device 'gpu' is not available: ", cuda.notice));
    CudaBackendOptions gpu;
    gpu.device = o.device.ordinal;
    gpu.kv_capacity_tokens = kv_tokens;
    gpu.max_sequences = std::max(64, max_batch);
    gpu.memory_budget_bytes = o.gpu_memory_budget_bytes;
    gpu.place_experts = PlaceExpertsWithinBudget;
    gpu.expert_usage = o.expert_usage;
    gpu.host_threads = o.threads > 0 ? o.threads : DefaultCpuThreads();
    HETERO_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend, CudaBackend::Create(model, gpu));
    return std::unique_ptr<Backend>(std::move(backend));
  }
  CpuBackendOptions cpu;
  if (o.threads > 0) cpu.threads = o.threads;
  if (o.bf16_min_rows > 0) cpu.bf16_min_rows = o.bf16_min_rows;
  HETERO_ASSIGN_OR_RETURN(cpu.precision, ParseCpuPrecision(o.cpu_precision));
  cpu.kv_capacity_tokens = kv_tokens;
  cpu.max_sequences = std::max(cpu.max_sequences, max_batch);
  HETERO_ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> backend, CpuBackend::Create(model, cpu));
  return std::unique_ptr<Backend>(std::move(backend));
}

// A new sequence holding `depth` random tokens (prefilled in chunks of at most 512, as a
// long prompt is), for the tests that start at a depth.
absl::StatusOr<SequenceId> SequenceAtDepth(Backend& b, int depth, std::mt19937& rng, absl::Span<float> logits) {
  HETERO_ASSIGN_OR_RETURN(const SequenceId seq, b.NewSequence());
  constexpr int kChunk = 512;
  std::vector<int32_t> tokens;
  for (int done = 0; done < depth;) {
    tokens.resize(std::min(kChunk, depth - done));
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(b.vocab_size()));
    if (absl::Status s = b.Prefill(seq, tokens, logits); !s.ok()) {
      b.FreeSequence(seq);
      return s;
    }
    done += static_cast<int>(tokens.size());
  }
  return seq;
}

}  // namespace

absl::StatusOr<BackendBenchmarkResult> BenchmarkBackend(const std::string& model_path,
                                                         const BackendBenchmarkOptions& o) {
  if (o.repetitions < 1 || o.threads < 0 || o.prompt_tokens < 0 || o.generate_tokens < 0 || o.depth_tokens < 0) {
    return absl::InvalidArgumentError(
        "benchmark: repetitions must be at least 1; threads, token counts and depth not negative");
  }
  for (int batch : o.batches) {
    if (batch < 1) return absl::InvalidArgumentError(absl::StrCat("benchmark: batch size ", batch, " is below 1"));
  }
  HETERO_ASSIGN_OR_RETURN(std::string path, ResolveModelPath(model_path));
  HETERO_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(path));
  HETERO_RETURN_IF_ERROR(CheckExpertUsageFitsModel(o.expert_usage, model->impl().definition, "benchmark: expert usage"));
  const int max_batch = o.batches.empty() ? 1 : *std::max_element(o.batches.begin(), o.batches.end());
  const int64_t longest = static_cast<int64_t>(o.depth_tokens) + std::max(o.prompt_tokens, o.generate_tokens);
  if (o.depth_tokens > 0 && model->config().context_length > 0 && longest > model->config().context_length) {
    return absl::InvalidArgumentError(absl::StrCat("benchmark: a depth of ", o.depth_tokens, " plus ",
                                                   longest - o.depth_tokens, " tokens passes the model's context of ",
                                                   model->config().context_length, " (lower -d)"));
  }
  // Room for the largest test's sequence (one at a time; each is freed before the next),
  // then the batched tests' sequences (8 prompt tokens each), in whole blocks of up to 64.
  const auto whole_blocks = [](int64_t tokens) { return (tokens + 63) / 64 * 64; };
  const int64_t single = whole_blocks(longest + 16);
  const int64_t batched = static_cast<int64_t>(std::max(max_batch, 8)) * whole_blocks(int64_t{8} + o.generate_tokens);
  const int64_t kv_wanted = single + batched;
  if (kv_wanted > std::numeric_limits<int>::max() / 2) {
    return absl::InvalidArgumentError(absl::StrCat("benchmark: ", kv_wanted, " tokens of KV cache is too many"));
  }
  const int kv_tokens = static_cast<int>(kv_wanted);
  HETERO_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(*model, o, kv_tokens, max_batch));
  Backend& b = *backend;
  const int V = b.vocab_size();
  std::mt19937 rng(o.seed);
  std::vector<float> logits(V);
  BackendBenchmarkResult result;
  result.backend = b.info().name;
  result.weight_format = b.info().weight_format;
  result.weight_bytes = b.info().weight_bytes;
  result.decode_weight_bytes = model->decode_weight_bytes();

  for (int rep = 0; rep < o.repetitions + 1; ++rep) {  // the first warms up and is dropped
    if (o.prompt_tokens > 0) {
      HETERO_ASSIGN_OR_RETURN(SequenceId seq, SequenceAtDepth(b, o.depth_tokens, rng, absl::MakeSpan(logits)));
      std::vector<int32_t> tokens(o.prompt_tokens);
      for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % V);
      const auto start = SteadyClock::now();
      absl::Status s = b.Prefill(seq, tokens, absl::MakeSpan(logits));
      const auto end = SteadyClock::now();
      b.FreeSequence(seq);
      HETERO_RETURN_IF_ERROR(s);
      if (rep > 0) result.prefill_tokens_per_s.push_back(o.prompt_tokens / Seconds(start, end));
    }
    if (o.generate_tokens > 0) {
      HETERO_ASSIGN_OR_RETURN(const SequenceId id, SequenceAtDepth(b, o.depth_tokens, rng, absl::MakeSpan(logits)));
      int32_t token = static_cast<int32_t>(rng() % V);
      const auto start = SteadyClock::now();
      absl::Status s = absl::OkStatus();
      for (int i = 0; i < o.generate_tokens && s.ok(); ++i) {  // greedy, chosen where the backend decodes
        int32_t next = 0;
        s = b.DecodeGreedy({&id, 1}, {&token, 1}, {&next, 1});
        token = next;
      }
      const auto end = SteadyClock::now();
      b.FreeSequence(id);
      HETERO_RETURN_IF_ERROR(s);
      if (rep > 0) result.decode_tokens_per_s.push_back(o.generate_tokens / Seconds(start, end));
    }
  }
  for (int batch : o.batches) {
    std::vector<double> rates;
    for (int rep = 0; rep < o.repetitions + 1 && o.generate_tokens > 0; ++rep) {
      std::vector<SequenceId> seqs;
      std::vector<int32_t> tokens(batch);
      absl::Status s = absl::OkStatus();
      for (int i = 0; i < batch && s.ok(); ++i) {
        absl::StatusOr<SequenceId> seq = b.NewSequence();
        if (!seq.ok()) {
          s = seq.status();
          break;
        }
        seqs.push_back(*seq);
        std::vector<int32_t> start(8);
        for (int32_t& t : start) t = static_cast<int32_t>(rng() % V);
        s = b.Prefill(*seq, start, absl::MakeSpan(logits));
        tokens[i] = GreedyToken(logits);
      }
      const auto start = SteadyClock::now();
      std::vector<int32_t> next(batch);
      for (int step = 0; step < o.generate_tokens && s.ok(); ++step) {
        s = b.DecodeGreedy(seqs, tokens, absl::MakeSpan(next));
        tokens.swap(next);
      }
      const auto end = SteadyClock::now();
      for (SequenceId id : seqs) b.FreeSequence(id);
      HETERO_RETURN_IF_ERROR(s);
      if (rep > 0) rates.push_back(static_cast<double>(batch) * o.generate_tokens / Seconds(start, end));
    }
    result.batched_decode_tokens_per_s.emplace_back(batch, std::move(rates));
  }
  result.expert_usage = b.expert_usage();
  return result;
}

absl::StatusOr<TransferBenchmarkResult> BenchmarkTransfers(const std::string& model_path) {
  const CudaInfo& cuda = QueryDevices().cuda;
  if (!cuda.available) return absl::UnavailableError(absl::StrCat("--transfer needs a GPU: ", cuda.notice));
  auto measure = reinterpret_cast<hetero_cuda_measure_bandwidth_fn>(CudaModuleSymbol(HETERO_CUDA_MEASURE_BANDWIDTH_SYMBOL));
  if (measure == nullptr) return absl::UnavailableError("the CUDA module lacks the bandwidth entry point");
  TransferBenchmarkResult result;
  for (uint64_t bytes : {uint64_t{1} << 20, uint64_t{16} << 20, uint64_t{256} << 20}) {
    for (int pinned : {1, 0}) {
      TransferBandwidth row;
      row.bytes = bytes;
      row.pinned = pinned != 0;
      char message[512] = {};
      const int reps = bytes >= (uint64_t{256} << 20) ? 5 : 20;
      if (measure(0, bytes, reps, pinned, &row.host_to_device_gb_per_s, &row.device_to_host_gb_per_s, message,
                  sizeof message) != HETERO_CUDA_OK) {
        return absl::InternalError(absl::StrCat("bandwidth: ", message));
      }
      result.plain_copies.push_back(row);
    }
  }
  absl::StatusOr<std::string> resolved = ResolveModelPath(model_path);
  if (!resolved.ok()) return result;
  // The transfer layer's own path: a 4096-token KV cache of the model moved to the GPU
  // (SwapIn, the CPU-prefill handoff) and back (SwapOut, parking during a tool call), from
  // pooled pinned memory, against the plain loop above.
  HETERO_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(*resolved));
  CudaBackendOptions options;
  options.kv_capacity_tokens = 8192;
  HETERO_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend, CudaBackend::Create(*model, options));
  const int tokens = 4096;
  const size_t floats = backend->kv_bytes_per_token() / sizeof(float) * tokens;
  SavedSequence saved;
  saved.tokens = tokens;
  HETERO_ASSIGN_OR_RETURN(saved.data, HostMemoryPool::Default()->Allocate(floats));
  for (size_t i = 0; i < floats; ++i) saved.data.data()[i] = static_cast<float>(i % 977) * 1e-3f;
  std::vector<double> in_rates, out_rates;
  for (int rep = 0; rep < 6; ++rep) {
    const auto t0 = SteadyClock::now();
    HETERO_ASSIGN_OR_RETURN(SequenceId seq, backend->SwapIn(saved));
    const auto t1 = SteadyClock::now();
    HETERO_ASSIGN_OR_RETURN(SavedSequence back, backend->SwapOut(seq));
    const auto t2 = SteadyClock::now();
    if (rep > 0) {  // the first warms the pool and the copy stream
      in_rates.push_back(floats * sizeof(float) / Seconds(t0, t1) / 1e9);
      out_rates.push_back(floats * sizeof(float) / Seconds(t1, t2) / 1e9);
    }
    saved = std::move(back);
  }
  result.kv_swap_measured = true;
  result.kv_tokens = tokens;
  result.kv_bytes = floats * sizeof(float);
  result.kv_pinned = saved.data.pinned();
  result.kv_swap_in_gb_per_s = Median(in_rates);
  result.kv_swap_out_gb_per_s = Median(out_rates);
  result.pool = HostMemoryPool::Default()->stats();
  return result;
}

}  // namespace hetero
