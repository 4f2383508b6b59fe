// The CPU kernels' own team of threads for their parallel loops, instead of OpenMP's.
//
// Why not OpenMP: libgomp's threads spin for milliseconds at every barrier before they
// sleep, and that policy can be changed only by environment variables read before the
// process starts. On cores shared with other processes (CI, a host running other
// services), a thread spinning at a barrier burns the slice that the thread it waits for
// needs, and a decode step has ~200 barriers: the engine slowed down 20x and more under
// contention (docs/PERFORMANCE.md). Here a waiting thread spins for at most
// kSpinMicroseconds, then sleeps on a condition variable.
//
// oneDNN (the f32 and bf16 precision modes) still threads itself with OpenMP.
#ifndef HETERO_CPU_THREAD_POOL_H_
#define HETERO_CPU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace hetero {

class ThreadPool {
 public:
  // How the indices of a loop are shared: kStatic gives thread t the t-th contiguous
  // share (for equal costs); kDynamic hands them out one at a time (for uneven costs).
  enum class Schedule { kStatic, kDynamic };
  // Spin this long for work (or for the others to finish) before sleeping.
  static constexpr int kSpinMicroseconds = 50;

  // `threads` in all: the calling thread of each loop and threads - 1 workers.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }

  // Calls body(i) for every i in [0, n) and returns when all calls have returned. A loop
  // started while the pool runs another (from another thread, or from inside a body) runs
  // on its calling thread alone.
  template <typename Body>
  void ParallelFor(int n, Schedule schedule, Body&& body) {
    using Decayed = std::remove_reference_t<Body>;
    const auto call = [](const void* object, int i) { (*static_cast<Decayed*>(const_cast<void*>(object)))(i); };
    Run(n, schedule, Callback{&body, call});
  }

 private:
  struct Callback {
    const void* object;
    void (*call)(const void* object, int i);
    void operator()(int i) const { call(object, i); }
  };
  struct Loop {
    int n = 0;
    Schedule schedule = Schedule::kStatic;
    Callback body{};
    std::atomic<int> next{0};  // kDynamic: the next index to hand out
  };

  void Run(int n, Schedule schedule, Callback body);
  void Work(Loop& loop, int participant) const;
  void WorkerMain(int participant);

  const int threads_;
  std::atomic<bool> busy_{false};       // a loop is running
  Loop* loop_ = nullptr;                // written before epoch_ moves, read after
  std::atomic<uint32_t> epoch_{0};      // moves once per loop (and at shutdown)
  std::atomic<int> unfinished_{0};      // workers still inside the current loop
  bool stop_ = false;                   // under mu_
  int sleepers_ = 0;                    // workers asleep on wake_, under mu_
  std::mutex mu_;
  std::condition_variable wake_;        // a loop was published (or stop)
  std::mutex done_mu_;
  std::condition_variable done_;        // the last worker left the loop
  std::vector<std::thread> workers_;
};

// The pool parallel loops on this thread use; none: they run on the thread itself. The CPU
// backend installs its own around each pass, so whichever thread runs a pass (the device
// worker, or a caller embedding texts) uses the backend's thread count.
ThreadPool* CurrentThreadPool();

class ScopedThreadPool {
 public:
  explicit ScopedThreadPool(ThreadPool* pool);
  ~ScopedThreadPool();
  ScopedThreadPool(const ScopedThreadPool&) = delete;
  ScopedThreadPool& operator=(const ScopedThreadPool&) = delete;

 private:
  ThreadPool* previous_;
};

// body(i) for i in [0, n) on the current pool (or this thread alone).
template <typename Body>
void ParallelFor(int n, ThreadPool::Schedule schedule, Body&& body) {
  ThreadPool* pool = CurrentThreadPool();
  if (pool == nullptr || n <= 1 || pool->threads() == 1) {
    for (int i = 0; i < n; ++i) body(i);
    return;
  }
  pool->ParallelFor(n, schedule, std::forward<Body>(body));
}

// body(begin, end) over [0, count) cut into one contiguous range per thread of the
// current pool (one range without a pool).
template <typename Body>
void ParallelForRanges(size_t count, Body&& body) {
  ThreadPool* pool = CurrentThreadPool();
  const int parts = pool == nullptr ? 1 : pool->threads();
  ParallelFor(parts, ThreadPool::Schedule::kStatic, [&](int t) {
    const size_t begin = count * static_cast<size_t>(t) / static_cast<size_t>(parts);
    const size_t end = count * static_cast<size_t>(t + 1) / static_cast<size_t>(parts);
    if (begin < end) body(begin, end);
  });
}

}  // namespace hetero

#endif  // HETERO_CPU_THREAD_POOL_H_
