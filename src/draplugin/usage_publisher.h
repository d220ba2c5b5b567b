// Where a node's DRA offers go: SlicePublisher in production, a fake in the plugin's tests.
#ifndef TOPOSCHED_DRAPLUGIN_USAGE_PUBLISHER_H_
#define TOPOSCHED_DRAPLUGIN_USAGE_PUBLISHER_H_

#include "base/result.h"
#include "topology/allocator.h"

namespace toposched::draplugin {

// Called from several threads; the plugin serialises its own calls.
class UsagePublisher {
 public:
  virtual ~UsagePublisher() = default;
  // Publishes the node's offers without the devices in `unhealthy`, ordered for `usage` (the
  // units prepared claims hold).
  virtual Status Publish(topology::DeviceMask unhealthy, const topology::NodeUsage& usage) = 0;
  // A claim of this shape was prepared: it feeds the demand behind the publish order.
  virtual void ObserveRequest(const topology::Request& request) = 0;
  // The next Publish reads what the API server holds instead of trusting what it last wrote
  // (kubelet wipes a node's ResourceSlices when it starts).
  virtual void ForgetPublished() {}
};

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_USAGE_PUBLISHER_H_
