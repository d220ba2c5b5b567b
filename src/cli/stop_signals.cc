#include "cli/stop_signals.h"

#include <pthread.h>

#include <spdlog/spdlog.h>

namespace toposched::cli {

StopSignals::StopSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

StopSignals::~StopSignals() {
  if (!waiter_.joinable()) return;
  closing_ = true;
  // Wakes the waiter's sigwait when no signal came (a thread id stays valid until joined).
  pthread_kill(waiter_.native_handle(), SIGTERM);
  waiter_.join();
}

int StopSignals::Wait() const {
  int signal = 0;
  sigwait(&set_, &signal);
  return signal;
}

void StopSignals::SetOnSignal(std::atomic<bool>& stop) {
  waiter_ = std::thread([this, &stop] {
    const int signal = Wait();
    if (closing_) return;
    spdlog::info("signal {} received: shutting down", signal);
    stop = true;
  });
}

}  // namespace toposched::cli
