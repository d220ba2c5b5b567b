// The ResourceSlices that publish a node's offers (offers.h), in the order the scheduler's DRA
// allocator should try them, within the per-slice limits of resource.k8s.io/v1. Pure: builds
// JSON text, sends nothing.
//
// The allocator has no scoring: it sorts a pool's slices by name, walks their devices in order
// and takes the first that fits (k8s.io/dynamic-resource-allocation/structured, 1.34-1.37). So
// the order we publish in is the only way to steer where a claim lands; `OrderForFirstFit` puts
// first the offer that takes least from the requests still expected (topology/demand.h, the
// extender's scarcity cost), and slice names sort in that order.
//
// Shared counters (partitionable devices): one counter per device (`dN`, worth the device's
// cores) and one per core (`cN`, worth 1), in counter sets of at most 32 counters. A whole device
// or a device set consumes its devices' full `dN`; a core range consumes `cN` of its cores and as
// much of its device's `dN` as it has cores. Overlapping offers then can never both be allocated:
// two that share a device over-draw its `dN`, two core ranges that share a core over-draw `cN`.
#ifndef TOPOSCHED_DRA_SLICES_H_
#define TOPOSCHED_DRA_SLICES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dra/offers.h"
#include "topology/demand.h"

namespace toposched::dra {

// resource.k8s.io/v1 limits (k8s.io/api resource/v1 types.go, identical in 1.35-1.37).
inline constexpr int kMaxDevicesPerSlice = 128;
inline constexpr int kMaxDevicesPerSliceWithCounters = 64;
inline constexpr int kMaxCounterSetsPerSlice = 8;
inline constexpr int kMaxCountersPerSet = 32;
inline constexpr int kMaxConsumptionsPerDevice = 2;
inline constexpr int kMaxAttributesPerDevice = 32;

// What the slices say about the node beyond its shape.
struct NodeFacts {
  std::string node_name;              // the pool's name and spec.nodeName
  std::string node_uid;               // the slices' owner (deleted with the Node); empty: none
  std::string neuron_driver_version;  // `neuronDriverVersion`; empty when unknown
  std::string dra_driver_version;     // `draDriverVersion`, a semantic version
  // AWS's EC2 instance-topology labels (topology.k8s.aws/network-node-layer-1..3), when set.
  std::vector<std::string> network_node_layers;
};

// What losing a slot of each expected request class costs on this node alone: a kubelet plugin
// sees only its own node, so the node's free slots are the whole supply it can weigh. The
// publisher and the simulator's model of a DRA cluster both order offers by it.
topology::SlotCosts NodeLocalCosts(const topology::DemandModel& demand,
                                   const topology::NodeShape& shape,
                                   const topology::NodeUsage& usage);

// Where the allocator should meet an offer, as a sort key. It walks a pool's devices in order and
// evaluates the claim's selectors on each it passes (per pod, per candidate node), so a claim of
// one size pays for every offer of other sizes before its own: on an aligned torus (Trainium) each
// row's set comes right before the row's devices, so a claim for one device and a claim for a row
// each meet a free offer within a few steps, and the larger sets follow the last row; elsewhere
// (an Inferentia ring, with more sets than devices) the whole devices come first, then the sets;
// core ranges last. docs/dra.md, "What the allocator pays for", has the measurements.
std::pair<int, int> OfferWalkPosition(const topology::NodeShape& shape, const Offer& offer);

// The offers in the order the allocator should meet them: by OfferWalkPosition, then kind; within
// that, without `costs` in index order (size, first id); with `costs`, the offers free in `usage`
// by ascending scarcity cost (ties by index), then the rest by index.
std::vector<Offer> OrderForFirstFit(std::vector<Offer> offers, const topology::NodeShape& shape,
                                    const topology::NodeUsage& usage,
                                    const topology::SlotCosts* costs);

struct CounterUse {
  std::string counter_set;
  std::map<std::string, int64_t> counters;
};
// The counter sets of a node (name -> counter -> value), the core counters only with
// `core_counters` (core ranges offered), and what one offer consumes.
std::map<std::string, std::map<std::string, int64_t>> CounterSetsOf(
    const topology::NodeShape& shape, bool core_counters);
std::vector<CounterUse> CountersConsumedBy(const topology::NodeShape& shape, const Offer& offer);

// Device taints (resource.k8s.io/v1 `devices[].taints[]`, KEP-5055, GA in Kubernetes 1.37): a
// failed device's offers stay published but tainted, so kube-scheduler allocates none of them to a
// claim that does not tolerate the taint, and with NoExecute kube-controller-manager's
// device-taint eviction controller evicts the pods whose claims use them.
inline constexpr std::string_view kUnhealthyTaintKey = "toposched.io/unhealthy";
enum class TaintEffect { kNoSchedule, kNoExecute };
std::string_view TaintEffectName(TaintEffect effect);  // the API's NoSchedule | NoExecute

// Why a device failed and since when, as its offers' taint says it.
struct DeviceFault {
  std::string reason;      // a label value (<= 63 of [A-Za-z0-9-_.]), e.g. device-node-missing
  std::string time_added;  // RFC 3339 (UTC, seconds), kept while the device stays failed
};
using DeviceFaults = std::map<int, DeviceFault>;  // by device id

// The taint an offer touching a failed device carries: value `neuronN-<reason>` of its first
// failed device, timeAdded the earliest of its failed devices. Nullopt when it touches none.
struct OfferTaint {
  std::string value;
  std::string time_added;
};
std::optional<OfferTaint> TaintOf(const Offer& offer, const DeviceFaults& faults);

struct SliceOptions {
  bool partitionable = false;  // offers carry consumesCounters; counter slices are published
  int64_t generation = 1;      // the pool's generation
  // Failed devices whose offers are published tainted (the cluster serves device taints); a slice
  // with a tainted device holds at most kMaxDevicesPerSliceWithCounters devices.
  DeviceFaults faults = {};
  TaintEffect effect = TaintEffect::kNoSchedule;
};

struct ResourceSliceObject {
  std::string name;
  std::string json;  // a whole resource.k8s.io/v1 ResourceSlice, without a resourceVersion
  int devices = 0;
};

// The node's slices: device slices named `<prefix>-NN` in publish order, then, when
// partitionable, counter slices `<prefix>-zc-NN`. Every slice carries the pool's slice count.
std::vector<ResourceSliceObject> BuildSlices(const NodeFacts& facts,
                                             const topology::NodeShape& shape,
                                             const std::vector<Offer>& ordered,
                                             const SliceOptions& options);

// A slice of one tainted device, for a dry-run create (`?dryRun=All`) that shows whether the API
// server keeps `devices[].taints` (1.37; a server with DRADeviceTaints off drops the field).
std::string TaintProbeSlice(const NodeFacts& facts);

// The prefix of the node's slice names: the node name when it fits a DNS subdomain with room for
// the suffixes, else its start plus a hash of the whole name.
std::string SliceNamePrefix(std::string_view node_name);

}  // namespace toposched::dra

#endif  // TOPOSCHED_DRA_SLICES_H_
