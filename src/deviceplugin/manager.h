// The device plugin process: waits for the driver, resolves the node's topology, keeps device
// health, serves one endpoint per resource, registers with kubelet and registers again whenever
// kubelet restarts, turns ready once kubelet holds the advertised devices (readiness.h), records
// kubelet's real assignment on pods that had no allocation and on pods whose containers got other
// ids than their record (toposched.io/granted), and labels the node with the LNC it serves at
// (toposched.io/neuron-lnc), again whenever a re-created Node object has lost the label.
#ifndef TOPOSCHED_DEVICEPLUGIN_MANAGER_H_
#define TOPOSCHED_DEVICEPLUGIN_MANAGER_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "deviceplugin/allocation.h"
#include "deviceplugin/health.h"
#include "nodeagent/device_ids.h"
#include "nodeagent/node_topology.h"
#include "nodeagent/pod_resources.h"
#include "nodeagent/pod_source.h"
#include "nodeagent/readiness.h"
#include "nodeagent/sysfs.h"
#include "topology/catalog.h"

namespace toposched::deviceplugin {

struct PluginOptions {
  nodeagent::HostPaths host;
  std::string kubelet_dir = "/var/lib/kubelet/device-plugins";
  std::string kubelet_socket_name = "kubelet.sock";
  // kubelet's PodResources socket; empty turns the recording of unannotated pods off.
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::string node_name;
  std::string instance_type_override;
  // Resources served, one endpoint each. Socket file: "<socket_prefix>-<last part of name>.sock".
  std::vector<claims::ResourceSpec> resources;
  std::string socket_prefix = "toposched";
  nodeagent::CoreNumbering numbering = nodeagent::CoreNumbering::kContainer;

  std::chrono::milliseconds health_interval{250};
  // How long a failed device must pass its checks, without a failure, to be back in service.
  std::chrono::milliseconds health_recover{30000};
  std::chrono::milliseconds discovery_interval{10000};
  // A found inventory is used only once a second scan this much later agrees (the driver makes
  // its sysfs entries one device at a time while it loads).
  std::chrono::milliseconds discovery_settle{300};
  std::chrono::milliseconds register_retry{2000};
  std::chrono::milliseconds register_timeout{10000};
  // Period of the PodResources pass (0 = only after an unannotated grant), and the delay after
  // such a grant (kubelet records the ids only once Allocate has returned).
  std::chrono::milliseconds reconcile_interval{30000};
  std::chrono::milliseconds reconcile_delay{2000};
  // After registering: how often to ask kubelet's GetAllocatableResources until it holds the
  // advertised devices; how long a mismatch may last before it is logged (and, when kubelet
  // lacks ids, the plugin is no longer ready); how often to compare again once it matched.
  std::chrono::milliseconds allocatable_retry{250};
  std::chrono::milliseconds allocatable_grace{10000};
  std::chrono::milliseconds allocatable_recheck{30000};
  // How often the node's LNC label is read back and set again when it is missing or different
  // (a Node object deleted and re-created has lost it); also after kubelet re-registers.
  std::chrono::milliseconds label_interval{60000};
};

// The default resources (claims/resources.h): devices as aws.amazon.com/neuron (alias
// neurondevice), cores as aws.amazon.com/neuroncore. An empty name leaves that resource out.
using claims::DefaultResources;

// "<prefix>-<last path part of the resource, [a-z0-9-] only>.sock".
std::string SocketName(const std::string& prefix, const std::string& resource);

class DevicePluginManager {
 public:
  // `catalog` and `pods` must outlive the manager.
  DevicePluginManager(PluginOptions options, const topology::Catalog& catalog,
                      nodeagent::PodSource& pods);
  ~DevicePluginManager();
  DevicePluginManager(const DevicePluginManager&) = delete;
  DevicePluginManager& operator=(const DevicePluginManager&) = delete;

  // Runs until `stop` becomes true (noticed within ~200 ms). Errors only for configuration that
  // can never work (no resources, bad names); a missing driver or kubelet is waited for.
  Status Run(const std::atomic<bool>& stop);

