// Device health, shared by every endpoint's ListAndWatch streams. A poller writes it; streams
// wait for a change (or their own stop) and resend the full list.
#ifndef TOPOSCHED_DEVICEPLUGIN_HEALTH_H_
#define TOPOSCHED_DEVICEPLUGIN_HEALTH_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "nodeagent/sysfs.h"

namespace toposched::deviceplugin {

// A device out of service: since when (RFC 3339) and why (its last failed check).
struct DeviceFault {
  int device = 0;
  std::string since;
  std::string reason;
};

class HealthBoard {
 public:
  struct Snapshot {
    uint64_t version = 0;
    std::vector<bool> healthy;  // per device
  };

  // `recover_after`: how many passing checks in a row bring a failed device back (hysteresis:
  // a device that fails now and then stays out, rather than flapping in and out of service).
  explicit HealthBoard(int devices, int recover_after = 1);

  Snapshot Get() const;
  // Sets one device's health at once; returns true (and wakes waiters) if it changed.
  bool Set(int device, bool healthy);
  // One check's outcome at wall time `now` (RFC 3339). A failure takes the device out at once
  // (a dead device must stop being chosen); it is back only after `recover_after` passing
  // checks in a row. The first check of a device decides it either way. True if it changed.
  bool Report(int device, const Status& check, std::string_view now);
  // The devices out of service now, by id.
  std::vector<DeviceFault> Faults() const;
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
  const int recover_after_;
  struct Checks {
    bool seen = false;  // checked at least once
    int passed = 0;     // passing checks in a row since the last failure
    std::string since;  // when it went out of service
    std::string reason;
  };
  std::vector<Checks> checks_ TS_GUARDED_BY(mutex_);
};

// The node annotations that tell the scheduler which devices are out of service
// (claims::kAnnotationUnhealthyDevices and kAnnotationUnhealthyWhy); nullopt deletes one.
std::map<std::string, std::optional<std::string>> FaultAnnotations(
    const std::vector<DeviceFault>& faults);

// Checks every device once and reports the result (HealthBoard::Report); logs each transition
// with its reason. Returns the number of devices whose health changed.
int PollHealth(const nodeagent::HostPaths& paths, HealthBoard& board);

}  // namespace toposched::deviceplugin

#endif  // TOPOSCHED_DEVICEPLUGIN_HEALTH_H_
