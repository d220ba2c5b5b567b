// The tracker ("meta scheduler", after g8s8): the in-memory truth of which ids every node has
// given to which pod. Filter and prioritize ask it questions that change nothing; bind reserves a
// set with a deadline, then commits it when the Binding is written or rolls it back when that
// fails; reservations nobody commits expire; a deleted pod is forgotten; at start (and on every
// resync) it is rebuilt from the live pods' recorded allocations, and conflicts are reported.
//
// Pools (docs/pools.md): a node's ids live in a pool. A Neuron node is its own private pool; the
// nodes of an IPU-POD share one pool (NodeInfo::pool), so ids taken through one of them are gone
// for all. A hold in a shared pool outlives the node it was taken through.
//
// Thread safety: every public method may be called from any thread. Queries take a shared lock,
// changes an exclusive one (mu_, annotated for clang's -Wthread-safety: base/mutex.h). No I/O and
// no clock: callers pass "now" and deadlines in nanoseconds of whatever clock they use (a virtual
// one in the simulator).
//
// One class over several files: tracker.cc (nodes, fit and rank, demand and supply, stats),
// holds.cc (the hold state machine), fitting.{h,cc} (multi-container fitting, pure),
// preemption.cc, rebuild.cc (rebuild, adopt), gangs.cc (all-or-nothing gang seats in whole
// node groups; their per-gang state in gang_seats.h) and views.cc (read-only views for operators).
#ifndef TOPOSCHED_TRACKER_TRACKER_H_
#define TOPOSCHED_TRACKER_TRACKER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "base/mutex.h"
#include "base/result.h"
#include "topology/allocator.h"
#include "topology/catalog.h"
#include "topology/demand.h"
#include "topology/pools.h"
#include "topology/queue.h"

namespace toposched::tracker {

using topology::Placement;
using topology::Policy;
using topology::Request;
using topology::Unit;

struct ContainerRequest {
  std::string name;
  Request request;
  bool init = false;  // init containers run one at a time before the app containers
};

// What a pod asks for. Containers asking for none of our resources need not be listed.
struct PodSpec {
  std::string uid;   // identity; names can be reused, uids cannot
  std::string name;  // namespace/name, for messages
  std::vector<ContainerRequest> containers;
  // The gang the pod is a member of (GangRequest::id), or empty. Nodes a gang holds take only
  // its own members.
  std::string gang{};

  bool AsksForAnything() const;
};

struct ContainerAllocation {
  std::string container;
  Placement placement;
};

// Where a pod's ids are: one set per container that asked.
struct PodAllocation {
  std::string node;
  std::vector<ContainerAllocation> containers;
};

struct FitResult {
  bool fits = false;
  int score = 0;              // 1..10 when it fits
  double cost = 0;            // kScarcity: what the sets take from the expected demand (demand.h)
  std::string reason;         // when it does not
  bool unresolvable = false;  // no state of this node could ever satisfy the pod
  PodAllocation allocation;   // the ids it would get (when it fits)
};

// The node is member `index` (0..nodes-1) of group `id`, a set of `nodes` nodes that a
// multi-node job may span (an UltraServer, nodes == 4, or one of its halves, nodes == 2).
struct NodeGroup {
  int nodes = 0;
  std::string id;
  int index = -1;
  bool operator==(const NodeGroup&) const = default;
};

struct NodeInfo {
  std::string name;
  std::string instance_type;
  int lnc = 0;  // 0 = the type's default
  // A shared pool this node reaches (label toposched.io/ipu-pool); empty = its own devices.
  // Initialized so that {name, type, lnc} stays warning-free.
  std::string pool{};
  // The multi-node groups the node belongs to (none: it takes only 1-node gang members).
  std::vector<NodeGroup> groups{};
  // Its devices out of service (failed, as its node agent reports): never in a set chosen here,
  // and counted in no supply; the pods holding ids on them keep their holds until they leave.
  // Applies to the node's own devices (a shared pool's health is not reported per node).
  topology::DeviceMask out_of_service = 0;
};

// A gang: `size` pods that must be placed all at once, one per node, in `size / group_nodes`
// whole groups of `group_nodes` nodes (1: any nodes). Every member asks for what `member` asks
// for. Ranks 0..size-1 go to the chosen groups in group-id order, inside a group by its index.
struct GangRequest {
  std::string id;
  int size = 0;
  int group_nodes = 1;
  PodSpec member;
  // A gang some of whose members are bound already (after a restart, or after its reservation
  // ran out): the node of each rank, as recorded, and which ranks are bound (by pod uid). Only
  // the missing ranks are reserved, on their recorded nodes.
  std::vector<std::string> fixed_nodes{};
  std::unordered_map<int, std::string> bound{};
};

// One rank of a gang: its node, the pod seated there, and the ids held for it.
struct GangRank {
  std::string node;
  std::string member_uid;  // empty = no pod assigned yet
  bool bound = false;
  PodAllocation seat;  // the ids held for it (empty once bound)
};

// A gang's state in the tracker while any member is unbound.
struct GangState {
  std::string id;
  int size = 0;
  int group_nodes = 1;
  std::vector<GangRank> ranks;  // size() == size
  int64_t deadline_ns = 0;

