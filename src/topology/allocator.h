// The allocator: for one node (its shape and what is in use) and one request of N devices or N
// cores, a legal set of ids or a precise reason why there is none. Pure functions: no I/O, no
// clock, no locks; callers own synchronisation.
//
// Where it lives: node_shape.cc (NodeShape, NodeUsage), placement.cc (Placement geometry),
// legal_sets.{h,cc} (the rules below: which sets are legal, refusal text, LegalPlacements),
// slots.{h,cc} (FreeSlots and the scarcity cost of a change), policies.cc (Allocate: how each
// policy chooses a set).
//
// The rules (docs/topology.md has the reasoning and sources):
//   * Devices, rule `contiguous` (Inferentia): N consecutive ids in numeric order, no wrap.
//   * Devices, rule `aligned` (Trainium torus, IPU buddy tree): N must be a listed size; the set is
//     the aligned block [k*N, (k+1)*N). Other counts are refused with AWS's text.
//   * Devices, rule `any` (all-to-all fabrics): any N free devices.
//   * One device or all devices is always legal.
//   * Cores are numbered node-wide (device * cores_per_device + k) and a core set is always a
//     contiguous range. Under `contiguous` and `any` it may span any devices. Under `aligned` it
//     must lie inside one aligned block of the smallest legal device count that can hold it
//     (Trn1: 1-2 cores in one device, 3-8 in one row of 4, 9-16 in one aligned half, more on the
//     whole node), so a core set never straddles the block a device request needs.
//   * A core allocation makes every device it touches unavailable to device requests; a device
//     allocation takes all of that device's cores.
#ifndef TOPOSCHED_TOPOLOGY_ALLOCATOR_H_
#define TOPOSCHED_TOPOLOGY_ALLOCATOR_H_

#include <algorithm>
#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "topology/catalog.h"

namespace toposched::topology {

enum class Unit { kDevice, kCore };
std::string_view UnitName(Unit unit, int count);  // "device"/"devices", "core"/"cores"

// How a set is chosen on a node, and (in the simulator and the extender's prioritize) how a node is
// chosen among those that fit.
enum class Policy {
  // Ours: the set and the node that take the least from the requests still expected to come,
  // weighted by how scarce their homes are in the fleet (topology/demand.h).
  kScarcity,
  // The previous default: on each node the set that keeps the largest blocks whole; the node
  // where the pod fills a hole most tightly. Kept to compare with.
  kBestFit,
  kFirstFit,   // the lowest-index legal set on the first node that fits (AWS's extension, HAMi)
  kSpread,     // lowest-index sets on the emptiest node (kube-scheduler's LeastAllocated)
  kBinpack,    // lowest-index sets on the fullest node that fits (MostAllocated, HAMi binpack)
  kCountOnly,  // ignores topology: any N free units. An upper bound for the simulator only.
  // FGD as published (Weng et al., ATC'23, "fragmentation gradient descent"): the node whose
  // expected fragmentation over the workload's request mix grows least (ExpectedFragmentation in
  // demand.h), with AWS's lowest-index set on it.
  kFgd,
  // FGD's node choice with our set choice (kScarcity's), so the node choice is compared alone.
  kFgdScarcitySets,
};
std::string_view PolicyName(Policy policy);
Result<Policy> ParsePolicy(std::string_view name);
// The rule that picks a set on one node: spread and binpack pick sets as first-fit does.
Policy SetChoicePolicy(Policy policy);

using DeviceMask = uint64_t;  // bit d = device d; kMaxDevices is 64
using CoreBits = std::bitset<kMaxCores>;

// An instance type at a chosen logical-core setting.
struct NodeShape {
  const InstanceType* type = nullptr;
  int devices = 0;
  int cores_per_device = 0;
  int cores = 0;
  int lnc = 0;  // 0 when the type has no LNC setting

  // `lnc` 0 means the type's default. Errors if the type does not support that LNC.
  static Result<NodeShape> Make(const InstanceType& type, int lnc = 0);
  DeviceMask AllDevices() const {
    return devices == 64 ? ~DeviceMask{0} : ((DeviceMask{1} << devices) - 1);
  }
};

// What is in use on one node: the cores pods hold (a device allocation holds all its cores), the
// devices out of service (failed: unhealthy or gone), and derived from both the cores that cannot
// be given now and a mask of devices with any such core. Not thread-safe.
//
// A device out of service is never free, but what pods hold on it stays held until they leave:
// its pods still run there, and their ids must not go to anyone else when it comes back.
class NodeUsage {
 public:
  NodeUsage() = default;

  // Cores that cannot be given now: held, or on a device out of service.
  const CoreBits& used_cores() const { return used_cores_; }
  DeviceMask busy_devices() const { return busy_devices_; }
  int used_core_count() const { return static_cast<int>(used_cores_.count()); }
  // Cores pods hold (what "allocated" means to an operator).
  const CoreBits& held_cores() const { return held_cores_; }
  int held_core_count() const { return static_cast<int>(held_cores_.count()); }
  DeviceMask out_of_service() const { return out_of_service_; }

