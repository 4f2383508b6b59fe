#include "src/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace hetero {
namespace {

thread_local ThreadPool* current_pool = nullptr;

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Spins until done() holds or kSpinMicroseconds have passed; returns done().
template <typename Done>
bool SpinUntil(Done done) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
    if (done()) return true;
    CpuRelax();
    if (i % 64 == 0 &&
        std::chrono::steady_clock::now() - start > std::chrono::microseconds(ThreadPool::kSpinMicroseconds)) {
      return done();
    }
  }
}

constexpr uint64_t kLow32 = 0xffffffffu;

}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)), runs_(new ChunkRun[std::max(1, threads)]) {
  workers_.reserve(static_cast<size_t>(threads_ - 1));
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i] { WorkerMain(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    MutexLock lock(&mu_);
    epoch_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

bool ThreadPool::Claim(int slot, bool front, uint32_t* chunk) noexcept {
  std::atomic<uint64_t>& word = runs_[slot].word;
  uint64_t seen = word.load(std::memory_order_acquire);
  for (;;) {
    const uint32_t next = static_cast<uint32_t>(seen & kLow32);
    const uint32_t end = static_cast<uint32_t>(seen >> 32);
    if (next >= end) return false;
    const uint64_t claimed = front ? seen + 1 : seen - (uint64_t{1} << 32);
    if (word.compare_exchange_weak(seen, claimed, std::memory_order_acq_rel, std::memory_order_acquire)) {
      *chunk = front ? next : end - 1;
      return true;
    }
    // `seen` now holds the current value
  }
}

void ThreadPool::Help(int self) noexcept {
  // Every chunk this call claims belongs to one loop: the loop cannot end, and the next
  // cannot deal out its chunks, before this thread reports the ones it ran.
  int ran = 0, chunks = 0;
  uint32_t chunk;
  for (int i = 0; i < threads_; ++i) {
    const int slot = (self + i) % threads_;
    while (Claim(slot, /*front=*/i == 0, &chunk)) {
      // Chunk `chunk` is ours: the loop it belongs to stays until it is reported done.
      const int64_t n = n_;
      chunks = chunks_;
      const int begin = static_cast<int>(n * chunk / chunks);
      const int end = static_cast<int>(n * (chunk + 1) / chunks);
      for (int j = begin; j < end; ++j) body_(j);
      ++ran;
    }
  }
  if (ran == 0) return;
  // Sequentially consistent with caller_waiting_: either the caller sees this count or
  // this thread sees the caller asleep and wakes it.
  if (completed_.fetch_add(ran) + ran == chunks && caller_waiting_.load()) {
    MutexLock lock(&done_mu_);
    done_.notify_one();
  }
}

void ThreadPool::Run(int n, Schedule schedule, Callback body) noexcept {
  bool idle = false;
  if (n <= 1 || threads_ == 1 || !busy_.compare_exchange_strong(idle, true, std::memory_order_acquire)) {
    for (int i = 0; i < n; ++i) body(i);
    return;
  }
  const int chunks = schedule == Schedule::kStatic ? std::min(n, kChunksPerThread * threads_) : n;
  n_ = n;
  chunks_ = chunks;
  body_ = body;
  completed_.store(0, std::memory_order_relaxed);
  for (int t = 0; t < threads_; ++t) {
    const uint64_t begin = static_cast<uint64_t>(chunks) * t / threads_;
    const uint64_t end = static_cast<uint64_t>(chunks) * (t + 1) / threads_;
    runs_[t].word.store((end << 32) | begin, std::memory_order_release);
  }
  bool sleeping;
  {
    MutexLock lock(&mu_);
    epoch_.fetch_add(1, std::memory_order_release);
    sleeping = sleepers_ > 0;
  }
  if (sleeping) wake_.notify_all();  // after unlocking: the woken do not block on mu_
  Help(0);
  const auto all_done = [this, chunks] { return completed_.load() == chunks; };
  if (!SpinUntil(all_done)) {
    MutexLock lock(&done_mu_);
    caller_waiting_.store(true);
    Await(done_, done_mu_, all_done);
    caller_waiting_.store(false);
  }
  busy_.store(false, std::memory_order_release);
}

void ThreadPool::WorkerMain(int self) {
  uint32_t seen = 0;
  for (;;) {
    const auto moved = [&] { return epoch_.load(std::memory_order_acquire) != seen; };
    if (!SpinUntil(moved)) {
      MutexLock lock(&mu_);
      ++sleepers_;
      Await(wake_, mu_, moved);
      --sleepers_;
    }
    seen = epoch_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    Help(self);
  }
}

ThreadPool* CurrentThreadPool() { return current_pool; }

ScopedThreadPool::ScopedThreadPool(ThreadPool* pool) : previous_(current_pool) { current_pool = pool; }

ScopedThreadPool::~ScopedThreadPool() { current_pool = previous_; }

}  // namespace hetero