  std::vector<std::string> Nodes() const;  // by rank
  // The rank the pod is seated at, or -1.
  int RankOf(std::string_view uid) const;
  int UnboundCount() const;
};

// A member's place in its gang.
struct GangSeat {
  int rank = -1;
  std::string node;
  PodAllocation allocation;  // the ids held for it
};

// What ExpireReservations released: single pods' reservations by uid, and gangs released whole
// by id. Each sorted.
struct Expired {
  std::vector<std::string> pods;
  std::vector<std::string> gangs;
  bool empty() const { return pods.empty() && gangs.empty(); }
};

// kReleasing: the pod is gone or its bind failed, but what was made for it (a partition) still
// exists, so its ids stay held until Forget.
enum class HoldState { kReserved, kCommitted, kReleasing };

struct Hold {
  std::string pod_name;
  PodAllocation allocation;
  HoldState state = HoldState::kReserved;
  int64_t deadline_ns = 0;  // kReserved only
  std::string pool;         // the shared pool the ids are in; empty = the node's own
  // Tracker::Generation() when the hold was taken, committed or last confirmed (Adopt): a relist
  // requested before that cannot prove its pod gone (RebuildScope::listed_at).
  uint64_t generation = 0;
  // Its node is not known (deleted, or not yet listed): the ids count nowhere until the node is
  // added, and then they are taken again before anything else can be (UpsertNode).
  bool parked = false;
};

// A pod's allocation as recorded on the pod (annotation), for Rebuild.
struct RecordedPod {
  std::string uid;
  std::string name;
  PodAllocation allocation;
};

struct RebuildProblem {
  std::string uid;
  std::string name;
  std::string node;
  std::vector<std::string> conflicting_uids;  // pods already holding some of its ids
  std::string message;
};

// What a relist proves (Rebuild). A relist merges into the holds, it does not replace them: a pod
// absent from the list is gone only if its hold predates the list.
struct RebuildScope {
  // Reservations (binds in flight) are kept, unless the listed pods now hold their ids.
  bool keep_reservations = true;
  // Generation() read before the list was requested. A committed hold the list does not record is
  // kept when it is newer than this (a bind committed, or a watch event adopted, after the list's
  // snapshot may be missing from it) and dropped otherwise (its pod is gone).
  uint64_t listed_at = 0;
  // The uids of every live pod the list shows, with or without a record (may be null). A hold
  // of a listed pod is never dropped: a list that shows the pod without its record predates its
  // bind.
  const std::unordered_set<std::string>* alive = nullptr;
};

struct RebuildReport {
  int applied = 0;
  int reservations_kept = 0;
  int newer_kept = 0;  // committed holds the list did not record, kept (see RebuildScope)
  int dropped = 0;     // committed holds the list proved gone
  int parked = 0;      // listed pods whose node is not known: held, parked until it is
  std::vector<RebuildProblem> problems;  // conflicts and invalid records; none were applied
};

struct NodeSnapshot {
  NodeInfo info;
  topology::NodeShape shape;
  topology::NodeUsage usage;
  std::vector<std::string> pod_uids;
};

// One hold on a node, as the fleet view shows it (views.cc).
struct HolderView {
  std::string uid;  // a pod's uid, or a gang seat's key
  std::string pod_name;
  bool gang_seat = false;  // ids held for a gang's member not yet bound
  HoldState state = HoldState::kReserved;
  std::vector<ContainerAllocation> containers;
};

// A node's whole state at one instant, for operators (the extender's fleet view).
struct NodeView {
  NodeInfo info;
  std::optional<topology::NodeShape> shape;  // nullopt when the type is unknown: `error` says why
  std::string error;
  topology::NodeUsage usage;        // its pool's: a shared pool shows what every head node took
  std::string gang;                 // the gang holding the node for its members, or empty
  std::vector<HolderView> holders;  // every hold on its ids, by uid
};

// How the policy orders the nodes a pod fits on: the one node it would choose, and a 0-10 score for
// each (what the extender's prioritize returns): 10 for the chosen node alone, 1-9 for the other
// nodes that fit (higher is closer to the choice), 0 for nodes that do not fit.
struct Ranking {
  std::vector<FitResult> fits;  // per node, in the order given; verdict, score and cost, no ids
  std::vector<int> scores;
  int best = -1;  // index into the nodes given; -1 when none fits
};

struct TrackerStats {
  int nodes = 0;
  int reserved = 0;
  int committed = 0;
  int releasing = 0;
  int gangs = 0;   // gangs holding seats
  int parked = 0;  // holds whose node is not known (counted in their state too)
};

class Tracker {
 public:
  // `pools` (may be null: no shared pools) must outlive the tracker.
  Tracker(const topology::Catalog& catalog, Policy policy,
          const topology::PoolSet* pools = nullptr);
  Tracker(const Tracker&) = delete;
  Tracker& operator=(const Tracker&) = delete;

