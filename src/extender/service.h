// The extender's logic, independent of HTTP: answers filter, prioritize, bind and preempt from
// the tracker, and keeps the tracker in step with the cluster (nodes and pods from informers, or
// from a file in offline mode). Thread-safe: HTTP threads and informer threads call it at once.
#ifndef TOPOSCHED_EXTENDER_SERVICE_H_
#define TOPOSCHED_EXTENDER_SERVICE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/result.h"
#include "extender/metrics.h"
#include "extender/pod_requests.h"
#include "extender/protocol.h"
#include "kube/objects.h"
#include "topology/catalog.h"
#include "tracker/tracker.h"

namespace toposched::extender {

// Where bind writes go: the API server, or memory in offline mode.
class ClusterWriter {
 public:
  virtual ~ClusterWriter() = default;
  // Binds the pod to the node with these annotations in the same write (a Binding object).
  virtual Status Bind(const std::string& ns, const std::string& name, const std::string& uid,
                      const std::string& node,
                      const std::map<std::string, std::string>& annotations) = 0;
  // Raises a Kubernetes Event on the pod; best effort.
  virtual void Event(const std::string& ns, const std::string& name, const std::string& uid,
                     std::string_view type, std::string_view reason, std::string_view message) = 0;
};

struct ExtenderOptions {
  ResourceNames resources;
  topology::Policy policy = topology::Policy::kBestFit;
  // How long a bind may hold ids before they are released if it never completes.
  std::chrono::milliseconds reservation_timeout{30000};
};

class ExtenderService {
 public:
  using Clock = std::function<int64_t()>;  // nanoseconds

  // `steady_ns` times reservations; `wall_ns` stamps NEURON_ALLOC_TIME (Unix time).
  ExtenderService(const topology::Catalog& catalog, ExtenderOptions options, ClusterWriter& writer,
                  Metrics& metrics, Clock steady_ns, Clock wall_ns);

  // The four verbs: each returns the JSON body of a 200 answer.
  std::string Filter(const ExtenderArgs& args);
  std::string Prioritize(const ExtenderArgs& args);
  std::string Bind(const BindingArgs& args);
  std::string Preempt(const PreemptionArgs& args);

  // Releases reservations whose bind never finished; call about once a second.
  void ExpireReservations();

  // Cluster state, from the node and pod informers (or the offline file).
  void ReplaceNodes(const std::vector<kube::Node>& nodes);
  void UpsertNode(const kube::Node& node);
  void DeleteNode(const kube::Node& node);
  // A full pod list: rebuilds the tracker from the pods' recorded allocations.
  void ReplacePods(const std::vector<kube::Pod>& pods);
  void UpsertPod(const kube::Pod& pod);
  void DeletePod(const kube::Pod& pod);

  // Ready once nodes and pods have been listed and the tracker rebuilt.
  bool Ready() const { return nodes_synced_ && pods_synced_; }
  void SetApiHealthy(bool healthy) { api_healthy_ = healthy; }
  bool ApiHealthy() const { return api_healthy_; }

  const tracker::Tracker& tracker() const { return tracker_; }

 private:
  struct NodeFacts {
    std::string instance_type;
    int lnc = 0;
    int cores_per_device = 0;  // 0 when the type is unknown
  };

  // Requests of a pod seen by the watch or by filter (offline mode has only the latter).
  void RememberPod(PodRequests requests);
  void LearnNode(const kube::Node& node);
  Result<tracker::RecordedPod> RecordedFromPod(const kube::Pod& pod) const;
  void ReportProblem(const std::string& uid, const std::string& pod_key, std::string_view reason,
                     const std::string& message);

  const topology::Catalog& catalog_;
  const ExtenderOptions options_;
  ClusterWriter& writer_;
  Metrics& metrics_;
  Clock steady_ns_;
  Clock wall_ns_;
  tracker::Tracker tracker_;

  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, NodeFacts> nodes_;   // guarded by mu_
  std::unordered_map<std::string, PodRequests> pods_;  // by uid; guarded by mu_
  std::atomic<bool> nodes_synced_{false};
  std::atomic<bool> pods_synced_{false};
  std::atomic<bool> api_healthy_{true};
};

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_SERVICE_H_
