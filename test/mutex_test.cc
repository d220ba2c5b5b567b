#include "base/mutex.h"

#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace toposched {
namespace {

// A hand-off between threads through one Mutex and one CondVar, the way src/ uses them: each
// member the lock guards is annotated, so this file is also checked by the lint tier's
// thread-safety pass when it compiles the headers (and by clang builds of the tests).
class Mailbox {
 public:
  void Put(int value) {
    {
      MutexLock lock(mu_);
      values_.push_back(value);
    }
    changed_.NotifyAll();
  }

  // Blocks until at least `count` values have arrived; returns them.
  std::vector<int> WaitForCount(size_t count) {
    MutexLock lock(mu_);
    changed_.Wait(mu_, [&]() TS_REQUIRES(mu_) { return values_.size() >= count; });
    return values_;
  }

  bool WaitForCountFor(size_t count, std::chrono::milliseconds timeout) {
    MutexLock lock(mu_);
    return changed_.WaitFor(mu_, timeout,
                            [&]() TS_REQUIRES(mu_) { return values_.size() >= count; });
  }

  bool WaitForCountUntil(size_t count, std::chrono::steady_clock::time_point deadline) {
    MutexLock lock(mu_);
    return changed_.WaitUntil(mu_, deadline,
                              [&]() TS_REQUIRES(mu_) { return values_.size() >= count; });
  }

  // The lock is held again once a wait returns: a write here cannot interleave with Put's.
  void WaitThenAppend(size_t count, int value) {
    MutexLock lock(mu_);
    changed_.Wait(mu_, [&]() TS_REQUIRES(mu_) { return values_.size() >= count; });
    values_.push_back(value);
  }

  std::vector<int> values() {
    MutexLock lock(mu_);
    return values_;
  }

 private:
  Mutex mu_;
  CondVar changed_;
  std::vector<int> values_ TS_GUARDED_BY(mu_);
};

TEST(CondVarTest, WaitReturnsOnceThePredicateHoldsAfterANotify) {
  Mailbox box;
  std::thread producer([&] {
    for (int i = 0; i < 100; ++i) box.Put(i);
  });
  const std::vector<int> got = box.WaitForCount(100);
  producer.join();
  ASSERT_EQ(got.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], i);
}

TEST(CondVarTest, WaitDoesNotBlockWhenThePredicateAlreadyHolds) {
  Mailbox box;
  box.Put(7);
  EXPECT_EQ(box.WaitForCount(1), std::vector<int>{7});
  EXPECT_TRUE(box.WaitForCountFor(1, std::chrono::milliseconds(0)));
  EXPECT_TRUE(box.WaitForCountUntil(1, std::chrono::steady_clock::now()));
}

TEST(CondVarTest, TimedWaitsReturnFalseWhenThePredicateNeverHolds) {
  Mailbox box;
  EXPECT_FALSE(box.WaitForCountFor(1, std::chrono::milliseconds(1)));
  EXPECT_FALSE(box.WaitForCountUntil(1, std::chrono::steady_clock::now()));
  // The lock was handed back: the box still works.
  box.Put(1);
  EXPECT_EQ(box.values(), std::vector<int>{1});
}

TEST(CondVarTest, TimedWaitsReturnTrueWhenWokenBeforeTheTimeout) {
  Mailbox box;
  std::thread producer([&] { box.Put(1); });
  // An hour: the only way out in time is the notify.
  EXPECT_TRUE(box.WaitForCountFor(1, std::chrono::hours(1)));
  EXPECT_TRUE(box.WaitForCountUntil(1, std::chrono::steady_clock::now() + std::chrono::hours(1)));
  producer.join();
}

TEST(CondVarTest, ManyWaitersAllWakeAndEachAppendsUnderTheLock) {
  Mailbox box;
  std::vector<std::thread> waiters;
  for (int i = 0; i < 8; ++i) waiters.emplace_back([&box, i] { box.WaitThenAppend(1, 100 + i); });
  box.Put(0);
  for (auto& waiter : waiters) waiter.join();
  const std::vector<int> got = box.values();
  ASSERT_EQ(got.size(), 9u);
  EXPECT_EQ(got[0], 0);
}

}  // namespace
}  // namespace toposched