  // Adds or updates a node. An unknown instance type is an error (and the node is kept, so that
  // Fit names the reason). Changing the type of a node that holds pods is refused. A node added
  // takes back the holds parked for it (RemoveNode, Adopt) in the same step, before any query can
  // see it free; a parked hold that no longer fits is dropped and named in the error. A node that
  // comes back with another type, LNC or pool while holds are parked for it keeps the shape they
  // were taken on until they are gone (as a node present all along does), and says so in the
  // error: its core ids would name other devices otherwise.
  Status UpsertNode(const NodeInfo& info) TS_EXCLUDES(mu_);
  // Drops the node. The holds on its own devices are parked, not dropped: a Node object deleted
  // and re-created (a kubelet re-registering) does not stop its pods, so their ids are taken
  // again when it comes back; they end when their pods are forgotten or a relist proves them
  // gone. Holds in a shared pool stay where they are (the pool outlives one head node).
  void RemoveNode(const std::string& name) TS_EXCLUDES(mu_);
  // The node as it was when removed, while holds taken on it are parked for it: the facts a
  // re-created Node object may not show yet (no LNC label, an ambiguous allocatable).
  std::optional<NodeInfo> DepartedNode(const std::string& name) const TS_EXCLUDES(mu_);

  // Would the pod fit on the node now (committed and reserved ids count as used)? Changes nothing.
  FitResult Fit(const PodSpec& pod, const std::string& node) const TS_EXCLUDES(mu_);
  // Fit for many nodes under one lock, in the order given.
  std::vector<FitResult> FitAll(const PodSpec& pod, std::span<const std::string> nodes) const
      TS_EXCLUDES(mu_);
  // The same, handing each result to `fn(index, result)` instead of collecting them. `fn` runs
  // under the tracker's shared lock: it must not call the tracker. A query for filter and
  // prioritize: the results carry fits, score and reason, but a one-container pod's
  // `allocation` is left empty (building the ids for every node is most of the cost).
  void ForEachFit(const PodSpec& pod, std::span<const std::string> nodes,
                  const std::function<void(size_t, FitResult&&)>& fn) const TS_EXCLUDES(mu_);
  // Orders the nodes by the tracker's policy (node order and names do not matter to kScarcity:
  // ties go to the fuller node, then by instance type and usage, and only nodes in the very same
  // state are told apart by their order). One shared lock for all of them.
  Ranking Rank(const PodSpec& pod, std::span<const std::string> nodes) const TS_EXCLUDES(mu_);
  // Counts the pod's requests into the expected demand kScarcity protects (call once per pod,
  // when it is first seen; retries must not count again).
  void ObserveDemand(const PodSpec& pod) TS_EXCLUDES(mu_);
  // The expected demand and the fleet's free slots for each of its classes (index-aligned).
  topology::DemandModel Demand() const TS_EXCLUDES(mu_);
  std::vector<int64_t> Supply() const TS_EXCLUDES(mu_);
  // Queue-aware admission (topology::HoldsBack) from the tracker's own counts, for the extender's
  // filter and the simulator alike: a waiting class fits now when the fleet has a free slot of it
  // (supply_; a class the demand model does not track counts as not fitting), and the free
  // devices are the fleet's free units. A few classes' lookups, no node scan.
  topology::HoldBack HoldsBack(const Request& request, int64_t waited_ns,
                               std::span<const topology::WaitingClass> waiting,
                               int64_t age_ns) const TS_EXCLUDES(mu_);
  // Would it fit if these pods were gone? Changes nothing.
  FitResult FitWithout(const PodSpec& pod, const std::string& node,
                       std::span<const std::string> gone_uids) const TS_EXCLUDES(mu_);
  // The fewest of `candidate_uids` (pods on `node`) whose removal lets the pod fit: an empty list
  // when it fits already, an error when even removing all of them is not enough. Changes nothing.
  Result<std::vector<std::string>> FewestVictims(const PodSpec& pod, const std::string& node,
                                                 std::span<const std::string> candidate_uids) const
      TS_EXCLUDES(mu_);

