// The CPU kernels' own team of threads for their parallel loops, instead of OpenMP's.
//
// Why not OpenMP: libgomp's threads spin for milliseconds at every barrier before they
// sleep, and that policy can be changed only by environment variables read before the
// process starts. On cores shared with other processes (CI, a host running other
// services), a thread spinning at a barrier burns the slice that the thread it waits for
// needs, and a decode step has ~200 barriers: the engine slowed down 20x and more under
// contention (docs/PERFORMANCE.md). Here:
//  - a waiting thread spins for at most kSpinMicroseconds, then sleeps;
//  - a loop is cut into chunks, dealt out as one contiguous run per thread (the calling
//    thread too); a thread takes its own run's chunks from the front and, once that is
//    empty, takes the others' from the back, so a loop waits only for chunks being run,
//    never for a worker that has not woken yet: a descheduled worker's share is done by
//    whoever is running. Each run lives on its own cache line and a thread reports its
//    finished chunks once per loop, so a balanced loop moves a few cache lines between
//    cores rather than two per chunk (decode runs ~200 loops a token; with one shared
//    claim word and counter, the default model's Q4_0 decode on a two-core AMD EPYC ran
//    16-19% slower).
// Which thread runs which chunk varies; the kernels' iterations are independent, so their
// results do not.
//
// oneDNN (the f32 and bf16 precision modes) still threads itself with OpenMP.
#ifndef HETERO_CPU_THREAD_POOL_H_
#define HETERO_CPU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "src/runtime/sync.h"

namespace hetero {

class ThreadPool {
 public:
  // How a loop is cut: kStatic into kChunksPerThread contiguous chunks per thread (for
  // equal costs: whole halves finished unevenly, since two threads sharing a core, or one
  // woken late, run at different speeds), kDynamic into single indices (for uneven costs).
  enum class Schedule { kStatic, kDynamic };
  // Spin this long for work (or for the others to finish) before sleeping.
  static constexpr int kSpinMicroseconds = 50;
  // A thread that has run out waits for the chunk another is in, so a chunk is what an
  // uneven loop can lose at its end. 16 rather than 4 (docs/PERFORMANCE.md, 2026-12-07):
  // OLMoE Q4_K_M decode +12% on an Intel Xeon, the rest unchanged within noise; on an AMD
  // EPYC (2026-12-06) granite's decode had shown no gain (-4%).
  static constexpr int kChunksPerThread = 16;

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
    Run(n, schedule, Callback{std::addressof(body), call});
  }

 private:
  struct Callback {
    const void* object;
    void (*call)(const void* object, int i);
    void operator()(int i) const { call(object, i); }
  };

  // noexcept: a body that throws ends the process (as in an OpenMP region), rather than
  // leaving other threads running chunks of a loop whose caller has unwound.
  void Run(int n, Schedule schedule, Callback body) noexcept;
  // Claims and runs chunks of the current loop until none is left, its own run (`self`)
  // first; then reports how many it ran.
  void Help(int self) noexcept;
  // Claims a chunk of run `slot`: from the front (its owner) or the back (anyone else).
  bool Claim(int slot, bool front, uint32_t* chunk) noexcept;
  void WorkerMain(int self);

  const int threads_;
  std::atomic<bool> busy_{false};  // a loop is running
  // The current loop: written by its caller before it deals out the runs, read by a thread
  // only after it claimed one of its chunks (the loop cannot end before that chunk does).
  int n_ = 0;
  int chunks_ = 0;
  Callback body_{};
  // A thread's run of the current loop's chunks: (end << 32) | next, both chunk indices.
  // A claim is a compare-and-swap of the whole word, so a thread still looking at an
  // earlier loop's word can only succeed where the word names this loop's chunks exactly,
  // and it reads the loop (n_, chunks_, body_) only after its claim succeeded.
  struct alignas(64) ChunkRun {
    std::atomic<uint64_t> word{0};
  };
  std::unique_ptr<ChunkRun[]> runs_;
  alignas(64) std::atomic<int> completed_{0};  // chunks of the current loop run to the end
  std::atomic<bool> caller_waiting_{false};
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> epoch_{0};         // moves once per loop (and at shutdown): wakes workers
  Mutex mu_;
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;  // workers asleep on wake_
  std::condition_variable wake_;
  Mutex done_mu_;
  std::condition_variable done_;           // the last chunk ended while the caller slept
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
