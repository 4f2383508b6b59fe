// One worker thread per device: a bounded queue of generation jobs, KV admission control,
// prompt prefill in chunks, and continuous batching: every step decodes one token for each
// active job on the device in a single batched Decode, so jobs join and leave between
// steps and the weights are read once per step for all of them.
#ifndef HETERO_RUNTIME_DEVICE_WORKER_H_
#define HETERO_RUNTIME_DEVICE_WORKER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "hetero/tokenizer.h"
#include "src/runtime/backend.h"
#include "src/runtime/sampler.h"
#include "src/runtime/token_constraint.h"
#include "src/runtime/sync.h"

namespace hetero {

using Clock = std::chrono::steady_clock;

// Prefill of `prefill_tokens` into `seq`, then decoding until a stop condition.
struct GenerationJob {
  // Inputs (set before Submit, then read-only).
  SequenceId seq = 0;
  std::vector<int32_t> prefill_tokens;
  std::vector<int32_t> history;  // the whole context, for repetition penalties
  std::optional<Sampler> sampler;
  int max_tokens = 0;
  bool ignore_end_of_generation = false;
  std::vector<std::string> stop_strings;
  std::function<bool(std::string_view)> on_text;
  std::function<bool(int32_t token, float logprob)> on_token;
  std::optional<Clock::time_point> deadline;
  const std::atomic<bool>* cancelled = nullptr;
  std::unique_ptr<TokenConstraint> constraint;  // only tokens it allows are sampled
  int logprobs = -1;  // >= 0: record each generated token's log-probability and this many alternatives

  // Results (written by the worker; read after done).
  absl::Status status;
  std::string stop_reason;
  std::vector<int32_t> generated;  // without the token that stopped generation
  std::string text;
  int kv_tokens_appended = 0;      // tokens this job wrote into the sequence's KV
  int64_t constraint_ns = 0;       // time in the constraint (checks, masks, resampling)
  int constraint_masked_steps = 0; // steps where the sampled token was refused
  std::vector<TokenLogprob> token_logprobs;  // one per `generated` token, when logprobs >= 0
  Clock::time_point submitted, prefill_start, prefill_end, first_token, finished;
  // The sequence's ExpertTraffic when its prefill started, ended, and when the job finished.
  ExpertTraffic experts_at_prefill_start, experts_at_prefill_end, experts_at_finish;
  bool done = false;

  // Worker state.
  size_t prefilled = 0;
  int32_t pending_token = -1;      // sampled, not yet decoded
  size_t streamed = 0;
  std::unique_ptr<StreamingDetokenizer> detokenizer;
  std::vector<float> unmasked_logits;  // constrained sampling's copy
  std::vector<float> model_logits;     // the step's logits before sampling touched them (logprobs)
};

// A finished job's expert traffic into its stage reports: the prefill's into `understand`,
// the decoding's into `generate` (either may be null).
void ReportExpertTraffic(const GenerationJob& job, StageReport* understand, StageReport* generate);

class DeviceWorker {
 public:
  // `evict` is asked to free at least `tokens` of KV held by idle sessions; it returns how
  // many it freed. Called on the worker thread without the worker's lock.
  DeviceWorker(Backend& backend, const Tokenizer& tokenizer, int max_queued, int max_batch,
               std::function<int(int tokens)> evict);
  ~DeviceWorker();  // stops the thread; unfinished jobs end Cancelled

  // Unavailable when `max_queued` jobs are already waiting.
  absl::Status Submit(std::shared_ptr<GenerationJob> job);
  // Blocks until `job` is done.
  void Wait(const std::shared_ptr<GenerationJob>& job);
  // Runs `work` on the worker thread between two steps, with the backend to itself, and
  // returns when it has run (Engine::Embed). Cancelled when the worker is stopping.
  absl::Status RunExclusive(std::function<void(Backend&)> work);
  // Wakes the worker to notice a cancellation, or KV memory that a session released.
  void Poke();

  int queued() const;
  int active() const;
  // Time spent computing (prefill and decode steps) since the worker started.
  double busy_seconds() const { return static_cast<double>(busy_ns_.load(std::memory_order_relaxed)) * 1e-9; }
  Backend& backend() { return backend_; }

 private:
  void Loop();
  // Returns true when `job` ended (cancelled or past its deadline); sets its status.
  bool Expired(GenerationJob& job, Clock::time_point now);
  // Samples job's next token from `logits` and streams; true when the job is finished.
  bool Step(GenerationJob& job, absl::Span<float> logits);
  void Finish(GenerationJob& job);
  // Moves queued jobs into prefilling_ while KV memory allows; fails jobs that can never
  // fit. Sets admission_blocked_ when jobs wait on memory that only a session outside the
  // worker can release.
  void Admit(std::vector<std::shared_ptr<GenerationJob>>& finished) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int ReservedByRunningJobs() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Backend& backend_;
  std::atomic<int64_t> busy_ns_{0};
  const Tokenizer& tokenizer_;
  const int max_queued_;
  const int max_batch_;
  std::function<int(int)> evict_;

  mutable Mutex mu_;
  std::condition_variable cv_;       // work arrived, or stop
  std::condition_variable done_cv_;  // a job finished
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Counts Submit and Poke calls; admission blocked at wakeups_ == blocked_at_ waits for the next.
  uint64_t wakeups_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<uint64_t> blocked_at_ ABSL_GUARDED_BY(mu_);
  struct ExclusiveWork {
    std::function<void(Backend&)> work;
    bool done = false;
    bool cancelled = false;
  };
  std::deque<std::shared_ptr<ExclusiveWork>> exclusive_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<GenerationJob>> queue_ ABSL_GUARDED_BY(mu_);   // waiting for admission
  std::vector<std::shared_ptr<GenerationJob>> prefilling_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<GenerationJob>> active_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace hetero

#endif  // HETERO_RUNTIME_DEVICE_WORKER_H_
