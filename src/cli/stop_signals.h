// The one way a long-running subcommand stops on SIGINT or SIGTERM: the signals are blocked in
// every thread and taken by sigwait, so no handler runs at an arbitrary point of another thread.
// Construct it first in the command, before any thread starts (threads inherit the mask).
#ifndef TOPOSCHED_CLI_STOP_SIGNALS_H_
#define TOPOSCHED_CLI_STOP_SIGNALS_H_

#include <atomic>
#include <csignal>
#include <thread>

namespace toposched::cli {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Blocks the calling thread until SIGINT or SIGTERM; returns which.
  int Wait() const;
  // For loops that poll a flag: a thread of its own waits and sets `stop` when a signal comes.
  // Call at most once; the destructor ends that thread if no signal came.
  void SetOnSignal(std::atomic<bool>& stop);

 private:
  sigset_t set_;
  std::thread waiter_;
  std::atomic<bool> closing_{false};
};

}  // namespace toposched::cli

#endif  // TOPOSCHED_CLI_STOP_SIGNALS_H_
