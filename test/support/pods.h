// Pod builders for tests and benchmarks, the one place pods are made: kube::Pod objects as the
// informers would decode them (MakePod, one container per ask), and Pod JSON as the API server
// sends it (PodJson). Header-only.
#ifndef TOPOSCHED_TEST_SUPPORT_PODS_H_
#define TOPOSCHED_TEST_SUPPORT_PODS_H_

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/json_escape.h"
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

// A Pod's JSON as the API server sends it: one container "main" asking `count` of `resource` (as
// request and limit; none when count is 0) beside cpu and memory, with the labels, tolerations
// and status fields a real pod carries, so decoders skip what they do not read.
struct PodJsonSpec {
  std::string name{};
  std::string uid{};  // empty: "<name>-uid"
  std::string ns = "default";
  std::string resource = "aws.amazon.com/neuron";
  int count = 0;
  std::string node{};  // spec.nodeName; empty: not bound
  std::string phase = "Pending";
  std::map<std::string, std::string> annotations{};
  std::string resource_version{};  // empty: none (the fake API server sets its own)
};

inline std::string PodJson(const PodJsonSpec& pod) {
  std::string out = "{\"metadata\":{\"name\":" + JsonQuote(pod.name) +
                    ",\"namespace\":" + JsonQuote(pod.ns) +
                    ",\"uid\":" + JsonQuote(pod.uid.empty() ? pod.name + "-uid" : pod.uid);
  if (!pod.resource_version.empty()) {
    out += ",\"resourceVersion\":" + JsonQuote(pod.resource_version);
  }
  out += ",\"creationTimestamp\":\"2026-11-22T10:00:00Z\",\"labels\":{\"app\":\"inference\"}";
  if (!pod.annotations.empty()) {
    out += ",\"annotations\":{";
    bool first = true;
    for (const auto& [key, value] : pod.annotations) {
      out += (first ? "" : ",") + JsonQuote(key) + ":" + JsonQuote(value);
      first = false;
    }
    out += "}";
  }
  out += "},\"spec\":{";
  if (!pod.node.empty()) out += "\"nodeName\":" + JsonQuote(pod.node) + ",";
  const std::string ask =
      pod.count > 0 ? "," + JsonQuote(pod.resource) + ":\"" + std::to_string(pod.count) + "\"" : "";
  out +=
      "\"schedulerName\":\"my-scheduler\",\"containers\":[{\"name\":\"main\",\"image\":"
      "\"model-server:v1\",\"resources\":{\"requests\":{\"cpu\":\"4\",\"memory\":\"16Gi\"" +
      ask + "},\"limits\":{" + (ask.empty() ? "" : ask.substr(1)) +
      "}}}],\"restartPolicy\":\"Always\",\"tolerations\":[{\"key\":\"aws.amazon.com/"
      "neuron\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}]},\"status\":{\"phase\":" +
      JsonQuote(pod.phase) + ",\"qosClass\":\"Burstable\"}}";
  return out;
}

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_SUPPORT_PODS_H_
