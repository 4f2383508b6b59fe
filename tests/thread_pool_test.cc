// ThreadPool: every index runs exactly once (static and dynamic chunks, awkward counts and
// team sizes), a static chunk runs on one thread, a slow thread's remaining chunks are taken
// by the others, loops started while one runs (nested, or
// from another thread) still run completely, many short loops in a row lose no wake-up, and
// kernels on a pool give the results they give on one thread.
#include "src/cpu/thread_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "src/cpu/cpu_ops.h"

namespace hetero {
namespace {

using Schedule = ThreadPool::Schedule;

// How many times each index ran, and on how many distinct threads.
struct Visits {
  explicit Visits(int n) : counts(static_cast<size_t>(n)) {}
  std::vector<std::atomic<int>> counts;
  std::mutex mu;
  std::set<std::thread::id> threads;
  void Visit(int i) {
    counts[static_cast<size_t>(i)].fetch_add(1);
    std::lock_guard<std::mutex> lock(mu);
    threads.insert(std::this_thread::get_id());
  }
};

TEST(ThreadPoolTest, EveryIndexRunsOnceForEachScheduleAndSize) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (Schedule schedule : {Schedule::kStatic, Schedule::kDynamic}) {
      for (int n : {0, 1, 2, 3, 7, 13, 1000}) {
        Visits visits(n);
        pool.ParallelFor(n, schedule, [&](int i) { visits.Visit(i); });
        for (int i = 0; i < n; ++i) {
          ASSERT_EQ(visits.counts[static_cast<size_t>(i)].load(), 1)
              << "index " << i << " of " << n << ", " << threads << " threads, dynamic " << (schedule == Schedule::kDynamic);
        }
        EXPECT_LE(static_cast<int>(visits.threads.size()), threads);
      }
    }
  }
}

TEST(ThreadPoolTest, StaticChunksRunWhollyOnOneThread) {
  ThreadPool pool(3);
  const int n = 40;
  const int chunks = ThreadPool::kChunksPerThread * 3;
  for (int round = 0; round < 50; ++round) {
    std::vector<std::thread::id> owner(n);
    pool.ParallelFor(n, Schedule::kStatic, [&](int i) { owner[static_cast<size_t>(i)] = std::this_thread::get_id(); });
    // Chunk c is [n c / chunks, n (c + 1) / chunks): whichever thread claims it runs all of it.
    for (int c = 0; c < chunks; ++c) {
      const int begin = n * c / chunks, end = n * (c + 1) / chunks;
      for (int i = begin + 1; i < end; ++i) EXPECT_EQ(owner[static_cast<size_t>(i)], owner[static_cast<size_t>(begin)]);
    }
  }
}

TEST(ThreadPoolTest, CallerAloneFinishesALoopWhoseWorkersAreAsleep) {
  // The workers sleep after their spin; the caller claims chunks too, so the loop ends
  // whether or not they wake in time, and every index still runs once.
  ThreadPool pool(4);
  for (int round = 0; round < 20; ++round) {
    std::this_thread::sleep_for(std::chrono::microseconds(4 * ThreadPool::kSpinMicroseconds));
    Visits visits(64);
    pool.ParallelFor(64, round % 2 ? Schedule::kStatic : Schedule::kDynamic, [&](int i) { visits.Visit(i); });
    for (auto& c : visits.counts) ASSERT_EQ(c.load(), 1);
  }
}

