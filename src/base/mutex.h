// Mutexes the compiler can check: thin wrappers over std::mutex and std::shared_mutex carrying
// clang's thread-safety attributes, so that a member marked TS_GUARDED_BY(mu_) read without mu_,
// or a function marked TS_EXCLUDES(mu_) called with it held, is a compile error under clang's
// -Wthread-safety. The lint tier (scripts/lint.sh, first in scripts/test.sh) compiles every unit
// of src/ that way, and the clang builds (fuzz) turn it on too. Under gcc the attributes are
// empty and these are the std types with other names. Every mutex of src/ is one of these; a
// condition to wait for is a CondVar over a Mutex.
#ifndef TOPOSCHED_BASE_MUTEX_H_
#define TOPOSCHED_BASE_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <utility>

#if defined(__clang__)
#define TS_ATTRIBUTE(x) __attribute__((x))
#else
#define TS_ATTRIBUTE(x)
#endif

#define TS_CAPABILITY(name) TS_ATTRIBUTE(capability(name))
#define TS_SCOPED_CAPABILITY TS_ATTRIBUTE(scoped_lockable)
#define TS_GUARDED_BY(mu) TS_ATTRIBUTE(guarded_by(mu))
#define TS_PT_GUARDED_BY(mu) TS_ATTRIBUTE(pt_guarded_by(mu))
#define TS_ACQUIRED_BEFORE(...) TS_ATTRIBUTE(acquired_before(__VA_ARGS__))
#define TS_ACQUIRED_AFTER(...) TS_ATTRIBUTE(acquired_after(__VA_ARGS__))
#define TS_REQUIRES(...) TS_ATTRIBUTE(requires_capability(__VA_ARGS__))
#define TS_REQUIRES_SHARED(...) TS_ATTRIBUTE(requires_shared_capability(__VA_ARGS__))
#define TS_EXCLUDES(...) TS_ATTRIBUTE(locks_excluded(__VA_ARGS__))
#define TS_ACQUIRE(...) TS_ATTRIBUTE(acquire_capability(__VA_ARGS__))
#define TS_ACQUIRE_SHARED(...) TS_ATTRIBUTE(acquire_shared_capability(__VA_ARGS__))
#define TS_RELEASE(...) TS_ATTRIBUTE(release_capability(__VA_ARGS__))
#define TS_RELEASE_SHARED(...) TS_ATTRIBUTE(release_shared_capability(__VA_ARGS__))
#define TS_RELEASE_GENERIC(...) TS_ATTRIBUTE(release_generic_capability(__VA_ARGS__))
// Turns the analysis off for one function; only for the few primitives below that hand a lock
// to the standard library, never to silence a finding in our code.
#define TS_NO_THREAD_SAFETY_ANALYSIS TS_ATTRIBUTE(no_thread_safety_analysis)

namespace toposched {

class CondVar;

class TS_CAPABILITY("mutex") Mutex {
 public:
  void Lock() TS_ACQUIRE() { mu_.lock(); }
  void Unlock() TS_RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Many readers or one writer.
class TS_CAPABILITY("mutex") SharedMutex {
 public:
  void Lock() TS_ACQUIRE() { mu_.lock(); }
  void Unlock() TS_RELEASE() { mu_.unlock(); }
  void LockShared() TS_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() TS_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a Mutex (or a SharedMutex exclusively) for its scope.
class TS_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) TS_ACQUIRE(mu) : plain_(&mu) { mu.Lock(); }
  explicit MutexLock(SharedMutex& mu) TS_ACQUIRE(mu) : shared_(&mu) { mu.Lock(); }
  ~MutexLock() TS_RELEASE() {
    if (plain_ != nullptr) plain_->Unlock();
    if (shared_ != nullptr) shared_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* plain_ = nullptr;
  SharedMutex* shared_ = nullptr;
};

// Holds a SharedMutex shared for its scope.
class TS_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) TS_ACQUIRE_SHARED(mu) : mu_(mu) { mu.LockShared(); }
  ~ReaderLock() TS_RELEASE() { mu_.UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

// A condition variable over a Mutex. Each wait takes the Mutex the caller holds (the analysis
// checks that it is held, as by a MutexLock in scope), releases it while blocked and holds it
// again when it returns; the predicate runs with it held, so a predicate that reads guarded
// members says so: `cv_.Wait(mu_, [&]() TS_REQUIRES(mu_) { return done_; });`. Notify with or
// without the Mutex held.
class CondVar {
 public:
  // Until pred() is true.
  template <typename Predicate>
  void Wait(Mutex& mu, Predicate pred) TS_REQUIRES(mu) TS_NO_THREAD_SAFETY_ANALYSIS {
    Adopted held(mu);
    cv_.wait(held.lock, std::move(pred));
  }

  // Until pred() is true or `timeout` has passed; returns pred() at the end.
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(Mutex& mu, std::chrono::duration<Rep, Period> timeout, Predicate pred)
      TS_REQUIRES(mu) TS_NO_THREAD_SAFETY_ANALYSIS {
    Adopted held(mu);
    return cv_.wait_for(held.lock, timeout, std::move(pred));
  }

  // Until pred() is true or `deadline` has come; returns pred() at the end.
  template <typename Clock, typename Duration, typename Predicate>
  bool WaitUntil(Mutex& mu, std::chrono::time_point<Clock, Duration> deadline, Predicate pred)
      TS_REQUIRES(mu) TS_NO_THREAD_SAFETY_ANALYSIS {
    Adopted held(mu);
    return cv_.wait_until(held.lock, deadline, std::move(pred));
  }

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  // The caller's lock, lent to std::condition_variable for one wait and handed back (still held)
  // when the wait ends, however it ends: the caller's MutexLock stays its only owner.
  struct Adopted {
    explicit Adopted(Mutex& mu) : lock(mu.mu_, std::adopt_lock) {}
    ~Adopted() { lock.release(); }
    Adopted(const Adopted&) = delete;
    Adopted& operator=(const Adopted&) = delete;
    std::unique_lock<std::mutex> lock;
  };

  std::condition_variable cv_;
};

}  // namespace toposched

#endif  // TOPOSCHED_BASE_MUTEX_H_
