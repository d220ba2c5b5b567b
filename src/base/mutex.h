// Mutexes the compiler can check: thin wrappers over std::mutex and std::shared_mutex carrying
// clang's thread-safety attributes, so that a member marked TS_GUARDED_BY(mu_) read without mu_,
// or a function marked TS_EXCLUDES(mu_) called with it held, is a compile error under clang's
// -Wthread-safety (the fuzz build, which uses clang, turns it on). Under gcc the attributes are
// empty and these are the std types with other names.
#ifndef TOPOSCHED_BASE_MUTEX_H_
#define TOPOSCHED_BASE_MUTEX_H_

#include <mutex>
#include <shared_mutex>

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

namespace toposched {

class TS_CAPABILITY("mutex") Mutex {
 public:
  void Lock() TS_ACQUIRE() { mu_.lock(); }
  void Unlock() TS_RELEASE() { mu_.unlock(); }

 private:
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

}  // namespace toposched

#endif  // TOPOSCHED_BASE_MUTEX_H_
