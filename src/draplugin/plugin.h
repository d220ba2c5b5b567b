// The kubelet side of the DRA driver (`toposched dra-plugin`): the plugin-watcher registration
// server (`<registry-dir>/neuron.aws.com-reg.sock`), the DRAPlugin v1 server
// (`<plugin-dir>/dra.sock`) whose NodePrepareResources reads each ResourceClaim from the API
// server and writes its CDI spec (cdi.h), and a health loop. The CDI files are the checkpoint:
// at start they say which claims are prepared and which units those hold. After every Prepare or
// Unprepare, and whenever device health changes, the node's offers are published again with the
// units in use (UsagePublisher, implemented by SlicePublisher in the command), without the devices
// that containers outside DRA hold (node_holders.h, from kubelet's PodResources). The pods whose
// claims hold a device that fails are told (failure_notices.h).
#ifndef TOPOSCHED_DRAPLUGIN_PLUGIN_H_
#define TOPOSCHED_DRAPLUGIN_PLUGIN_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "dra/slices.h"
#include "draplugin/failure_notices.h"
#include "draplugin/node_holders.h"
#include "draplugin/prepare.h"
#include "draplugin/usage_publisher.h"
#include "kube/client.h"
#include "nodeagent/container_setup.h"
#include "nodeagent/readiness.h"
#include "nodeagent/sysfs.h"
#include "topology/allocator.h"

namespace grpc {
class Server;
}

namespace toposched::draplugin {

// PluginInfo as kubelet's plugin watcher reads it.
inline constexpr std::string_view kPluginType = "DRAPlugin";
inline constexpr std::string_view kDraServiceVersion = "v1.DRAPlugin";

struct DraPluginOptions {
  std::string node_name;
  nodeagent::HostPaths host;
  std::string cdi_root = "/var/run/cdi";
  std::string plugin_dir = "/var/lib/kubelet/plugins/neuron.aws.com";
  std::string registry_dir = "/var/lib/kubelet/plugins_registry";
  nodeagent::CoreNumbering numbering = nodeagent::CoreNumbering::kContainer;
  std::chrono::milliseconds health_interval{1000};
  // How often the slices are read back from the API server and repaired (kubelet wipes them at
  // its start; another client may edit them). Also done at once when kubelet registers us.
  std::chrono::milliseconds resync_interval{60000};
  // kubelet's PodResources socket: the devices containers outside DRA (device-plugin pods) hold
  // are neither offered nor prepared. Empty: no such check.
  std::string pod_resources_socket;
  // --on-device-failure evict: failed devices are tainted NoExecute; the pods told say so.
  bool evict_on_device_failure = false;
};

// One claim as kubelet names it, and what preparing it gave.
struct ClaimRef {
  std::string ns;
  std::string uid;
  std::string name;
};
struct PrepareOutcome {
  std::string error;    // empty: prepared
  PreparedClaim claim;  // when prepared
};

class DraPlugin {
 public:
  // `shape`, `api` and `publisher` must outlive the plugin.
  DraPlugin(DraPluginOptions options, const topology::NodeShape& shape, kube::ApiClient& api,
            UsagePublisher& publisher);
  ~DraPlugin();
  DraPlugin(const DraPlugin&) = delete;
  DraPlugin& operator=(const DraPlugin&) = delete;

  // Reads the checkpoint, checks health and publishes once (a failed publish is retried by the
  // health loop), serves dra.sock, then the registration socket (kubelet notices it and
  // registers us), and starts the health loop.
  Status Start();
  // Removes the registration socket first (kubelet drops the plugin), then dra.sock; joins the
  // health loop. Idempotent.
  void Stop();

  // The work behind the two RPCs, one outcome per claim (keyed by uid).
  std::map<std::string, PrepareOutcome> Prepare(const std::vector<ClaimRef>& claims);
  std::map<std::string, std::string> Unprepare(const std::vector<ClaimRef>& claims);