  // Chooses ids for the pod on the node and holds them until `deadline_ns`. Errors (state
  // unchanged) if the pod already holds ids or does not fit.
  Result<PodAllocation> Reserve(const PodSpec& pod, const std::string& node, int64_t deadline_ns)
      TS_EXCLUDES(mu_);
  // Holds exactly these ids (a bind that must write what was chosen elsewhere, e.g. a retry).
  Status ReserveExact(const std::string& uid, const std::string& pod_name,
                      const PodAllocation& allocation, int64_t deadline_ns) TS_EXCLUDES(mu_);
  // Makes a reservation permanent. Errors if the pod has no reservation.
  Status Commit(const std::string& uid) TS_EXCLUDES(mu_);
  // Releases a reservation (bind failed). Errors if the pod has no reservation.
  Status Rollback(const std::string& uid) TS_EXCLUDES(mu_);
  // Releases whatever the pod holds (it was deleted). Returns false if it held nothing.
  bool Forget(const std::string& uid) TS_EXCLUDES(mu_);
  // Releases reservations whose deadline is at or before now_ns, and gangs whose deadline passed
  // whole (ReleaseGang); says which.
  Expired ExpireReservations(int64_t now_ns) TS_EXCLUDES(mu_);
  // Keeps the pod's ids held after its pod is gone, until Forget: its partition is being removed.
  Status BeginRelease(const std::string& uid) TS_EXCLUDES(mu_);
  // Moves a reservation's deadline (a bind waiting on a provisioner).
  Status ExtendReservation(const std::string& uid, int64_t deadline_ns) TS_EXCLUDES(mu_);
  // Holds devices of a shared pool for something no pod owns (a partition found at restart that
  // is being removed), in state kReleasing under `uid`. Conflicts are refused, naming holders.
  Status HoldReleasing(const std::string& uid, const std::string& what, const std::string& pool,
                       const std::vector<int>& device_ids) TS_EXCLUDES(mu_);
  // Records a committed allocation made elsewhere (another replica, or before a restart).
  // Conflicts with existing holds are refused, naming the holders. On a node not known yet the
  // hold is parked until UpsertNode adds it.
  Status Adopt(const RecordedPod& pod) TS_EXCLUDES(mu_);

