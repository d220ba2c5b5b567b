#include "deviceplugin/health.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claims/keys.h"
#include "kube/client.h"
#include "topology/id_ranges.h"

namespace toposched::deviceplugin {

HealthBoard::HealthBoard(int devices, int recover_after)
    : devices_(devices),
      healthy_(static_cast<size_t>(devices), false),
      recover_after_(recover_after < 1 ? 1 : recover_after),
      checks_(static_cast<size_t>(devices)) {}

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

bool HealthBoard::Report(int device, const Status& check, std::string_view now) {
  if (device < 0 || device >= devices_) return false;
  bool healthy = false;
  {
    MutexLock lock(mutex_);
    Checks& c = checks_[static_cast<size_t>(device)];
    const bool was = healthy_[static_cast<size_t>(device)];
    const bool first = !c.seen;
    c.seen = true;
    if (!check.ok()) {
      c.passed = 0;
      c.reason = check.error();
      if (was || first || c.since.empty()) c.since = std::string(now);
      healthy = false;
    } else {
      ++c.passed;
      healthy = was || first || c.passed >= recover_after_;
    }
    if (healthy) c.since.clear();
  }
  return Set(device, healthy);
}

std::vector<DeviceFault> HealthBoard::Faults() const {
  MutexLock lock(mutex_);
  std::vector<DeviceFault> out;
  for (int d = 0; d < devices_; ++d) {
    const Checks& c = checks_[static_cast<size_t>(d)];
    if (c.seen && !healthy_[static_cast<size_t>(d)]) out.push_back({d, c.since, c.reason});
  }
  return out;
}

std::map<std::string, std::optional<std::string>> FaultAnnotations(
    const std::vector<DeviceFault>& faults) {
  std::map<std::string, std::optional<std::string>> out{
      {std::string(claims::kAnnotationUnhealthyDevices), std::nullopt},
      {std::string(claims::kAnnotationUnhealthyWhy), std::nullopt}};
  if (faults.empty()) return out;
  std::vector<int> ids;
  std::vector<std::string> why;
  for (const DeviceFault& f : faults) {
    ids.push_back(f.device);
    why.push_back(fmt::format("{}: {}, since {}", f.device, f.reason, f.since));
  }
  out[std::string(claims::kAnnotationUnhealthyDevices)] = topology::FormatIdList(ids);
  out[std::string(claims::kAnnotationUnhealthyWhy)] = fmt::format("{}", fmt::join(why, "; "));
  return out;
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

int PollHealth(const nodeagent::HostPaths& paths, HealthBoard& board) {
  int changes = 0;
  const std::string now = kube::Rfc3339Now();
  for (int d = 0; d < board.devices(); ++d) {
    const Status status = nodeagent::CheckDeviceHealth(paths, d);
    if (board.Report(d, status, now)) {
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
