// Removes partitions in the background until the service confirms each one gone, then runs its
// callback (which frees the slots). Used when a pod is deleted, when a failed bind could not
// confirm its removal in time, and for orphans found at restart. One thread; removals are
// retried every `retry` until they succeed.
#ifndef TOPOSCHED_PROVISION_REAPER_H_
#define TOPOSCHED_PROVISION_REAPER_H_

#include <chrono>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "provision/service.h"

namespace toposched::provision {

class Reaper {
 public:
  Reaper(Provisioner& provisioner, std::chrono::milliseconds retry);
  ~Reaper();  // stops; removals still pending are left to the next start's reconciliation
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  // Queues the removal (a name already queued is not queued twice; its callbacks all run).
  void Remove(const std::string& name, std::function<void()> on_gone);
  size_t Pending() const;

 private:
  struct Item {
    std::string name;
    std::vector<std::function<void()>> on_gone;
    std::chrono::steady_clock::time_point not_before;
  };
  void Run() TS_EXCLUDES(mu_);
  // Waits for the first item whose time has come and takes it (counted in busy_); nullopt once
  // stopped.
  std::optional<Item> NextDue() TS_EXCLUDES(mu_);

  Provisioner& provisioner_;
  const std::chrono::milliseconds retry_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Item> queue_ TS_GUARDED_BY(mu_);
  size_t busy_ TS_GUARDED_BY(mu_) = 0;
  bool stop_ TS_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace toposched::provision

#endif  // TOPOSCHED_PROVISION_REAPER_H_
