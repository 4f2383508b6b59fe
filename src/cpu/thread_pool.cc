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

}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)) {
  workers_.reserve(static_cast<size_t>(threads_ - 1));
  for (int participant = 1; participant < threads_; ++participant) {
    workers_.emplace_back([this, participant] { WorkerMain(participant); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    epoch_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Work(Loop& loop, int participant) const {
  if (loop.schedule == Schedule::kStatic) {
    const int64_t n = loop.n;
    const int begin = static_cast<int>(n * participant / threads_);
    const int end = static_cast<int>(n * (participant + 1) / threads_);
    for (int i = begin; i < end; ++i) loop.body(i);
    return;
  }
  for (int i = loop.next.fetch_add(1, std::memory_order_relaxed); i < loop.n;
       i = loop.next.fetch_add(1, std::memory_order_relaxed)) {
    loop.body(i);
  }
}

void ThreadPool::Run(int n, Schedule schedule, Callback body) {
  bool idle = false;
  if (n <= 1 || threads_ == 1 || !busy_.compare_exchange_strong(idle, true, std::memory_order_acquire)) {
    for (int i = 0; i < n; ++i) body(i);
    return;
  }
  Loop loop;
  loop.n = n;
  loop.schedule = schedule;
  loop.body = body;
  unfinished_.store(threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    loop_ = &loop;
    epoch_.fetch_add(1, std::memory_order_release);
    if (sleepers_ > 0) wake_.notify_all();
  }
  Work(loop, 0);
  const auto all_done = [this] { return unfinished_.load(std::memory_order_acquire) == 0; };
  if (!SpinUntil(all_done)) {
    std::unique_lock<std::mutex> lock(done_mu_);
    done_.wait(lock, all_done);
  }
  busy_.store(false, std::memory_order_release);
}

void ThreadPool::WorkerMain(int participant) {
  uint32_t seen = 0;
  for (;;) {
    const auto published = [&] { return epoch_.load(std::memory_order_acquire) != seen; };
    if (!SpinUntil(published)) {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleepers_;
      wake_.wait(lock, published);
      --sleepers_;
    }
    seen = epoch_.load(std::memory_order_acquire);
    Loop* loop;
    {
      // The loop and stop_ were written under mu_ before the epoch moved.
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      loop = loop_;
    }
    Work(*loop, participant);
    if (unfinished_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(done_mu_);
      done_.notify_one();
    }
  }
}

ThreadPool* CurrentThreadPool() { return current_pool; }

ScopedThreadPool::ScopedThreadPool(ThreadPool* pool) : previous_(current_pool) { current_pool = pool; }

ScopedThreadPool::~ScopedThreadPool() { current_pool = previous_; }

}  // namespace hetero
