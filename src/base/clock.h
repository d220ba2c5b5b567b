// Time as nanoseconds in an int64_t, the one form components take a clock in: a NanoClock
// argument, so tests and the simulator drive time. Only I/O layers call SteadyNs/WallNs; the core
// (topology, tracker) reads no clock and is given times as arguments.
#ifndef TOPOSCHED_BASE_CLOCK_H_
#define TOPOSCHED_BASE_CLOCK_H_

#include <chrono>
#include <cstdint>
#include <functional>

namespace toposched {

using NanoClock = std::function<int64_t()>;

// Monotonic: for deadlines and intervals.
inline int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Since the Unix epoch: for what is written down (leases, events, records).
inline int64_t WallNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace toposched

#endif  // TOPOSCHED_BASE_CLOCK_H_