  const std::string& dra_socket() const { return dra_socket_; }                    // absolute
  const std::string& registration_socket() const { return registration_socket_; }  // absolute
  const nodeagent::Readiness& readiness() const { return readiness_; }
  bool registered() const { return registered_; }
  std::vector<PreparedClaim> PreparedClaims() const;
  topology::NodeUsage Usage() const;
  topology::DeviceMask unhealthy() const;

 private:
  class DraService;
  class RegistrationService;

  Result<PreparedClaim> PrepareOne(const ClaimRef& ref, const HolderView& holders);
  // Publishes the current health and usage, less `holders`' devices (read again when null);
  // records a failure for the health loop to retry.
  void PublishNow(std::string_view why, const HolderView* holders = nullptr);
  // The node's claims::kLabelDraClaimsHeld follows the prepared claims (ClaimsHeldValue): it is
  // set before the first claim's prepare succeeds and removed by the health loop once none is
  // prepared (not at Unprepare: a node whose pods come and go writes it once). A node switched
  // back to the device plugin keeps it until the device plugin has read kubelet's claims, so the
  // extender never offers the node in between. Writes only when the label should appear or go,
  // or (`refresh`) when its count changed; a failed write is retried at the next health check.
  void SyncClaimsLabel(bool refresh) TS_EXCLUDES(label_mutex_, mutex_);
  Status WriteClaimsLabel(const std::optional<std::string>& value) TS_REQUIRES(label_mutex_);
  // Every failed device, with the reason and time it was first seen failed (kept while it stays
  // failed, so its taint does not change); logs each change.
  dra::DeviceFaults CheckHealth() TS_EXCLUDES(mutex_);
  void HealthLoop();
  // The pods whose claims hold a failed device (or one back in service) are told: one API read
  // and two writes per changed claim; nothing at all while every device is healthy.
  void TellPodsOnFailedDevices() TS_EXCLUDES(mutex_);
  void UpdateReadiness() TS_EXCLUDES(mutex_);
  void OnRegistrationStatus(bool registered, const std::string& error);

  const DraPluginOptions options_;
  // Made absolute once: the readiness message names the registration socket on every publish
  // until kubelet registers, and normalising the path each time was 40 % of the instructions of
  // a prepare in bench/draplugin_bench (whose plugin is not registered).
  const std::string dra_socket_;
  const std::string registration_socket_;
  const topology::NodeShape& shape_;
  kube::ApiClient& api_;
  UsagePublisher& publisher_;
  nodeagent::Readiness readiness_;
  NodeHolders holders_;     // devices held outside DRA (device-plugin pods)
  FailureNotices notices_;  // only the health loop uses it

  // Taken before mutex_: a prepare that sets the label records its claim before an unprepare can
  // remove it.
  Mutex label_mutex_;
  // The label as last written (nullopt inside: removed); unset until the first write.
  std::optional<std::optional<std::string>> label_written_ TS_GUARDED_BY(label_mutex_);

  mutable Mutex mutex_;
  std::map<std::string, PreparedClaim> prepared_ TS_GUARDED_BY(mutex_);  // by claim uid
  topology::DeviceMask unhealthy_ TS_GUARDED_BY(mutex_) = 0;
  dra::DeviceFaults faults_ TS_GUARDED_BY(mutex_);  // the devices of unhealthy_, why and since when
  bool stopping_ TS_GUARDED_BY(mutex_) = false;
  CondVar stop_cv_;

  // Held across one Publish, so that publishes go out in the order their snapshots were taken.
  Mutex publish_mutex_;
  // Devices withheld because prepared claims hold them under names no longer published (logged
  // when it changes).
  topology::DeviceMask withheld_unpublished_ TS_GUARDED_BY(publish_mutex_) = 0;
  std::atomic<bool> publish_pending_{false};
  std::atomic<bool> published_{false};
  std::atomic<bool> registered_{false};
  std::atomic<bool> resync_pending_{false};

  std::unique_ptr<DraService> dra_service_;
  std::unique_ptr<RegistrationService> registration_service_;
  std::unique_ptr<grpc::Server> dra_server_;
  std::unique_ptr<grpc::Server> registration_server_;
  std::thread health_thread_;
};

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_PLUGIN_H_
