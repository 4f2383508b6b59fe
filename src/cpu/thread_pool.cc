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

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)) {
  workers_.reserve(static_cast<size_t>(threads_ - 1));
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { WorkerMain(); });
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

void ThreadPool::Help() noexcept {
  uint64_t word = claim_.load(std::memory_order_acquire);
  for (;;) {
    const uint32_t next = static_cast<uint32_t>(word & kLow32);
    const uint32_t chunks = static_cast<uint32_t>(word >> 32);
    if (next >= chunks) return;
    if (!claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      continue;  // `word` now holds the current value
    }
    // Chunk `next` is ours: the loop it belongs to stays until it is done.
    const int64_t n = n_;
    const int begin = static_cast<int>(n * next / chunks);
    const int end = static_cast<int>(n * (next + 1) / chunks);
    for (int i = begin; i < end; ++i) body_(i);
    // Sequentially consistent with caller_waiting_: either the caller sees this count or
    // this thread sees the caller asleep and wakes it.
    if (completed_.fetch_add(1) + 1 == static_cast<int>(chunks) && caller_waiting_.load()) {
      MutexLock lock(&done_mu_);
      done_.notify_one();
    }
    word = claim_.load(std::memory_order_acquire);
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
  body_ = body;
  completed_.store(0, std::memory_order_relaxed);
  claim_.store(static_cast<uint64_t>(chunks) << 32, std::memory_order_release);
  bool sleeping;
  {
    MutexLock lock(&mu_);
    epoch_.fetch_add(1, std::memory_order_release);
    sleeping = sleepers_ > 0;
  }
  if (sleeping) wake_.notify_all();  // after unlocking: the woken do not block on mu_
  Help();
  const auto all_done = [this, chunks] { return completed_.load() == chunks; };
  if (!SpinUntil(all_done)) {
    MutexLock lock(&done_mu_);
    caller_waiting_.store(true);
    Await(done_, done_mu_, all_done);
    caller_waiting_.store(false);
  }
  busy_.store(false, std::memory_order_release);
}

void ThreadPool::WorkerMain() {
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
    Help();
  }
}

ThreadPool* CurrentThreadPool() { return current_pool; }

ScopedThreadPool::ScopedThreadPool(ThreadPool* pool) : previous_(current_pool) { current_pool = pool; }

ScopedThreadPool::~ScopedThreadPool() { current_pool = previous_; }

}  // namespace hetero
