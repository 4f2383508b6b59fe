#include "src/runtime/device_worker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace hetero {
namespace {

// Prompt tokens encoded per worker step: long prompts alternate with the decode steps of
// other sessions instead of stalling them.
constexpr size_t kPrefillChunk = 256;

size_t PendingStopPrefix(const std::string& text, const std::vector<std::string>& stops) {
  size_t longest = 0;
  for (const std::string& stop : stops) {
    for (size_t len = std::min(stop.size() - 1, text.size()); len > longest; --len) {
      if (text.compare(text.size() - len, len, stop, 0, len) == 0) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

}  // namespace

DeviceWorker::DeviceWorker(Backend& backend, const Tokenizer& tokenizer, int max_queued, int max_batch,
                           std::function<int(int)> evict)
    : backend_(backend), tokenizer_(tokenizer), max_queued_(max_queued), max_batch_(max_batch), evict_(std::move(evict)) {
  thread_ = std::thread([this] { Loop(); });
}

DeviceWorker::~DeviceWorker() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

absl::Status DeviceWorker::Submit(std::shared_ptr<GenerationJob> job) {
  {
    MutexLock lock(&mu_);
    if (stop_) return absl::CancelledError("engine is shutting down");
    if (static_cast<int>(queue_.size()) >= max_queued_) {
      return absl::UnavailableError(absl::StrCat("engine busy: ", queue_.size(), " tasks already wait for this device"));
    }
    job->submitted = Clock::now();
    job->detokenizer = std::make_unique<StreamingDetokenizer>(tokenizer_, /*skip_special=*/true);
    queue_.push_back(std::move(job));
    ++wakeups_;
  }
  cv_.notify_all();
  return absl::OkStatus();
}

void DeviceWorker::Wait(const std::shared_ptr<GenerationJob>& job) {
  MutexLock lock(&mu_);
  Await(done_cv_, mu_, [&] { return job->done; });
}

absl::Status DeviceWorker::RunExclusive(std::function<void(Backend&)> work) {
  if (std::this_thread::get_id() == thread_.get_id()) {
    // Called from a job's callback on this worker (on_text embedding something): the worker
    // is between two steps already, and waiting for itself would never end.
    work(backend_);
    return absl::OkStatus();
  }
  auto item = std::make_shared<ExclusiveWork>();
  item->work = std::move(work);
  {
    MutexLock lock(&mu_);
    if (stop_) return absl::CancelledError("engine is shutting down");
    exclusive_.push_back(item);
    ++wakeups_;
  }
  cv_.notify_all();
  MutexLock lock(&mu_);
  Await(done_cv_, mu_, [&] { return item->done; });
  if (item->cancelled) return absl::CancelledError("engine is shutting down");
  return absl::OkStatus();
}

void DeviceWorker::Poke() {
  {
    MutexLock lock(&mu_);
    ++wakeups_;
  }
  cv_.notify_all();
}

int DeviceWorker::ReservedByRunningJobs() const {
  int reserved = 0;
  for (auto* list : {&prefilling_, &active_}) {
    for (auto& j : *list) {
      reserved += static_cast<int>(j->prefill_tokens.size() - j->prefilled) + j->max_tokens -
                  static_cast<int>(j->generated.size());
    }
  }
  return reserved;
}

// Admission in arrival order while the KV cache has room for the next job's prompt and
// token budget (what running jobs may still append counts as taken). When the head does
// not fit, idle sessions are evicted; when nothing runs, a later job that fits may go
// first (a session finishing its tool call may be the one holding the memory the head
// waits for); when no job fits and every token of KV belongs to a queued job, nothing
// will ever free memory and the head fails.
void DeviceWorker::Admit(std::vector<std::shared_ptr<GenerationJob>>& finished) {
  blocked_at_.reset();
  while (!queue_.empty()) {
    const int capacity = backend_.kv_capacity_tokens();
    const auto need = [](const GenerationJob& j) { return static_cast<int>(j.prefill_tokens.size()) + j.max_tokens; };
    const auto own = [&](const GenerationJob& j) { return backend_.SequenceLength(j.seq).value_or(0); };
    // A job that cannot fit even with every other session's KV freed is refused at once.
    bool refused = false;
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      GenerationJob& j = **it;
      if (need(j) > capacity - own(j)) {
        j.status = absl::ResourceExhaustedError(absl::StrCat(
            "the task needs ", need(j), " KV tokens (prompt plus max_tokens) beyond the ", own(j),
            " its conversation holds, but the device's KV cache holds only ", capacity, " tokens"));
        finished.push_back(*it);
        queue_.erase(it);
        refused = true;
        break;
      }
    }
    if (refused) continue;

    const auto free_tokens = [&] { return capacity - backend_.kv_used_tokens() - ReservedByRunningJobs(); };
    GenerationJob& head = *queue_.front();
    if (need(head) <= free_tokens()) {
      prefilling_.push_back(queue_.front());
      queue_.pop_front();
      continue;
    }
    // The wakeups seen before mu_ is let go for eviction: a session that goes idle while
    // the eviction runs (too late to be evicted) pokes after this count, so the worker,
    // if it blocks below, wakes again instead of sleeping through that poke.
    const uint64_t wakeups_seen = wakeups_;
    if (evict_) {
      const int wanted = need(head) - free_tokens();
      mu_.Unlock();
      const int freed = evict_(wanted);
      mu_.Lock();
      if (freed > 0) continue;
    }
    if (!prefilling_.empty() || !active_.empty()) return;  // running jobs will free memory

    auto fits = std::find_if(queue_.begin() + 1, queue_.end(), [&](auto& j) { return need(*j) <= free_tokens(); });
    if (fits != queue_.end()) {
      prefilling_.push_back(*fits);
      queue_.erase(fits);
      return;
    }
    int held_by_queued = 0;
    std::vector<SequenceId> counted;
    for (auto& j : queue_) {
      if (std::find(counted.begin(), counted.end(), j->seq) != counted.end()) continue;
      counted.push_back(j->seq);
      held_by_queued += own(*j);
    }
    // Lengths, not blocks: sequences sharing blocks count them once each on both sides.
    if (backend_.kv_cache_stats().logical_tokens > held_by_queued) {
      blocked_at_ = wakeups_seen;  // a session outside the worker holds the memory; it pokes when done
      return;
    }
    head.status = absl::ResourceExhaustedError(absl::StrCat(
        "the task needs ", need(head), " KV tokens (prompt plus max_tokens); ", free_tokens(),
        " are free and the rest belongs to conversations waiting in the queue"));
    finished.push_back(queue_.front());
    queue_.pop_front();
  }
}

int DeviceWorker::queued() const {
  MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

int DeviceWorker::active() const {
  MutexLock lock(&mu_);
  return static_cast<int>(prefilling_.size() + active_.size());
}

bool DeviceWorker::Expired(GenerationJob& job, Clock::time_point now) {
  if (job.cancelled != nullptr && job.cancelled->load()) {
    job.status = absl::CancelledError("task cancelled");
    job.stop_reason = "cancelled";
    return true;
  }
  if (job.deadline.has_value() && now >= *job.deadline) {
    job.status = absl::DeadlineExceededError("task deadline passed");
    job.stop_reason = "deadline";
    return true;
  }
  return false;
}

bool DeviceWorker::Step(GenerationJob& job, absl::Span<float> logits) {
  if (job.logprobs >= 0) job.model_logits.assign(logits.begin(), logits.end());  // sampling edits `logits`
  int32_t token;
  if (job.constraint != nullptr) {
    // Sample as usual; only if the token breaks the constraint, mask and sample again
    // (which draws from exactly the masked distribution).
    const Clock::time_point constraint_start = Clock::now();
    job.constraint->SetBudget(job.max_tokens - static_cast<int>(job.generated.size()));
    job.unmasked_logits.assign(logits.begin(), logits.end());
    const Clock::time_point sample_start = Clock::now();
    token = job.sampler->Sample(logits, job.history);
    const int64_t sample_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - sample_start).count();
    if (!job.constraint->Allows(token)) {
      std::copy(job.unmasked_logits.begin(), job.unmasked_logits.end(), logits.begin());
      if (!job.constraint->Mask(logits)) {
        job.status = absl::InternalError("constrained decoding: no token can continue the tool call");
        return true;
      }
      token = job.sampler->Sample(logits, job.history);
      ++job.constraint_masked_steps;
    }
    job.constraint->Accept(token);
    // The first, ordinary sample is not the constraint's cost; the copy and the rest are.
    job.constraint_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - constraint_start).count() -
                         sample_ns;
  } else {
    token = job.sampler->Sample(logits, job.history);
  }
  if (job.generated.empty() && job.first_token == Clock::time_point{}) job.first_token = Clock::now();
  if (!job.ignore_end_of_generation && tokenizer_.IsEndOfGeneration(token)) {
    job.stop_reason = "end_of_generation";
    return true;
  }
  job.generated.push_back(token);
  if (job.logprobs >= 0) job.token_logprobs.push_back(LogProbabilities(job.model_logits, token, job.logprobs));
  job.history.push_back(token);
  if (job.on_token && !job.on_token(token, job.logprobs >= 0 ? job.token_logprobs.back().logprob : 0.0f)) {
    job.status = absl::CancelledError("cancelled by the token callback");
    job.stop_reason = "cancelled";
    return true;
  }
  absl::StatusOr<std::string> piece = job.detokenizer->Push(token);
  if (!piece.ok()) {
    job.status = piece.status();
    return true;
  }
  job.text += *piece;
  for (const std::string& stop : job.stop_strings) {
    const size_t new_start = job.text.size() - piece->size();
    const size_t from = new_start >= stop.size() ? new_start - stop.size() + 1 : 0;
    const size_t at = job.text.find(stop, from);
    if (at != std::string::npos) {
      job.text.resize(at);
      job.stop_reason = "stop_string";
    }
  }
  const size_t final_end =
      job.stop_reason == "stop_string" ? job.text.size() : job.text.size() - PendingStopPrefix(job.text, job.stop_strings);
  if (final_end > job.streamed) {
    const bool go_on = !job.on_text || job.on_text(std::string_view(job.text).substr(job.streamed, final_end - job.streamed));
    job.streamed = final_end;
    if (!go_on) {
      job.status = absl::CancelledError("cancelled by the text callback");
      job.stop_reason = "cancelled";
      return true;
    }
  }
  if (job.stop_reason == "stop_string") return true;
  if (static_cast<int>(job.generated.size()) >= job.max_tokens) {
    job.stop_reason = "max_tokens";
    return true;
  }
  job.pending_token = token;
  return false;
}

void ReportExpertTraffic(const GenerationJob& job, StageReport* understand, StageReport* generate) {
  const bool prefilled = job.prefill_end != Clock::time_point{};
  if (understand != nullptr && prefilled) {
    AddExpertTraffic(job.experts_at_prefill_end - job.experts_at_prefill_start, *understand);
  }
  if (generate != nullptr && job.finished != Clock::time_point{}) {
    AddExpertTraffic(job.experts_at_finish - (prefilled ? job.experts_at_prefill_end : job.experts_at_finish), *generate);
  }
}

void DeviceWorker::Finish(GenerationJob& job) {
  if (job.status.ok() && job.stop_reason != "stop_string") {
    const std::string rest = job.detokenizer->Flush();
    job.text += rest;
    if (job.on_text && job.text.size() > job.streamed) {
      job.on_text(std::string_view(job.text).substr(job.streamed));
      job.streamed = job.text.size();
    }
  }
  job.finished = Clock::now();
  job.experts_at_finish = backend_.expert_traffic(job.seq);
}

void DeviceWorker::Loop() {
  std::vector<float> logits;
  for (;;) {
    std::vector<std::shared_ptr<GenerationJob>> prefills;  // prompt chunks this step
    std::vector<std::shared_ptr<GenerationJob>> batch;     // one decode token each
    std::vector<std::shared_ptr<GenerationJob>> finished;
    std::shared_ptr<ExclusiveWork> exclusive;  // runs alone this turn
    {
      MutexLock lock(&mu_);
      const auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !exclusive_.empty() || !prefilling_.empty() || !active_.empty() ||
               (!queue_.empty() && blocked_at_ != std::optional<uint64_t>(wakeups_));
      };
      // Blocked admission still has to notice the queued jobs' deadlines.
      std::optional<Clock::time_point> earliest_deadline;
      for (auto& j : queue_) {
        if (j->deadline && (!earliest_deadline || *j->deadline < *earliest_deadline)) earliest_deadline = j->deadline;
      }
      if (earliest_deadline) {
        AwaitUntil(cv_, mu_, *earliest_deadline, ready);
      } else {
        Await(cv_, mu_, ready);
      }
      if (stop_) {
        for (auto* list : {&prefilling_, &active_}) {
          for (auto& j : *list) finished.push_back(j);
          list->clear();
        }
        for (auto& j : queue_) finished.push_back(j);
        queue_.clear();
        for (auto& w : exclusive_) w->cancelled = w->done = true;
        exclusive_.clear();
        for (auto& j : finished) {
          if (j->status.ok()) j->status = absl::CancelledError("engine is shutting down");
          j->done = true;
        }
        done_cv_.notify_all();
        return;
      }
      if (!exclusive_.empty()) {
        exclusive = std::move(exclusive_.front());
        exclusive_.pop_front();
      }
      const auto now = Clock::now();
      // Drop jobs cancelled or past their deadline, wherever they are.
      for (auto* list : {&prefilling_, &active_}) {
        for (auto it = list->begin(); it != list->end();) {
          if (Expired(**it, now)) {
            finished.push_back(*it);
            it = list->erase(it);
          } else {
            ++it;
          }
        }
      }
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (Expired(**it, now)) {
          finished.push_back(*it);
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      Admit(finished);
      // One prompt chunk (its own pass, so a prompt is encoded the same way whatever else
      // runs), then one batched decode step for every active job.
      if (exclusive == nullptr) {
        if (!prefilling_.empty()) prefills.push_back(prefilling_.front());
        for (size_t i = 0; i < active_.size() && static_cast<int>(i) < max_batch_; ++i) batch.push_back(active_[i]);
      }
    }
    if (exclusive != nullptr) {
      const Clock::time_point work_start = Clock::now();
      exclusive->work(backend_);
      busy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - work_start).count(),
                         std::memory_order_relaxed);
      for (auto& j : finished) Finish(*j);  // jobs that expired above
      {
        MutexLock lock(&mu_);
        exclusive->done = true;
        for (auto& j : finished) j->done = true;
      }
      done_cv_.notify_all();
      continue;
    }

