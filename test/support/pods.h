// Pod builders for tests and benchmarks: kube::Pod objects as the informers would decode them,
// one container per ask. Header-only (needs only kube/objects.h).
#ifndef TOPOSCHED_TEST_SUPPORT_PODS_H_
#define TOPOSCHED_TEST_SUPPORT_PODS_H_

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kube/objects.h"

namespace toposched::testing {

// One container: `count` of `resource` as both request and limit (none when count is 0).
struct ContainerAsk {
  std::string name;
  std::string resource;
  int count = 0;
  bool init = false;
  bool sidecar = false;
};

// A pod in namespace default with uid `name`-uid, bound to `node` (none when empty), Pending.
inline kube::Pod MakePod(const std::string& name, const std::vector<ContainerAsk>& asks,
                         std::map<std::string, std::string, std::less<>> annotations = {},
                         const std::string& node = "node-a") {
  kube::Pod pod;
  pod.ns = "default";
  pod.name = name;
  pod.uid = name + "-uid";
  pod.node_name = node;
  pod.phase = "Pending";
  pod.creation_timestamp = "2026-11-22T10:00:00Z";
  pod.annotations = std::move(annotations);
  for (const ContainerAsk& ask : asks) {
    kube::Container container;
    container.name = ask.name;
    container.sidecar = ask.sidecar;
    if (ask.count > 0) {
      container.requests[ask.resource] = ask.count;
      container.limits[ask.resource] = ask.count;
    }
    (ask.init ? pod.init_containers : pod.containers).push_back(std::move(container));
  }
  return pod;
}

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_SUPPORT_PODS_H_