  // A counter that moves on every hold taken, committed or adopted; no clock. Read it before a
  // list is requested and pass it to Rebuild as RebuildScope::listed_at.
  uint64_t Generation() const TS_EXCLUDES(mu_);
  // Merges a relist into the holds. `pods` (the listed pods' records) replace what those pods
  // held (in order: on a conflict the earlier pod keeps the ids and the later one is reported
  // and not applied); holds the list does not record are kept or dropped as RebuildScope says,
  // and kept ones keep their ids ahead of the list (they are newer knowledge); holds being
  // released are always kept. Records on unknown nodes are parked.
  RebuildReport Rebuild(std::span<const RecordedPod> pods, const RebuildScope& scope)
      TS_EXCLUDES(mu_);
  // The list as the whole truth (a start, a test): every committed hold it does not record is
  // dropped. Reservations in flight are kept when `keep_reservations`, unless they now conflict.
  RebuildReport Rebuild(std::span<const RecordedPod> pods, bool keep_reservations) TS_EXCLUDES(mu_);

  // --- Gangs (gangs.cc): all-or-nothing placement of multi-node jobs. ---

  // Finds nodes for every missing member among `candidates` (for a fixed gang: its recorded
  // nodes) and holds all of them at once until `deadline_ns`, or holds nothing and says what is
  // missing. Nodes a gang holds take no other pod. Errors if the gang is already held.
  Result<GangState> ReserveGang(const GangRequest& gang, std::span<const std::string> candidates,
                                int64_t deadline_ns) TS_EXCLUDES(mu_);
  std::optional<GangState> FindGang(const std::string& id) const TS_EXCLUDES(mu_);
  // Whether the gang holds seats (FindGang without the copy, for filter's hot path).
  bool HoldsGang(const std::string& id) const TS_EXCLUDES(mu_);
  // Gives the pod its rank in the held gang (the same one on every call): `wanted` when that rank
  // is free, else the lowest free one. Moves the gang's deadline to `deadline_ns` if later (a
  // member arriving is progress).
  Result<GangSeat> SeatGangMember(const std::string& id, const std::string& uid, int wanted,
                                  int64_t deadline_ns) TS_EXCLUDES(mu_);
  // Moves the gang's deadline to at least `deadline_ns` (a member's Binding being written).
  Status ExtendGang(const std::string& id, int64_t deadline_ns) TS_EXCLUDES(mu_);
  // The member's Binding is written: its rank's ids become the pod's committed hold. When the
  // last member is bound the gang's hold on its nodes ends.
  Result<PodAllocation> CommitGangMember(const std::string& id, const std::string& uid,
                                         const std::string& pod_name, const std::string& node)
      TS_EXCLUDES(mu_);
  // Releases a gang's unbound ranks whole; bound members keep their ids. False if not held.
  bool ReleaseGang(const std::string& id) TS_EXCLUDES(mu_);

  // Views of the named nodes (names it does not know are skipped), in the order given, under
  // one shared lock: each is consistent in itself. Callers batch a big fleet so that a bind's
  // exclusive lock never waits for the whole of it. Without `holders` the views leave
  // NodeView::holders empty (most of a view's cost: the fleet history needs only the usage).
  std::vector<NodeView> NodeViews(std::span<const std::string> names, bool holders = true) const
      TS_EXCLUDES(mu_);
  // What losing a free set of each expected class costs now (demand, supply and capacity read
  // together): the scarcity the scorer weighs.
  topology::SlotCosts Costs() const TS_EXCLUDES(mu_);
  std::optional<Hold> Find(const std::string& uid) const TS_EXCLUDES(mu_);
  std::optional<NodeSnapshot> Snapshot(const std::string& node) const TS_EXCLUDES(mu_);
  std::vector<std::string> NodeNames() const TS_EXCLUDES(mu_);
  // The shared pool the node reaches, or empty (its own devices, or unknown node).
  std::string PoolOf(const std::string& node) const TS_EXCLUDES(mu_);
  // The usage of a shared pool (nullopt if not defined).
  std::optional<topology::NodeUsage> PoolUsage(const std::string& pool) const TS_EXCLUDES(mu_);
  TrackerStats Stats() const TS_EXCLUDES(mu_);
  Policy policy() const { return policy_; }

