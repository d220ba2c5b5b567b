// Keeps a node's ResourceSlices equal to what the node offers (dra/slices.h): creates, updates
// and deletes this driver's slices for this node through the API server, bumping the pool's
// generation on every change, and finds out once whether the cluster keeps shared counters
// (partitionable devices) or only whole devices can be offered.
#ifndef TOPOSCHED_DRAPLUGIN_SLICE_PUBLISHER_H_
#define TOPOSCHED_DRAPLUGIN_SLICE_PUBLISHER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "dra/offers.h"
#include "dra/slices.h"
#include "draplugin/usage_publisher.h"
#include "kube/client.h"
#include "topology/allocator.h"
#include "topology/demand.h"

namespace toposched::draplugin {

enum class Partitionable { kAuto, kOn, kOff };
Result<Partitionable> ParsePartitionable(std::string_view text);  // auto|on|off

enum class PublishOrder { kScarcity, kIndex };
Result<PublishOrder> ParsePublishOrder(std::string_view text);  // scarcity|index

// Whether a failed device's offers are published with a device taint (the cluster serves
// `devices[].taints`, Kubernetes 1.37) or withdrawn: auto finds out with a dry-run create the
// first time a device fails.
enum class DeviceTaints { kAuto, kOn, kOff };
Result<DeviceTaints> ParseDeviceTaints(std::string_view text);  // auto|on|off
// --on-device-failure: event (NoSchedule: new claims avoid the device, running pods keep it) or
// evict (NoExecute: the device-taint eviction controller evicts the pods whose claims use it).
Result<dra::TaintEffect> ParseOnDeviceFailure(std::string_view text);  // event|evict

struct PublisherConfig {
  dra::NodeFacts facts;
  topology::NodeShape shape;
  Partitionable partitionable = Partitionable::kAuto;
  bool core_offers = false;  // with partitionable devices, also core ranges (dra::OfferScope)
  dra::SetOffers set_offers = dra::SetOffers::kAuto;  // with partitionable devices, sets too
  PublishOrder order = PublishOrder::kScarcity;
  DeviceTaints device_taints = DeviceTaints::kAuto;
  dra::TaintEffect failure_effect = dra::TaintEffect::kNoSchedule;
};

// Thread-safe: Publish may be called from the health loop and from Prepare/Unprepare at once.
class SlicePublisher : public UsagePublisher {
 public:
  SlicePublisher(kube::ApiClient& api, PublisherConfig config);

  // Makes the node's slices say what it offers now: devices in `withheld` left out; the offers of
  // the devices in `faults` tainted where the cluster serves device taints, else left out too;
  // publish order by the scarcity cost of each offer given `usage` (the units held by prepared
  // claims), failed devices counted as taken. Nothing is written when the plan equals what was
  // last published. On a partial failure the next call starts over from a fresh read.
  Status Publish(topology::DeviceMask withheld, const dra::DeviceFaults& faults,
                 const topology::NodeUsage& usage) override;
  // No failed devices: `unhealthy` is left out.
  Status Publish(topology::DeviceMask unhealthy, const topology::NodeUsage& usage) {
    return Publish(unhealthy, {}, usage);
  }
  // A claim of this shape was prepared on the node: it feeds the demand model behind the order.
  void ObserveRequest(const topology::Request& request) override;
  // The next Publish reads the slices afresh instead of trusting what it last wrote, so a slice
  // someone else edited or deleted is repaired (the plugin calls it now and then).
  void ForgetPublished() override;
  bool Offers(dra::OfferKind kind) const override;
  // Removes every slice of this driver for this node (on shutdown with --cleanup, and in tests).
  Status DeleteAll();

  // After the first successful Publish: whether the node's slices carry shared counters (the
  // cluster keeps them, and the node offers sets or core ranges).
  bool partitionable() const;
  int64_t generation() const;
  // Whether failed devices' offers are tainted (nullopt: not known yet).
  std::optional<bool> taints_served() const;

  // One of our slices as the API server has it.
  struct KnownSlice {
    std::string name;
    std::string resource_version;
    std::string digest;  // our annotation: the digest of what we wrote, generation left out
    int64_t generation = 0;
    bool has_shared_counters = false;
  };

 private:
  struct Plan;

  Status PublishLocked(topology::DeviceMask withheld, const dra::DeviceFaults& faults,
                       const topology::NodeUsage& usage) TS_REQUIRES(mu_);
  // Whether the cluster keeps device taints: decided by the config, else by one dry-run create
  // (repeated at the next failure while the answer says nothing either way).
  bool TaintsServedLocked() TS_REQUIRES(mu_);
  // What the node offers with and without shared counters (the one place that decides it).
  dra::OfferScope ScopeWith(bool counters) const;
  // Offers of `withdrawn` left out, of `tainted` published tainted; both count as taken.
  Plan MakePlan(bool partitionable, topology::DeviceMask withdrawn, dra::DeviceFaults tainted,
                const topology::NodeUsage& usage) TS_EXCLUDES(demand_mu_);
  Status ReadSlicesLocked() TS_REQUIRES(mu_);
  // Creates or replaces one slice (re-reading it once on a conflict); the server's answer, which
  // on a 2xx also updates known_. Transport failures are errors.
  Result<kube::HttpResponse> WriteSliceLocked(const std::string& name, const std::string& json,
                                              const std::string& digest) TS_REQUIRES(mu_);
  Status DeleteSliceLocked(const std::string& name) TS_REQUIRES(mu_);

  kube::ApiClient& api_;
  const PublisherConfig config_;

  mutable Mutex mu_;  // held for a whole Publish/DeleteAll, API calls included
  // Our slices on the server as of the last read or write; nullopt: unknown (at start, after a
  // failure), so the next Publish reads them first.
  std::optional<std::map<std::string, KnownSlice>> known_ TS_GUARDED_BY(mu_);
  bool decided_ TS_GUARDED_BY(mu_) = false;  // whether counters are kept is known
  bool partitionable_ TS_GUARDED_BY(mu_) = false;
  int64_t generation_ TS_GUARDED_BY(mu_) = 0;
  std::optional<bool> taints_served_ TS_GUARDED_BY(mu_);

  // A leaf lock of its own, so ObserveRequest never waits for a Publish's API calls.
  Mutex demand_mu_;
  topology::DemandModel demand_ TS_GUARDED_BY(demand_mu_);
};

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_SLICE_PUBLISHER_H_