  // REQUIRES: ids valid for `shape`. Returns false, changing nothing, if any is already held.
  // Ids on a device out of service can be taken: a recorded pod that runs there keeps them.
  bool Take(const NodeShape& shape, Unit unit, const std::vector<int>& ids);
  // Frees the ids (freeing a free id is a no-op).
  void Release(const NodeShape& shape, Unit unit, const std::vector<int>& ids);
  // True if every id is free to give: neither held nor on a device out of service.
  bool AllFree(const NodeShape& shape, Unit unit, const std::vector<int>& ids) const;
  // Marks exactly the devices of `devices` (within the shape) out of service.
  void SetOutOfService(const NodeShape& shape, DeviceMask devices);

 private:
  bool AllUnheld(const NodeShape& shape, Unit unit, const std::vector<int>& ids) const;
  void RecomputeUsed(const NodeShape& shape, int first_device, int last_device);

  CoreBits held_cores_;
  CoreBits used_cores_;  // held_cores_ plus every core of an out-of-service device
  DeviceMask busy_devices_ = 0;
  DeviceMask out_of_service_ = 0;
};

struct Request {
  Unit unit = Unit::kDevice;
  int count = 0;
  bool operator==(const Request&) const = default;  // the same request class
};
// "4 devices", "1 core": how a request class is named to people.
std::string RequestLabel(const Request& request);

struct Placement {
  Unit unit = Unit::kDevice;
  std::vector<int> ids;    // ascending device ids or core ids
  DeviceMask devices = 0;  // every device the ids touch

  // The placement of these ids, in the order given, with `devices` filled in. Builds, does not
  // check: an id with no device bit (negative, or past kMaxDevices) sets none, so that a caller
  // validating recorded ids can still report them. `cores_per_device` matters for kCore only.
  static Placement FromIds(Unit unit, std::vector<int> ids, int cores_per_device);
  static Placement FromIds(const NodeShape& shape, Unit unit, std::vector<int> ids) {
    return FromIds(unit, std::move(ids), shape.cores_per_device);
  }
};
std::vector<int> MaskToIds(DeviceMask mask);

// Geometry of sets of ids on one node (placement.cc). A device covers all its cores.
// The cores a placement covers, from its ids alone (recorded placements need not carry ascending
// ids or a correct `devices` mask); ids outside the shape cover nothing.
CoreBits CoresOf(const NodeShape& shape, const Placement& p);
// True if the two placements share a core.
bool Overlaps(const NodeShape& shape, const Placement& a, const Placement& b);

// The outcome of one allocation question.
struct Decision {
  bool ok() const { return reason.empty(); }
  Placement placement;        // when ok()
  int score = 0;              // when ok(): 1..10, higher = packs here with less fragmentation
  double cost = 0;            // when ok() under kScarcity with costs: what the set takes (demand.h)
  std::string reason;         // when !ok(): why, in words an operator can act on
  bool unresolvable = false;  // when !ok(): no state of this node could ever satisfy the request
};

// Checks that `request` is a count this node could ever give (used or not). Returns the reason
// when it is not (e.g. AWS's text for 7 devices on trn1.32xlarge); empty when it is.
std::string CheckRequestShape(const NodeShape& shape, const Request& request);

// True if `count` devices form a legal set under rule `aligned`: 1, the whole node, or a listed
// size.
inline bool IsLegalAlignedCount(const NodeShape& shape, int count) {
  const auto& sizes = shape.type->sizes;
  return count == 1 || count == shape.devices ||
         std::find(sizes.begin(), sizes.end(), count) != sizes.end();
}

// True if some state of the node could grant the request (CheckRequestShape says why not, but
// formats its answer; this is for hot loops, so it is inline).
inline bool CanEverGrant(const NodeShape& shape, const Request& request) {
  if (request.count <= 0) return false;
  if (request.unit == Unit::kCore) return request.count <= shape.cores;
  if (request.count > shape.devices) return false;
  return shape.type->rule != LegalSetRule::kAligned || IsLegalAlignedCount(shape, request.count);
}

// How many disjoint legal sets of `request` are free on the node: the number of such requests it
// could still take if nothing else came. 0 for a count the node can never grant.
int FreeSlots(const NodeShape& shape, const NodeUsage& usage, const Request& request);

struct SlotCosts;  // topology/demand.h

// Chooses a legal set for `request` among the free ids of `usage`, by `policy`. kScarcity needs
// `costs` to weigh its candidates (without them it chooses as kBestFit does).
Decision Allocate(const NodeShape& shape, const NodeUsage& usage, const Request& request,
                  Policy policy, const SlotCosts* costs = nullptr);

// Every legal placement for `request` whose units are all free in `usage`, in ascending order of
// their lowest id. For rule `any` device requests (where every subset is legal) it returns the
// single lowest-index choice. Used by preemption to weigh each candidate set.
std::vector<Placement> LegalPlacements(const NodeShape& shape, const NodeUsage& usage,
                                       const Request& request);

// Whether exactly `ids` (devices or cores, by `unit`) form one legal set on the node: the test a
// set chosen elsewhere (kube-scheduler's DRA allocator) passes before a container gets it. Empty
// when legal, else why not, in words an operator can act on.
std::string CheckLegalSet(const NodeShape& shape, Unit unit, std::vector<int> ids);

}  // namespace toposched::topology

#endif  // TOPOSCHED_TOPOLOGY_ALLOCATOR_H_