 private:
  struct PoolState {
    std::optional<topology::NodeShape> shape;  // empty when the instance type is unknown
    std::string error;                         // why shape is empty
    topology::NodeUsage usage;
    std::vector<std::string> pods;  // uids holding ids here
    std::vector<int> slots;         // FreeSlots per demand class, counted into supply_
    int64_t free_units = 0;         // topology::FreeUnits, counted into free_units_
  };
  struct NodeEntry {
    NodeInfo info;
    PoolState own;
    PoolState* shared = nullptr;  // into shared_ (stable: never rehashed after construction)
    PoolState& pool() { return shared != nullptr ? *shared : own; }
    const PoolState& pool() const { return shared != nullptr ? *shared : own; }
    // What a hold taken through this node records as its pool (Hold::pool).
    std::string HoldPool() const { return shared != nullptr ? info.pool : std::string(); }
    std::string gang;  // the gang holding the node for its members, or empty
  };

  // Source files: tracker.cc (nodes, fit, rank, queries), fitting.cc (a pod's containers on one
  // node), preemption.cc, holds.cc (the hold state machine), rebuild.cc (rebuild, adopt).

  FitResult FitLocked(const PodSpec& pod, const NodeEntry& node, const topology::NodeUsage& usage,
                      bool with_ids = true, const topology::SlotCosts* costs = nullptr) const
      TS_REQUIRES_SHARED(mu_);
  topology::SlotCosts CostsLocked() const TS_REQUIRES_SHARED(mu_);
  // Keeps supply_ equal to the sum of every pool's slots: after any change to a pool's usage.
  void RecountLocked(PoolState& pool) TS_REQUIRES(mu_);
  void UncountLocked(PoolState& pool) TS_REQUIRES(mu_);
  void RecountAllLocked() TS_REQUIRES(mu_);
  // Marks the node's own devices out of service (NodeInfo::out_of_service) and recounts.
  void TakeOutOfServiceLocked(NodeEntry& node, topology::DeviceMask devices) TS_REQUIRES(mu_);
  const NodeEntry* FindNode(const std::string& name) const TS_REQUIRES_SHARED(mu_);
  void VisitFits(const PodSpec& pod, std::span<const std::string> nodes, bool with_ids,
                 const std::function<void(size_t, FitResult&&)>& fn) const TS_EXCLUDES(mu_);
  topology::NodeUsage UsageWithout(const NodeEntry& node, std::span<const std::string> uids) const
      TS_REQUIRES_SHARED(mu_);
  // Takes the ids or, on overlap, changes nothing and returns false.
  bool TakeLocked(PoolState& pool, const PodAllocation& allocation) TS_REQUIRES(mu_);
  void ReleaseLocked(PoolState& pool, const std::string& uid, const PodAllocation& allocation)
      TS_REQUIRES(mu_);
  // The pool a hold's ids are in; nullptr if its node is gone (private pools only).
  PoolState* PoolOfHold(const Hold& hold) TS_REQUIRES(mu_);
  // The one way a hold enters holds_: takes its ids from `pool` (already validated against it),
  // records `uid` as a holder there and in the index of its state. On overlap changes nothing
  // and returns false.
  bool InsertHoldLocked(PoolState& pool, const std::string& uid, Hold hold) TS_REQUIRES(mu_);
  // Holds `hold` for `uid` without taking ids anywhere: its node is not known. Replaces any hold
  // of `uid` already parked.
  void ParkLocked(const std::string& uid, Hold hold) TS_REQUIRES(mu_);
  // Takes the holds parked for the node back into its pool (a node just added); drops and names
  // the ones that do not fit.
  std::vector<std::string> UnparkLocked(NodeEntry& node) TS_REQUIRES(mu_);
  // Moves a held pod to kCommitted or kReleasing (no deadline), keeping the indexes in step.
  void SetStateLocked(const std::string& uid, Hold& hold, HoldState state) TS_REQUIRES(mu_);
  void EraseHoldLocked(std::unordered_map<std::string, Hold>::iterator it) TS_REQUIRES(mu_);
  std::vector<std::string> HoldersOverlapping(const PoolState& pool,
                                              const PodAllocation& allocation) const
      TS_REQUIRES_SHARED(mu_);
  Status ValidateAllocation(const PoolState& pool, const PodAllocation& allocation) const;
  // Why a pod may not use a node a gang holds, or empty when it may.
  // ReserveGang's steps: the nodes of each rank (the recorded ones, or the best whole groups
  // among the candidates), then a seat held on each for every unbound rank, or none.
  Result<std::vector<std::string>> ChooseGangNodesLocked(const GangRequest& request,
                                                         const PodSpec& member,
                                                         std::span<const std::string> candidates,
                                                         const topology::SlotCosts& costs) const
      TS_REQUIRES_SHARED(mu_);
  Status HoldGangSeatsLocked(const PodSpec& member, const topology::SlotCosts& costs,
                             GangState& gang) TS_REQUIRES(mu_);
  std::string GangBarrierLocked(const PodSpec& pod, const NodeEntry& node) const
      TS_REQUIRES_SHARED(mu_);
  void ReleaseGangLocked(const std::string& id) TS_REQUIRES(mu_);

