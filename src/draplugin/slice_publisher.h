// Keeps a node's ResourceSlices equal to what the node offers (dra/slices.h): creates, updates
// and deletes this driver's slices for this node through the API server, bumping the pool's
// generation on every change, and finds out once whether the cluster keeps shared counters
// (partitionable devices) or only whole devices can be offered.
#ifndef TOPOSCHED_DRAPLUGIN_SLICE_PUBLISHER_H_
#define TOPOSCHED_DRAPLUGIN_SLICE_PUBLISHER_H_

#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "dra/offers.h"
#include "dra/slices.h"
#include "kube/client.h"
#include "topology/allocator.h"
#include "topology/demand.h"

namespace toposched::draplugin {

enum class Partitionable { kAuto, kOn, kOff };
Result<Partitionable> ParsePartitionable(std::string_view text);  // auto|on|off

enum class PublishOrder { kScarcity, kIndex };
Result<PublishOrder> ParsePublishOrder(std::string_view text);  // scarcity|index

struct PublisherConfig {
  dra::NodeFacts facts;
  topology::NodeShape shape;
  Partitionable partitionable = Partitionable::kAuto;
  PublishOrder order = PublishOrder::kScarcity;
};

// Thread-safe: Publish may be called from the health loop and from Prepare/Unprepare at once.
class SlicePublisher {
 public:
  SlicePublisher(kube::ApiClient& api, PublisherConfig config);

  // Makes the node's slices say what it offers now: devices in `unhealthy` left out, publish
  // order by the scarcity cost of each offer given `usage` (the units held by prepared claims).
  // Nothing is written when the plan equals what was last published. On a partial failure the
  // next call starts over from a fresh read of the slices.
  Status Publish(topology::DeviceMask unhealthy, const topology::NodeUsage& usage);
  // A claim of this shape was prepared on the node: it feeds the demand model behind the order.
  void ObserveRequest(const topology::Request& request);
  // Removes every slice of this driver for this node (on shutdown with --cleanup, and in tests).
  Status DeleteAll();

  // After the first successful Publish: whether the cluster keeps shared counters.
  bool partitionable() const;
  int64_t generation() const;
};

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_SLICE_PUBLISHER_H_
