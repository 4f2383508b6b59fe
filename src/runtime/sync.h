// A mutex for the library's own locking: std::mutex (so ThreadSanitizer, which cannot see
// inside Debian's uninstrumented Abseil, sees every lock) with Abseil's thread-safety
// annotations (so clang's -Wthread-safety checks ABSL_GUARDED_BY fields).
#ifndef HETERO_RUNTIME_SYNC_H_
#define HETERO_RUNTIME_SYNC_H_

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace hetero {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

// Waits on `cv` with `mu` held (the caller holds it through a MutexLock).
template <typename Predicate>
void Await(std::condition_variable& cv, Mutex& mu, Predicate ready) {
  std::unique_lock<std::mutex> lock(mu.native(), std::adopt_lock);
  cv.wait(lock, ready);
  lock.release();  // still held: the caller's MutexLock unlocks it
}

template <typename Predicate, typename Clock, typename Duration>
bool AwaitUntil(std::condition_variable& cv, Mutex& mu, std::chrono::time_point<Clock, Duration> deadline,
                Predicate ready) {
  std::unique_lock<std::mutex> lock(mu.native(), std::adopt_lock);
  const bool ok = cv.wait_until(lock, deadline, ready);
  lock.release();
  return ok;
}

}  // namespace hetero

#endif  // HETERO_RUNTIME_SYNC_H_
