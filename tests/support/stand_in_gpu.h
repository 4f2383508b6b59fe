// A "GPU" for engine tests on machines without one: a CPU backend behind a forwarding
// wrapper that tests subclass to fail or count calls, installed through the engine's
// gpu_backend test hook (src/runtime/test_hooks.h).
#ifndef HETERO_TESTS_SUPPORT_STAND_IN_GPU_H_
#define HETERO_TESTS_SUPPORT_STAND_IN_GPU_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/cpu/cpu_backend.h"
#include "hetero/scheduler.h"
#include "src/runtime/backend.h"
#include "src/runtime/test_hooks.h"

namespace hetero::testing {

// Forwards every call to `inner`; override what a test needs.
class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const BackendInfo& info() const override { return inner_->info(); }
  int vocab_size() const override { return inner_->vocab_size(); }
  absl::StatusOr<SequenceId> NewSequence() override { return inner_->NewSequence(); }
  void FreeSequence(SequenceId seq) override { inner_->FreeSequence(seq); }
  absl::StatusOr<int> SequenceLength(SequenceId seq) const override { return inner_->SequenceLength(seq); }
  absl::Status TruncateSequence(SequenceId seq, int length) override { return inner_->TruncateSequence(seq, length); }
  int kv_capacity_tokens() const override { return inner_->kv_capacity_tokens(); }
  int kv_used_tokens() const override { return inner_->kv_used_tokens(); }
  size_t kv_bytes_per_token() const override { return inner_->kv_bytes_per_token(); }
  absl::StatusOr<SavedSequence> SwapOut(SequenceId seq) override { return inner_->SwapOut(seq); }
  absl::StatusOr<SequenceId> SwapIn(const SavedSequence& saved) override { return inner_->SwapIn(saved); }
  absl::Status Prefill(SequenceId seq, absl::Span<const int32_t> tokens, absl::Span<float> logits) override {
    return inner_->Prefill(seq, tokens, logits);
  }
  absl::Status Decode(absl::Span<const SequenceId> seqs, absl::Span<const int32_t> tokens,
                      absl::Span<float> logits) override {
    return inner_->Decode(seqs, tokens, logits);
  }
  absl::Status DecodeGreedy(absl::Span<const SequenceId> seqs, absl::Span<const int32_t> tokens,
                            absl::Span<int32_t> next) override {
    return inner_->DecodeGreedy(seqs, tokens, next);
  }
  absl::Status Step(absl::Span<const SequenceChunk> chunks, absl::Span<float> logits) override {
    return inner_->Step(chunks, logits);
  }
  // can_embed() stays false, as on a real GPU; a test that wants an embedding GPU says so.
  absl::StatusOr<std::vector<std::vector<float>>> Embed(absl::Span<const std::vector<int32_t>> inputs,
                                                        EmbeddingPooling pooling, int layers) override {
    return inner_->Embed(inputs, pooling, layers);
  }

 private:
  std::unique_ptr<Backend> inner_;
};

// Hooks giving the engine `count` stand-in GPUs, gpu, gpu:1, ..., each `Wrapper(cpu
// backend)` (one thread, the engine's KV layout); (*created)[i] points at GPU i once the
// engine made it, or stays null for an ordinal in `unavailable` (its creation fails, so the
// engine reports that GPU unavailable with this reason).
template <typename Wrapper>
internal::TestHooks StandInGpusHooks(std::vector<Wrapper*>* created, int count, std::vector<int> unavailable = {}) {
  created->assign(static_cast<size_t>(count), nullptr);
  internal::TestHooks hooks;
  hooks.stand_in_gpus = count;
  hooks.gpu_backend = [created, unavailable](const Model& model, int block_tokens, int capacity, int max_sequences,
                                             int ordinal) -> absl::StatusOr<std::unique_ptr<Backend>> {
    for (int u : unavailable) {
      if (u == ordinal) return absl::UnavailableError("stand-in GPU switched off by the test");
    }
    CpuBackendOptions o;
    o.threads = 1;
    o.kv_block_tokens = block_tokens;
    o.kv_capacity_tokens = capacity;
    o.max_sequences = max_sequences;
    absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create(model, o);
    if (!cpu.ok()) return cpu.status();
    auto gpu = std::make_unique<Wrapper>(std::move(*cpu));
    (*created)[static_cast<size_t>(ordinal)] = gpu.get();
    return std::unique_ptr<Backend>(std::move(gpu));
  };
  return hooks;
}

// One stand-in GPU; `*created` points at it once the engine made it.
template <typename Wrapper>
internal::TestHooks StandInGpuHooks(Wrapper** created) {
  auto all = std::make_shared<std::vector<Wrapper*>>();
  internal::TestHooks hooks = StandInGpusHooks(all.get(), 1);
  hooks.gpu_backend = [inner = hooks.gpu_backend, all, created](const Model& model, int block_tokens, int capacity,
                                                                int max_sequences,
                                                                int ordinal) -> absl::StatusOr<std::unique_ptr<Backend>> {
    absl::StatusOr<std::unique_ptr<Backend>> gpu = inner(model, block_tokens, capacity, max_sequences, ordinal);
    *created = (*all)[0];
    return gpu;
  };
  return hooks;
}

// A policy written as a function, for tests that need one decision each.
class FunctionScheduler : public Scheduler {
 public:
  using PlaceFunction = std::function<Placement(Stage, const TaskState&, const SystemSnapshot&)>;
  FunctionScheduler(std::string name, PlaceFunction place) : name_(std::move(name)), place_(std::move(place)) {}
  std::string name() const override { return name_; }
  Placement Place(Stage stage, const TaskState& task, const SystemSnapshot& system) override {
    return place_(stage, task, system);
  }

 private:
  std::string name_;
  PlaceFunction place_;
};

}  // namespace hetero::testing

#endif  // HETERO_TESTS_SUPPORT_STAND_IN_GPU_H_