TEST(ThreadPoolTest, WorkersTakePartAfterSleeping) {
  // Two indices that each wait for the other to start: only two threads at once finish
  // them, so a worker must wake (from sleep: the pause outlasts its spin) and claim one.
  ThreadPool pool(2);
  for (int round = 0; round < 20; ++round) {
    std::this_thread::sleep_for(std::chrono::microseconds(4 * ThreadPool::kSpinMicroseconds));
    std::atomic<int> started{0};
    std::atomic<int> met{0};
    pool.ParallelFor(2, Schedule::kDynamic, [&](int) {
      started.fetch_add(1);
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (started.load() < 2 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
      if (started.load() == 2) met.fetch_add(1);
    });
    ASSERT_EQ(met.load(), 2) << "round " << round << ": the worker did not take part";
  }
}

TEST(ThreadPoolTest, OthersTakeTheRestOfASlowThreadsRun) {
  // Static chunks are dealt out as one run per thread (one index per chunk here). The first
  // index to start holds its thread until every other index has finished: that can only
  // happen if the other thread takes the rest of the held thread's run. Which thread starts
  // first is up to the scheduler (a late caller may find its run already being taken), so
  // the test waits on completion, not on thread identities; a pool that cannot steal times
  // out here instead of passing by luck.
  ThreadPool pool(2);
  const int n = 2 * ThreadPool::kChunksPerThread;
  for (int round = 0; round < 3; ++round) {
    std::mutex mu;
    std::condition_variable done_cv;
    int done = 0;
    std::atomic<bool> first_taken{false};
    bool rest_finished_while_held = false;
    int done_while_held = -1;
    std::vector<std::thread::id> owner(n);
    pool.ParallelFor(n, Schedule::kStatic, [&](int i) {
      owner[static_cast<size_t>(i)] = std::this_thread::get_id();
      if (!first_taken.exchange(true)) {
        std::unique_lock<std::mutex> lock(mu);
        rest_finished_while_held =
            done_cv.wait_for(lock, std::chrono::seconds(10), [&] { return done == n - 1; });
        done_while_held = done;
        return;
      }
      const std::lock_guard<std::mutex> lock(mu);
      ++done;
      done_cv.notify_all();
    });
    EXPECT_TRUE(rest_finished_while_held) << "round " << round << ": " << done_while_held << " of " << n - 1
                                      << " other indices ran while the first was held";
    EXPECT_EQ(std::set<std::thread::id>(owner.begin(), owner.end()).size(), 2u) << "round " << round;
  }
}

TEST(ThreadPoolTest, NestedLoopRunsOnItsCallingThread) {
  ThreadPool pool(4);
  const int outer = 6, inner = 5;
  std::vector<std::atomic<int>> counts(outer * inner);
  const ScopedThreadPool use(&pool);
  ParallelFor(outer, Schedule::kDynamic, [&](int i) {
    const std::thread::id self = std::this_thread::get_id();
    ParallelFor(inner, Schedule::kStatic, [&](int j) {
      EXPECT_EQ(std::this_thread::get_id(), self);  // the pool is busy: no other thread
      counts[static_cast<size_t>(i * inner + j)].fetch_add(1);
    });
  });
  for (auto& c : counts) EXPECT_EQ(c.load(), 1);
}

TEST(ThreadPoolTest, TwoCallersAtOnceBothFinish) {
  ThreadPool pool(3);
  const int n = 200, rounds = 300;
  std::atomic<long> total{0};
  auto caller = [&] {
    for (int r = 0; r < rounds; ++r) {
      pool.ParallelFor(n, r % 2 ? Schedule::kStatic : Schedule::kDynamic, [&](int i) { total.fetch_add(i); });
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2L * rounds * (n * (n - 1) / 2));
}

TEST(ThreadPoolTest, ManyShortLoopsWithPausesLoseNoWakeUp) {
  // Pauses longer than the spin make the workers sleep between loops; a lost wake-up would
  // hang here (the test's timeout) instead of finishing.
  ThreadPool pool(3);
  std::mt19937 rng(7);
  long expected = 0;
  std::atomic<long> total{0};
  for (int r = 0; r < 3000; ++r) {
    const int n = 1 + static_cast<int>(rng() % 9);
    pool.ParallelFor(n, Schedule::kStatic, [&](int i) { total.fetch_add(i + 1); });
    expected += static_cast<long>(n) * (n + 1) / 2;
    if (r % 100 == 0) std::this_thread::sleep_for(std::chrono::microseconds(3 * ThreadPool::kSpinMicroseconds));
  }
  EXPECT_EQ(total.load(), expected);
}

TEST(ThreadPoolTest, NoPoolMeansTheCallingThreadAlone) {
  ASSERT_EQ(CurrentThreadPool(), nullptr);
  std::vector<int> seen;
  ParallelFor(5, Schedule::kDynamic, [&](int i) { seen.push_back(i); });  // no lock needed
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4}));
  size_t covered = 0;
  ParallelForRanges(17, [&](size_t begin, size_t end) { covered += end - begin; });
  EXPECT_EQ(covered, 17u);
  ThreadPool pool(2);
  {
    const ScopedThreadPool use(&pool);
    EXPECT_EQ(CurrentThreadPool(), &pool);
  }
  EXPECT_EQ(CurrentThreadPool(), nullptr);
}

TEST(ThreadPoolTest, RangesCoverEveryElementOnce) {
  ThreadPool pool(3);
  const ScopedThreadPool use(&pool);
  for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{5}, size_t{4099}}) {
    std::vector<std::atomic<int>> hits(count);
    ParallelForRanges(count, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1) << count;
  }
}

TEST(ThreadPoolTest, KernelOnAPoolEqualsOneThread) {
  // RmsNorm on 37 rows of 333 random values: each row is computed alone, so the pool's
  // result must equal the single-threaded one bit for bit.
  const int rows = 37, n = 333;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(rows) * n), weight(n);
  for (float& v : x) v = dist(rng);
  for (float& v : weight) v = dist(rng);
  std::vector<float> alone(x.size()), pooled(x.size());
  RmsNorm(x.data(), weight.data(), rows, n, 1e-5f, alone.data());
  ThreadPool pool(3);
  {
    const ScopedThreadPool use(&pool);
    RmsNorm(x.data(), weight.data(), rows, n, 1e-5f, pooled.data());
  }
  EXPECT_EQ(alone, pooled);
}

}  // namespace
}  // namespace hetero