  const topology::Catalog& catalog_;
  const Policy policy_;
  const topology::PoolSet* pools_;
  mutable SharedMutex mu_;
  // One state per defined shared pool, made at construction and never added to after (so
  // NodeEntry::shared stays valid; what it points at is guarded by mu_ too, which the analysis
  // cannot see through the pointer).
  std::unordered_map<std::string, PoolState> shared_ TS_GUARDED_BY(mu_);
  // Open addressing: filter looks up thousands of names per call, and the chained map's pointer
  // walks were a third of that. Entries move on rehash; no pointer into it outlives a lock.
  boost::unordered_flat_map<std::string, NodeEntry, std::hash<std::string>> nodes_
      TS_GUARDED_BY(mu_);
  std::unordered_map<std::string, Hold> holds_ TS_GUARDED_BY(mu_);
  // The uids of holds in the reserved state, so that Stats and expiry cost O(reservations),
  // not O(pods): bind reads the count on every call.
  std::unordered_set<std::string> reserved_uids_ TS_GUARDED_BY(mu_);
  std::unordered_set<std::string> releasing_uids_ TS_GUARDED_BY(mu_);
  // Node name -> the uids of the holds parked for it (Hold::parked).
  std::unordered_map<std::string, std::vector<std::string>> parked_ TS_GUARDED_BY(mu_);
  // Node name -> what it was when RemoveNode parked holds for it; kept while any are parked.
  std::unordered_map<std::string, NodeInfo> departed_ TS_GUARDED_BY(mu_);
  uint64_t generation_ TS_GUARDED_BY(mu_) = 0;
  // Gangs with unbound members; their unbound ranks' ids are holds named by GangSlotKey.
  std::unordered_map<std::string, GangState> gangs_ TS_GUARDED_BY(mu_);
  topology::DemandModel demand_ TS_GUARDED_BY(mu_);
  std::vector<int64_t> supply_ TS_GUARDED_BY(mu_);  // free slots fleet-wide per demand class
  int64_t free_units_ TS_GUARDED_BY(mu_) = 0;       // free capacity fleet-wide
  // Set while a rebuild puts every hold back: RecountLocked then does nothing, and the rebuild
  // recounts every pool once at its end (not once per pod: a first list holds a million).
  bool recount_deferred_ TS_GUARDED_BY(mu_) = false;
};

}  // namespace toposched::tracker

#endif  // TOPOSCHED_TRACKER_TRACKER_H_