    const int V = backend_.vocab_size();
    const Clock::time_point compute_start = Clock::now();
    std::vector<size_t> chunk_sizes;
    absl::Status prefill_status = absl::OkStatus();
    for (auto& j : prefills) {
      if (j->prefilled == 0) {
        j->prefill_start = Clock::now();
        j->experts_at_prefill_start = backend_.expert_traffic(j->seq);
      }
      const size_t n = std::min(kPrefillChunk, j->prefill_tokens.size() - j->prefilled);
      chunk_sizes.push_back(n);
      logits.resize(V);
      const SequenceChunk chunk{j->seq, absl::MakeConstSpan(j->prefill_tokens.data() + j->prefilled, n)};
      prefill_status = backend_.Step({&chunk, 1}, absl::MakeSpan(logits));
    }
    std::vector<float> prefill_logits;
    if (!prefills.empty()) prefill_logits = logits;
    absl::Status step_status = absl::OkStatus();
    if (!batch.empty()) {
      std::vector<SequenceChunk> chunks;
      for (auto& j : batch) chunks.push_back({j->seq, absl::MakeConstSpan(&j->pending_token, 1), /*generated=*/true});
      logits.resize(batch.size() * V);
      step_status = backend_.Step(chunks, absl::MakeSpan(logits));
    }
    if (!prefills.empty() || !batch.empty()) {
      busy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - compute_start).count(),
                         std::memory_order_relaxed);
    }
    // Prompt progress; a finished prompt samples its first token.
    std::vector<bool> prefill_done(prefills.size(), false);
    for (size_t i = 0; i < prefills.size(); ++i) {
      GenerationJob& job = *prefills[i];
      if (!prefill_status.ok()) {
        job.status = prefill_status;
        prefill_done[i] = true;
        continue;
      }
      job.prefilled += chunk_sizes[i];
      job.kv_tokens_appended += static_cast<int>(chunk_sizes[i]);
      if (job.prefilled < job.prefill_tokens.size()) continue;
      job.prefill_end = Clock::now();
      job.experts_at_prefill_end = backend_.expert_traffic(job.seq);
      prefill_done[i] = true;
      if (job.max_tokens == 0) {
        job.stop_reason = "max_tokens";
      } else {
        Step(job, absl::MakeSpan(prefill_logits));  // sets stop_reason when the first token ends it
      }
    }
    // Decode progress.
    std::vector<bool> batch_finished(batch.size(), false);
    for (size_t i = 0; i < batch.size(); ++i) {
      GenerationJob& job = *batch[i];
      if (!step_status.ok()) {
        job.status = step_status;
        batch_finished[i] = true;
        continue;
      }
      job.kv_tokens_appended += 1;
      batch_finished[i] = Step(job, absl::MakeSpan(logits.data() + i * V, V));
    }
    {
      MutexLock lock(&mu_);
      for (size_t i = 0; i < prefills.size(); ++i) {
        if (!prefill_done[i]) continue;
        prefilling_.erase(std::find(prefilling_.begin(), prefilling_.end(), prefills[i]));
        const bool ended = !prefills[i]->status.ok() || !prefills[i]->stop_reason.empty();
        if (ended) {
          finished.push_back(prefills[i]);
        } else {
          active_.push_back(prefills[i]);
        }
      }
      for (size_t i = 0; i < batch.size(); ++i) {
        if (!batch_finished[i]) continue;
        active_.erase(std::find(active_.begin(), active_.end(), batch[i]));
        finished.push_back(batch[i]);
      }
      // Fairness: jobs that just stepped go to the back when the batch is capped.
      if (static_cast<int>(active_.size()) > max_batch_) {
        std::rotate(active_.begin(), active_.begin() + std::min<size_t>(batch.size(), active_.size()), active_.end());
      }
    }
    if (!finished.empty()) {
      for (auto& j : finished) Finish(*j);
      MutexLock lock(&mu_);
      for (auto& j : finished) j->done = true;
    }
    if (!finished.empty()) done_cv_.notify_all();
  }
}

}  // namespace hetero
