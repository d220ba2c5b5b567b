// Device health, shared by every endpoint's ListAndWatch streams. A poller writes it; streams
// wait for a change (or their own stop) and resend the full list.
#ifndef TOPOSCHED_DEVICEPLUGIN_HEALTH_H_
#define TOPOSCHED_DEVICEPLUGIN_HEALTH_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "deviceplugin/sysfs.h"

namespace toposched::deviceplugin {

class HealthBoard {
 public:
  struct Snapshot {
    uint64_t version = 0;
    std::vector<bool> healthy;  // per device
  };

  explicit HealthBoard(int devices);

  Snapshot Get() const;
  // Sets one device's health; returns true (and wakes waiters) if it changed.
  bool Set(int device, bool healthy);
  // Blocks until the version differs from `seen`, Close() is called, or `timeout` passes.
  // Returns the current snapshot either way.
  Snapshot WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const;
  // Wakes every waiter for good (the process is stopping).
  void Close();
  bool closed() const;
  int devices() const { return devices_; }

 private:
  const int devices_;
  mutable Mutex mutex_;
  mutable CondVar changed_;
  uint64_t version_ TS_GUARDED_BY(mutex_) = 1;
  std::vector<bool> healthy_ TS_GUARDED_BY(mutex_);
  bool closed_ TS_GUARDED_BY(mutex_) = false;
};

// Checks every device once and records the result; logs each transition with its reason.
// Returns the number of devices whose health changed.
int PollHealth(const HostPaths& paths, HealthBoard& board);

}  // namespace toposched::deviceplugin

#endif  // TOPOSCHED_DEVICEPLUGIN_HEALTH_H_
