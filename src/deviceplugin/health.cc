#include "deviceplugin/health.h"

#include <spdlog/spdlog.h>

namespace toposched::deviceplugin {

HealthBoard::HealthBoard(int devices)
    : devices_(devices), healthy_(static_cast<size_t>(devices), false) {}

HealthBoard::Snapshot HealthBoard::Get() const {
  MutexLock lock(mutex_);
  return Snapshot{version_, healthy_};
}

bool HealthBoard::Set(int device, bool healthy) {
  if (device < 0 || device >= devices_) return false;
  {
    MutexLock lock(mutex_);
    if (healthy_[static_cast<size_t>(device)] == healthy) return false;
    healthy_[static_cast<size_t>(device)] = healthy;
    ++version_;
  }
  changed_.NotifyAll();
  return true;
}

HealthBoard::Snapshot HealthBoard::WaitForChange(uint64_t seen,
                                                 std::chrono::milliseconds timeout) const {
  MutexLock lock(mutex_);
  changed_.WaitFor(mutex_, timeout,
                   [&]() TS_REQUIRES(mutex_) { return version_ != seen || closed_; });
  return Snapshot{version_, healthy_};
}

void HealthBoard::Close() {
  {
    MutexLock lock(mutex_);
    closed_ = true;
  }
  changed_.NotifyAll();
}

bool HealthBoard::closed() const {
  MutexLock lock(mutex_);
  return closed_;
}

int PollHealth(const HostPaths& paths, HealthBoard& board) {
  int changes = 0;
  for (int d = 0; d < board.devices(); ++d) {
    const Status status = CheckDeviceHealth(paths, d);
    if (board.Set(d, status.ok())) {
      ++changes;
      if (status.ok()) {
        spdlog::info("neuron{} is Healthy", d);
      } else {
        spdlog::warn("neuron{} is Unhealthy: {}", d, status.error());
      }
    }
  }
  return changes;
}

}  // namespace toposched::deviceplugin
