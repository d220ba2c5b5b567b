// Polling for tests that wait on another thread or process: a bounded WaitUntil instead of
// sleep loops, so a test that fails says so after its timeout instead of hanging or racing.
#ifndef TOPOSCHED_TEST_SUPPORT_WAIT_H_
#define TOPOSCHED_TEST_SUPPORT_WAIT_H_

#include <chrono>
#include <thread>

namespace toposched::testing {

// Calls `done` every `poll` until it returns true or `timeout` has passed; returns its last
// answer (so a condition that turns true just at the deadline still counts).
template <typename Predicate>
bool WaitUntil(Predicate done, std::chrono::milliseconds timeout,
               std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(poll);
  }
  return done();
}

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_SUPPORT_WAIT_H_
