// Tells the pods whose prepared claims hold a device that failed, and again when it is back: a
// Warning event NeuronDeviceFailed and the pod condition toposched.io/NeuronDevicesHealthy (False
// while a device of one of its claims is out, True once all are back) — the same event and
// condition the extender writes for device-plugin pods, so `kubectl describe pod` reads alike on
// both paths. The pods are the claim's status.reservedFor, read from the API server when a
// notice is due.
//
// Not thread-safe: one caller, the plugin's health loop. What was told lives in memory: after a
// restart, the pods of claims on a device that is still failed are told once more (the condition
// is the same; one more event).
#ifndef TOPOSCHED_DRAPLUGIN_FAILURE_NOTICES_H_
#define TOPOSCHED_DRAPLUGIN_FAILURE_NOTICES_H_

#include <map>
#include <string>
#include <vector>

#include "dra/slices.h"
#include "draplugin/prepare.h"
#include "kube/client.h"
#include "topology/allocator.h"

namespace toposched::draplugin {

// A claim whose pods must hear of a change: the failed devices it holds now (0: all are back).
struct NoticeDue {
  const PreparedClaim* claim = nullptr;
  topology::DeviceMask failed = 0;
};

// The claims whose failed devices differ from what their pods were told (`told`, by claim uid;
// a claim not in it was told of none). Admin-access devices hold nothing and are not counted.
std::vector<NoticeDue> NoticesDue(const std::map<std::string, PreparedClaim>& prepared,
                                  topology::DeviceMask unhealthy,
                                  const std::map<std::string, topology::DeviceMask>& told);

class FailureNotices {
 public:
  // `evict`: the plugin taints failed devices NoExecute (--on-device-failure evict), which the
  // message says.
  FailureNotices(kube::ApiClient& api, std::string node_name, bool evict);

  // Tells what changed since the last call. A claim whose read or writes fail is told again at
  // the next call; a claim no longer prepared is forgotten.
  void Sync(const std::map<std::string, PreparedClaim>& prepared, const dra::DeviceFaults& faults);
  // Nothing to tell or take back: no device failed and no pod was told of one (the health loop
  // then skips copying the prepared claims).
  bool Idle(topology::DeviceMask unhealthy) const { return unhealthy == 0 && told_.empty(); }

 private:
  Status Tell(const PreparedClaim& claim, topology::DeviceMask failed,
              const dra::DeviceFaults& faults);

  kube::ApiClient& api_;
  const std::string node_name_;
  const bool evict_;
  std::map<std::string, topology::DeviceMask> told_;  // by claim uid; only claims told of a failure
};

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_FAILURE_NOTICES_H_