  // For tests and logs.
  bool discovered() const { return discovered_; }
  int registrations() const { return registrations_; }
  // How often sysfs was scanned, and how often kubelet's socket was found missing: events a test
  // waits for before it says "nothing happened yet" (no sleeping).
  int discovery_scans() const { return discovery_scans_; }
  int kubelet_missing_checks() const { return kubelet_missing_checks_; }
  // For the probe endpoint (probe.h); valid from construction.
  const nodeagent::Readiness& readiness() const { return readiness_; }

 private:
  struct Endpoint;
  struct AllocatableWatch;
  bool WaitForDevices(const std::atomic<bool>& stop);
  void HealthLoop(const std::atomic<bool>& stop);
  // Makes the node's annotations name the devices out of service now (FaultAnnotations), so
  // that the extender stops choosing them; retried on the next poll when the write fails.
  void PublishFaults();
  void ReconcileLoop(const std::atomic<bool>& stop);
  // Records what kubelet booked for `pod` (namespace/name) soon; empty: for every pod.
  void KickReconcile(const std::string& pod);
  // Readiness once every endpoint is registered: does kubelet hold what we advertise?
  void CheckKubeletHolds(AllocatableWatch& watch);
  // Keeps the node labelled with the LNC this plugin serves at (claims::kLabelNeuronLnc), the
  // extender's positive evidence of it: one check every label_interval, or sooner when kicked.
  void LabelLoop(const std::atomic<bool>& stop);
  void KickLabelCheck();
  // One check: reads the label back and patches it when absent or different (without reading,
  // when it cannot be read); logs what it found and did. No-op for a type without an LNC.
  void EnsureLncLabel();
  // Labels the node with how many DRA devices of toposched's driver kubelet still lists prepared
  // in this node's pool (claims::kLabelDraClaimsHeld), or removes the label once none is left:
  // the extender offers the node only without it. Before registering, then each PodResources
  // pass: written again at every pass while claims remain (a re-created Node object lost it);
  // its removal once.
  void PublishDraClaims();
  void ServeAndRegister(const std::atomic<bool>& stop);

  const PluginOptions options_;
  const topology::Catalog& catalog_;
  nodeagent::PodSource& pods_;

  std::unique_ptr<nodeagent::NodeTopology> topology_;
  std::unique_ptr<HealthBoard> health_;
  // The fault annotations last written (HealthLoop's thread, and Run's before it starts), and
  // the last write error logged.
  std::optional<std::map<std::string, std::optional<std::string>>> faults_published_;
  std::string faults_error_;
  std::unique_ptr<AllocationService> allocations_;
  std::unique_ptr<nodeagent::PodResourcesClient> pod_resources_;  // null when PodResources is off
  nodeagent::Readiness readiness_;
  // The kLabelDraClaimsHeld value last written (nullopt inside: removed); unset until the first
  // write. Only Run, before the reconcile thread starts, and that thread touch it.
  std::optional<std::optional<std::string>> dra_claims_published_;
  Mutex label_mutex_;
  CondVar label_wake_;
  bool label_kicked_ TS_GUARDED_BY(label_mutex_) = false;
  // What the last label check logged (Run's first check, then LabelLoop's thread only).
  std::string label_logged_;

  Mutex reconcile_mutex_;
  CondVar reconcile_wake_;
  bool reconcile_kicked_ TS_GUARDED_BY(reconcile_mutex_) = false;  // a pass over every pod
  std::set<std::string> kicked_pods_ TS_GUARDED_BY(reconcile_mutex_);

  std::atomic<bool> discovered_{false};
  std::atomic<int> registrations_{0};
  std::atomic<int> discovery_scans_{0};
  std::atomic<int> kubelet_missing_checks_{0};
};

}  // namespace toposched::deviceplugin

#endif  // TOPOSCHED_DEVICEPLUGIN_MANAGER_H_
