// Where a node's DRA offers go: SlicePublisher in production, a fake in the plugin's tests.
#ifndef TOPOSCHED_DRAPLUGIN_USAGE_PUBLISHER_H_
#define TOPOSCHED_DRAPLUGIN_USAGE_PUBLISHER_H_

#include "base/result.h"
#include "dra/offers.h"
#include "dra/slices.h"
#include "topology/allocator.h"

namespace toposched::draplugin {

// Called from several threads; the plugin serialises its own calls.
class UsagePublisher {
 public:
  virtual ~UsagePublisher() = default;
  // Publishes the node's offers without the devices in `withheld`, the offers of failed devices
  // (`faults`) tainted or left out (SlicePublisher: as the cluster serves device taints), ordered
  // for `usage` (the units prepared claims hold).
  virtual Status Publish(topology::DeviceMask withheld, const dra::DeviceFaults& faults,
                         const topology::NodeUsage& usage) = 0;
  // A claim of this shape was prepared: it feeds the demand behind the publish order.
  virtual void ObserveRequest(const topology::Request& request) = 0;
  // The next Publish reads what the API server holds instead of trusting what it last wrote
  // (kubelet wipes a node's ResourceSlices when it starts).
  virtual void ForgetPublished() {}
  // Whether the node's slices carry offers of `kind` now. A claim prepared on an offer they no
  // longer carry (a set after a switch to whole devices, a core range after --core-offers went)
  // is invisible to the scheduler's accounting of what is published: its devices must be
  // withheld until it goes.
  virtual bool Offers(dra::OfferKind /*kind*/) const { return true; }
};

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_USAGE_PUBLISHER_H_
