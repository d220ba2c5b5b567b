// The extender's logic, independent of HTTP: answers filter, prioritize, bind and preempt from
// the tracker, and keeps the tracker in step with the cluster (nodes and pods from informers, or
// from a file in offline mode). Thread-safe: HTTP threads and informer threads call it at once.
// Parts: query_verbs.cc (filter, prioritize, preempt), bind.cc (bind and its partition step),
// fleet_view.cc and fleet_sample.cc (the operators' views and the fleet history's sample),
// gangs.cc (multi-node gangs), cluster_sync.cc (nodes, pods, rebuild, partition reconciliation),
// node_facts.h.
//
// Lock order: ExtenderService::mu_ is a leaf, held only around the service's own maps, never
// while calling the tracker, the writer or PartitionSteps. PartitionSteps' lock comes before the
// tracker's (partition_steps.h). The clang build checks the annotations (-Wthread-safety).
#ifndef TOPOSCHED_EXTENDER_SERVICE_H_
#define TOPOSCHED_EXTENDER_SERVICE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/clock.h"
#include "base/mutex.h"
#include "base/result.h"
#include "claims/allocation_record.h"
#include "claims/keys.h"
#include "extender/fleet_history.h"
#include "extender/metrics.h"
#include "extender/node_facts.h"
#include "extender/partition_steps.h"
#include "extender/pod_requests.h"
#include "extender/protocol.h"
#include "kube/client.h"
#include "kube/objects.h"
#include "provision/service.h"
#include "topology/catalog.h"
#include "topology/pools.h"
#include "topology/queue.h"
#include "tracker/tracker.h"

namespace toposched::extender {

// Filter and bind refuse Neuron pods until the first sync is done: before the pods are listed,
// the tracker cannot know which ids running pods hold (e.g. a restart while pods arrive).
inline constexpr std::string_view kNotReadyReason =
    "toposched is starting: the nodes and pods are not yet listed from the API server; the pod "
    "will be retried";
// What a bind refused during shutdown answers.
inline constexpr std::string_view kShuttingDownReason =
    "this toposched extender is shutting down and starts no new bind; the pod will be retried "
    "against the next leader";

// Why filter refuses a node it does not offer (not_offered_): the DRA driver manages it, or its
// DRA claims (`dra_held`, the device plugin's claims::kLabelDraClaimsHeld) still hold devices.
std::string NotOfferedReason(std::string_view node, std::string_view dra_held);

struct FleetState;

// What the fleet view shows (fleet_view.cc; docs/observability.md).
struct FleetQuery {
  std::string node;           // only this node; empty = all
  std::string instance_type;  // only nodes of this type; empty = all
  // Pending pods whose reasons are worked out (each costs one filter over the fleet); the rest
  // are listed without them.
  int explain_pending = 10;
  // The page only (a browser slows past a few thousand drawn nodes): the nodes drawn, from the
  // `first_node`th (0-based, by name) on.
  int first_node = 0;
  int max_nodes = 500;
  int refresh_seconds = 30;  // the page reloads itself this often; 0: never
};

// Where bind writes go: the API server, or memory in offline mode.
class ClusterWriter {
 public:
  virtual ~ClusterWriter() = default;
  // Binds the pod to the node with these annotations in the same write (a Binding object).
  virtual Status Bind(const std::string& ns, const std::string& name, const std::string& uid,
                      const std::string& node,
                      const std::map<std::string, std::string>& annotations) = 0;
  // Bind with its outcome classified (kube::WriteOutcome): what the extender calls. The default
  // takes Bind's answer as definite (a writer whose failures are all "not applied").
  virtual kube::WriteResult BindWithOutcome(const std::string& ns, const std::string& name,
                                            const std::string& uid, const std::string& node,
                                            const std::map<std::string, std::string>& annotations) {
    Status s = Bind(ns, name, uid, node, annotations);
    if (s.ok()) return {};
    return {kube::WriteOutcome::kNotApplied, 0, s.error()};
  }
  // Reads the pod back after a write whose outcome is unknown: nullopt when it does not exist.
  // An error when it cannot be read (the truth is still unknown).
  virtual Result<std::optional<kube::Pod>> ReadPod(const std::string& ns, const std::string& name) {
    return Error{"pod " + ns + "/" + name + " cannot be read back: this writer has no API server"};
  }
  // The longest one Bind write can take (its client's connect and request timeouts): a bind's
  // reservation must outlive it, or a slow but successful write would leave the pod bound to ids
  // the tracker had already freed.
  virtual std::chrono::milliseconds MaxWriteTime() const { return {}; }
  // How long from now a Binding already answered with an unknown outcome (a 5xx, a cut
  // connection) may still land: shutdown waits it out before the Lease is released or the
  // process exits. Zero when none may.
  virtual std::chrono::milliseconds UnknownWritesSettleIn() const { return {}; }
  // Raises a Kubernetes Event on the pod; best effort.
  virtual void Event(const std::string& ns, const std::string& name, const std::string& uid,
                     std::string_view type, std::string_view reason, std::string_view message) = 0;
  // Sets a condition on the pod's status (kube::SetPodCondition).
  virtual Status SetCondition(const std::string& ns, const std::string& name,
                              const std::string& uid, const kube::PodCondition& condition) {
    (void)uid;
    return Error{"pod " + ns + "/" + name + ": this writer cannot set " + condition.type};
  }
  // Evicts the pod through the Eviction API (kube::EvictPod).
  virtual Status Evict(const std::string& ns, const std::string& name, const std::string& uid) {
    (void)uid;
    return Error{"pod " + ns + "/" + name + " cannot be evicted: this writer has no API server"};
  }
};

struct ExtenderOptions {
  ResourceNames resources;
  topology::Policy policy = topology::Policy::kScarcity;
  // How long a bind may hold ids before they are released if it never completes.
  std::chrono::milliseconds reservation_timeout{30000};
  // Shared pools (docs/pools.md); null = every node is its own pool. Must outlive the service.
  const topology::PoolSet* pools = nullptr;
  // Creates a partition for each bind into a shared pool; null = no provisioning step.
  // Must outlive the service.
  provision::Provisioner* provisioner = nullptr;
  // How often a partition removal that failed is retried in the background.
  std::chrono::milliseconds removal_retry{1000};
  // With leader election: ReconcilePartitions does nothing while this returns false, so a standby
  // never removes a partition the leader is making. Null: always reconcile.
  std::function<bool()> may_reconcile;
  // How long a gang's seats stay held without a new member arriving or binding: a gang whose
  // members do not all come is released whole (docs/ultraserver.md).
  std::chrono::milliseconds gang_timeout{120000};
  // What happens to a pod when a device it holds fails (--on-device-failure): it is always told
  // (an Event and a pod condition); with this set it is also evicted through the Eviction API,
  // which honours PodDisruptionBudgets (retried every eviction_retry while one blocks it).
  bool evict_on_device_failure = false;
  std::chrono::milliseconds eviction_retry{5000};
  // The size of a gang whose members carry none (GangMembership::size 0), read from the object
  // GangMembership::job_name names by its source: an MPIJob's Worker replicas, a PodGroup's or
  // a Workload pod group's gang minCount, where 0 means the group's policy is basic (its pods are
  // placed one by one, as single pods). Read once per gang while it has pods (WithGangSize).
  // Null, or an error, leaves the size unknown: the member is refused and retried.
  std::function<Result<int>(const std::string& ns, const claims::GangMembership& gang)> gang_size;
  // After a Binding whose outcome is unknown (a timeout, a 5xx), how long the write may still
  // land at the API server: the pod read back unbound is taken as "not applied" only after this
  // (kube-apiserver abandons a request after its --request-timeout, 60 s by default). Until then,
  // and for as long as the pod cannot be read, the ids stay held (docs/reliability.md).
  std::chrono::milliseconds unknown_write_settle{60000};
  // How often a read-back that found nothing definite is tried again (doubling up to 16 times
  // this).
  std::chrono::milliseconds read_back_retry{1000};
  // Checked as each bind begins: an error refuses it with that message (kube-scheduler retries
  // the pod) before any id is reserved or partition made. A lone extender closes it while its
  // previous process's Bindings may still land (LoneWriteFence). Null: open.
  std::function<Status()> bind_gate;
  // What filter passes for a pod that fits somewhere (--filter-answer): with best_only, the one
  // node the policy picks (the node prioritize scores 10), so kube-scheduler, left with a single
  // feasible node, skips its own scoring and the prioritize call; without, every node that fits,
  // for prioritize to rank among kube-scheduler's own scores. A pod that fits nowhere gets every
  // node's reason either way (docs/extender.md).
  bool filter_best_only = true;
  // Smaller pods first (--hold-back-hours; docs/extender.md, "Smaller pods first"): filter
  // refuses a pod while the pods waiting now of smaller classes that fit need the room its start
  // would take, until it has waited this long (from its creationTimestamp). Zero: off.
  std::chrono::seconds hold_back_age{0};
};

// The annotation the Binding carries: the partition made for the pod (claims/keys.h).
using claims::kAnnotationPartition;

class ExtenderService {
 public:
  // `steady_ns` times reservations; `wall_ns` stamps NEURON_ALLOC_TIME (Unix time).
  ExtenderService(const topology::Catalog& catalog, ExtenderOptions options, ClusterWriter& writer,
                  Metrics& metrics, NanoClock steady_ns, NanoClock wall_ns);

  // The four verbs: each returns the JSON body of a 200 answer.
  std::string Filter(const ExtenderArgs& args);
  std::string Prioritize(const ExtenderArgs& args);
  std::string Bind(const BindingArgs& args);
  std::string Preempt(const PreemptionArgs& args);

  // Shutdown, before the leader lease is released (docs/extender.md, "Leadership and fencing"):
  // from StopBinds() on every new bind is refused (kube-scheduler retries the pod); WaitForBinds
  // waits until the binds already running have returned or `timeout` has passed, and says
  // whether none is left.
  void StopBinds();
  bool WaitForBinds(std::chrono::milliseconds timeout);

  // Releases reservations whose bind never finished; call about once a second. Also reads back
  // the pods whose Binding's outcome is still unknown (ResolveUnknownBinds) first.
  void ExpireReservations();
  // Reads back each pod whose Binding's outcome is unknown and whose next try is due, and
  // commits, keeps or releases its ids from what the API server says. Returns how many are still
  // unknown.
  size_t ResolveUnknownBinds();

  // Cluster state, from the node and pod informers (or the offline file).
  void ReplaceNodes(const std::vector<kube::Node>& nodes);
  void UpsertNode(const kube::Node& node);
  void DeleteNode(const kube::Node& node);
  // A pod list is about to be requested (the informer's on_list_start): what the tracker holds
  // from now on is newer than the list, which therefore cannot prove it gone.
  void BeginPodList();
  // A full pod list: merges the pods' recorded allocations into the tracker (a relist removes
  // only the holds it proves gone: tracker::RebuildScope). Bound pods whose node is not known
  // yet are kept and adopted when it is (LearnNode). Takes the list and frees each pod once read:
  // at 1,000,000 pods the list, the state held and the state being built would otherwise be in
  // memory at once.
  void ReplacePods(std::vector<kube::Pod> pods);
  void UpsertPod(const kube::Pod& pod);
  void DeletePod(const kube::Pod& pod);

  // Restart reconciliation with the partition service (docs/pools.md): removes partitions no
  // live pod owns (their devices stay held until they are gone) and raises an Event on live pods
  // whose partition is missing. Runs after each pod list until it succeeds once; call it again
  // (about once a second) while it has not.
  Status ReconcilePartitions();
  // A new leader reconciles again before it is Ready: what a dead leader left half-made is
  // removed then. Does nothing without a provisioner.
  // It also tells the pods on failed devices again: a standby adopted them without writing, and
  // evictions a PodDisruptionBudget held back went with the old leader's memory.
  void RequireReconcile() {
    if (options_.provisioner != nullptr) partitions_synced_ = false;
    retell_failed_devices_ = true;
  }
  // Partition removals still in progress in the background.
  size_t PendingRemovals() const { return partitions_ ? partitions_->PendingRemovals() : 0; }

  // Ready once nodes and pods have been listed, the tracker rebuilt, and (with a provisioner)
  // the partition service's partitions reconciled.
  bool Ready() const { return nodes_synced_ && pods_synced_ && partitions_synced_; }
  void SetApiHealthy(bool healthy) { api_healthy_ = healthy; }
  bool ApiHealthy() const { return api_healthy_; }

  // Operators' views, JSON (fleet_view.cc; docs/observability.md): read-only, built from copies
  // taken in batches so that no lock is held across the whole fleet.
  std::string FleetView(const FleetQuery& query) const;
  // Per node, why the pod (namespace/name) is not placed there; an error when the extender does
  // not know the pod.
  Result<std::string> WhyPending(std::string_view pod_key) const;
  // The fleet page (fleet_page.cc): the same state drawn as HTML, each node as its topology, and
  // the last hours from `history` (oldest first); `highlight_pod` (namespace/name) is drawn in
  // colour and every other pod pale.
  std::string FleetPage(const FleetQuery& query, std::string_view highlight_pod,
                        std::span<const FleetSample> history = {}) const;
  // The fleet history's sample at `unix_seconds` (fleet_sample.cc; the caller's clock): nullopt
  // until the first sync is done.
  std::optional<FleetSample> SampleFleet(int64_t unix_seconds) const;

  const tracker::Tracker& tracker() const { return tracker_; }

 private:
  // What the fleet view and page show (fleet_state.h), read in batches of nodes.
  FleetState CollectFleet(const FleetQuery& query) const;
  // What a bind holds so far, for FailBind.
  struct BindAttempt {
    std::string uid;
    std::string key;  // namespace/name
    std::string node;
    std::string pool;  // the shared pool the node reaches, or empty
    bool reserved = false;
    std::string partition;  // named once the partition step starts
    PartitionMade made = PartitionMade::kNone;
  };

  // The closest kind (an index into kWhyKinds) any node gives `pod`: `views` and `names` are
  // index-aligned; `not_managed` nodes are handed to the DRA driver.
  size_t ClosestKind(const tracker::PodSpec& pod, std::span<const tracker::NodeView> views,
                     std::span<const std::string> names, int not_managed) const;

  // Bind, once StopBinds has not refused it (bind.cc).
  std::string RunBind(const BindingArgs& args);
  // The pod a bind is for, with its gang's size, or why the bind is refused before anything is
  // reserved (not ready, an earlier Binding's outcome unknown, an unknown or bound pod).
  Result<PodRequests> BindRequests(const BindingArgs& args, const std::string& key)
      TS_EXCLUDES(mu_);
  // A Binding whose outcome is unknown: what was written, kept until the pod is read back.
  struct UnknownBind {
    BindAttempt attempt;
    std::string ns;
    std::string name;
    std::map<std::string, std::string> annotations;  // as written: our record
    tracker::PodAllocation allocation;               // the ids reserved and written
    std::vector<std::string> resources;              // per container, for the allocation metric
    int64_t settle_ns = 0;    // from here on, "not bound" means the write was not applied
    int64_t next_try_ns = 0;  // the next read-back
    int tries = 0;
    bool resolving = false;  // a thread is reading it back
  };
  enum class Resolution { kCommitted, kReleased, kUnknown };

  // Requests of a pod seen by the watch or by filter (offline mode has only the latter).
  void RememberPod(PodRequests requests) TS_EXCLUDES(mu_);
  void ForgetPod(const std::string& uid) TS_EXCLUDES(mu_);
  // Keeps waiting_ in step: `delta` (+1, -1) for the pod's class if it waits (WaitingRequestOf).
  void CountWaitingLocked(const PodRequests& pod, int delta) TS_REQUIRES(mu_);
  // The pod in pods_ is bound to `node` now (it waits no more).
  void MarkBoundLocked(PodRequests& pod, const std::string& node) TS_REQUIRES(mu_);
  // Why filter lets smaller pods go first (options_.hold_back_age), or empty when the pod may go.
  std::string HoldBackReason(const PodRequests& pod) const TS_EXCLUDES(mu_);

  // Gangs (gangs.cc). `requests` with its gang's size filled in from the gang's object (read
  // through options_.gang_size only when `may_ask`, else only if read before), or as a single pod
  // when that object says the group is no gang. pods_ keeps the pod's own view (its identity and
  // gang_members_ entry); this is applied where a verb decides.
  PodRequests WithGangSize(PodRequests requests, bool may_ask) TS_EXCLUDES(mu_);
  // The member's seat, reserving the whole gang first if it is not held.
  Result<tracker::GangSeat> SeatGangMember(const PodRequests& member,
                                           std::span<const std::string> candidates)
      TS_EXCLUDES(mu_);
  std::string FilterGangMember(const PodRequests& member, const std::vector<std::string>& names,
                               FilterResult& result);
  // Filter with --filter-answer best: only the node the policy picks passes; when none fits,
  // `record` is given every node's verdict (not_offered: node -> its DRA claims' count).
  void FilterBest(
      const tracker::PodSpec& spec, const std::vector<std::string>& names,
      const std::unordered_map<std::string, std::string>& not_offered, FilterResult& result,
      const std::function<void(const std::string&, tracker::FitResult&&)>& record) const;
  std::string BindGangMember(const BindingArgs& args, const PodRequests& member);
  // What a gang's bound members recorded: their ranks and the nodes of all ranks.
  tracker::GangRequest GangRequestFor(const PodRequests& member, int size) const TS_EXCLUDES(mu_);
  // After a restart: holds the missing ranks of gangs whose members are partly bound.
  void RestoreGangs();
  // The annotations of a Binding that gives the pod `allocation` (kubelet's container order).
  std::map<std::string, std::string> BindingAnnotations(const PodRequests& requests,
                                                        const tracker::PodAllocation& allocation,
                                                        const std::string& node,
                                                        claims::AllocationRecord* record) const
      TS_EXCLUDES(mu_);
  void LearnNode(const kube::Node& node) TS_EXCLUDES(mu_);
  // Adopts the pods bound to `node` that were seen before it (unplaced_); call after its facts
  // are in nodes_ and before the tracker learns the node, which then takes their ids with it.
  void AdoptUnplaced(const std::string& node) TS_EXCLUDES(mu_);
  // Adopts again the live pods whose record conflicted with another hold (contested_): called
  // after ids are released, so that a record that could not be held (e.g. the device plugin's
  // toposched.io/granted, which is what the container really runs on) is held once the
  // conflicting hold is gone, instead of its ids staying free.
  void AdoptContested() TS_EXCLUDES(mu_);
  bool KnowsNode(const std::string& node) const TS_EXCLUDES(mu_);
  // What ReplacePods reads from a pod list before it touches any state.
  struct PodListScan {
    struct Invalid {
      std::string uid;
      std::string pod_key;
      std::string message;
    };
    std::unordered_set<std::string> alive;                  // uids of the pods not terminated
    std::unordered_map<std::string, PodRequests> requests;  // by uid, pods asking for ours
    std::vector<std::pair<int64_t, tracker::RecordedPod>> recorded;  // with allocation time
    std::unordered_map<std::string, std::pair<std::string, std::string>> annotated;
    std::unordered_map<std::string, std::string> listed;  // uid -> key, with partitions only
    std::unordered_map<std::string, std::unordered_map<std::string, kube::Pod>> unplaced;
    size_t unplaced_count = 0;
    std::vector<Invalid> invalid;  // pods whose allocation record cannot be read
    // Adds what a scan of the pods after this one's found, keeping the list's order.
    void Append(PodListScan&& later);
  };
  // Reads the pods into a scan, freeing each one once read (its place is left empty).
  PodListScan ScanPods(std::span<kube::Pod> pods) const TS_EXCLUDES(mu_);
  void ScanPod(const kube::Pod& pod, PodListScan& scan) const TS_EXCLUDES(mu_);
  // ScanPods over the whole list, a large one split between two threads.
  PodListScan ScanPodList(std::vector<kube::Pod>& pods) const TS_EXCLUDES(mu_);
  Result<tracker::RecordedPod> RecordedFromPod(const kube::Pod& pod) const TS_EXCLUDES(mu_);
  // The one way out of a bind that failed after its first checks: gives back what it held (the
  // reservation, the partition) and answers kube-scheduler with the reason.
  std::string FailBind(const BindAttempt& attempt, const std::string& message);
  // A bind into a shared pool: its partition made for the `reserved` devices, the reservation
  // stretched over the whole step. The bind's answer (after FailBind) when it could not be.
  std::optional<std::string> MakePartition(BindAttempt& attempt,
                                           const tracker::PodAllocation& reserved);
  // Writes the Binding `bind` describes and answers kube-scheduler: committed, failed (FailBind),
  // or of unknown outcome (read back once here, then kept in unknown_binds_ with its ids held).
  std::string WriteBinding(const BindingArgs& args, UnknownBind bind) TS_EXCLUDES(mu_);
  // After a successful Binding write: when `committed` failed, makes sure the tracker holds the
  // ids written (the watch may have adopted them already), or reports who holds them instead.
  void EnsureHeldAsWritten(const Status& committed, const std::string& uid, const std::string& key,
                           const tracker::PodAllocation& written);
  // Moves the pod's reservation deadline to at least `deadline_ns`: no step shortens one.
  Status ExtendHold(const std::string& uid, int64_t deadline_ns);
  // A Binding was written (or read back as written): commit the ids, note the pod bound.
  std::string FinishBind(const UnknownBind& bind);
  // Reads the pod of a Binding whose outcome is unknown back and acts on what it says.
  Resolution ResolveUnknownBind(UnknownBind& bind, std::string* message);
  // device_failures.cc: tells the pods holding ids on the node's devices that `failed` (an
  // Event and condition kConditionDevicesHealthy False, and with evict_on_device_failure an
  // eviction) or `recovered` (the condition True again, a pending eviction dropped).
  void TellPodsOnChangedDevices(const std::string& node, topology::DeviceMask failed,
                                topology::DeviceMask recovered, const std::string& why)
      TS_EXCLUDES(mu_);
  // Tells one holder on the node of `view` what TellPodsOnChangedDevices tells it: of the
  // `failed` devices its ids touch, else of the `recovered` ones once none of its devices is out.
  // Only the leader writes. True when it was told of failed devices (and, with
  // evict_on_device_failure, its eviction queued).
  bool TellHolder(const tracker::NodeView& view, const tracker::HolderView& holder,
                  topology::DeviceMask failed, topology::DeviceMask recovered,
                  const std::string& why) TS_EXCLUDES(mu_);
  // Node -> uids of records whose adoption is their pod's first hold on a node with devices out
  // of service.
  using FirstHolds = std::unordered_map<std::string, std::unordered_set<std::string>>;
  // Read before adopting `pods`: those the tracker holds nothing for yet, on nodes whose facts
  // have devices out of service. A pod adopted after its node was learned with failed devices
  // (after a restart) missed TellPodsOnChangedDevices.
  FirstHolds FirstHoldsOnFailedDevices(std::span<const tracker::RecordedPod> pods) const
      TS_EXCLUDES(mu_);
  // After adopting: tells each of `first` now held on devices its node has out of service
  // (TellHolder), once. Holds parked for a node the tracker does not know yet are told with the
  // node instead (TellPodsOnChangedDevices, when the node takes them back).
  void TellFirstHolds(const FirstHolds& first) TS_EXCLUDES(mu_);
  // A gang member on a failed device breaks its whole gang: the first such member of a gang
  // (uid) makes every other bound member hear of it (an Event kEventGangMemberDeviceFailed, the
  // condition False with kReasonGangMemberDeviceFailed, and with evict_on_device_failure an
  // eviction, so that the job's controller places the gang again whole). `what` says which
  // devices failed and why. Only when the pod was bound into a gang; the leader's writes only.
  void TellGangOfFailedMember(const std::string& uid, const std::string& pod_name,
                              const std::string& what) TS_EXCLUDES(mu_);
  // The member's devices are back: once no member of its gang is on a failed device, the others'
  // condition is True again and their pending evictions are dropped.
  void TellGangOfRecoveredMember(const std::string& uid) TS_EXCLUDES(mu_);
  // The gang id a pod was bound into (its gang record), or empty.
  std::string BoundGangOf(const std::string& uid) const TS_EXCLUDES(mu_);
  std::string BoundGangOfLocked(const std::string& uid) const TS_REQUIRES_SHARED(mu_);
  // The gang's bound members but `uid`: (uid, namespace/name), by name.
  std::vector<std::pair<std::string, std::string>> OtherBoundMembersLocked(
      const std::string& gang, const std::string& uid) const TS_REQUIRES_SHARED(mu_);
  // Tracker::Adopt, then TellFirstHolds for a hold the tracker did not have: the one way the
  // extender adopts a recorded hold (Rebuild reads FirstHoldsOnFailedDevices itself).
  Status AdoptHold(const tracker::RecordedPod& pod) TS_EXCLUDES(mu_);
  // Retries the evictions a PodDisruptionBudget (or a failed write) put off; from the tick.
  void RetryEvictions() TS_EXCLUDES(mu_);
  // Every pod holding a device now out of service is told (TellPodsOnChangedDevices per node):
  // what a new leader does once, when it may write.
  void TellAllOnFailedDevices() TS_EXCLUDES(mu_);
  void ReportProblem(const std::string& uid, const std::string& pod_key, std::string_view reason,
                     const std::string& message);
  // The steady clock `after` from now, in the tracker's nanoseconds: the one spelling of every
  // deadline the service sets.
  int64_t SteadyNsAfter(std::chrono::nanoseconds after) const {
    return steady_ns_() + after.count();
  }
  // How long a bind's reservation lives, a single pod's or a gang's seats alike: the operator's
  // --reservation-timeout plus the slowest Binding write the client allows, so that expiry never
  // frees ids a write still in flight is about to give the pod.
  int64_t BindReservationDeadline() const {
    return SteadyNsAfter(options_.reservation_timeout + writer_.MaxWriteTime());
  }

  const topology::Catalog& catalog_;
  const ExtenderOptions options_;
  ClusterWriter& writer_;
  Metrics& metrics_;
  NanoClock steady_ns_;
  NanoClock wall_ns_;
  tracker::Tracker tracker_;

  mutable SharedMutex mu_;
  std::unordered_map<std::string, NodeFacts> nodes_ TS_GUARDED_BY(mu_);
  std::unordered_map<std::string, PodRequests> pods_ TS_GUARDED_BY(mu_);  // by uid
  // The pods of pods_ waiting now, per request class (WaitingRequestOf; `fits` unused here):
  // what --hold-back-hours weighs, counted as pods come, bind and go so that filter reads a few
  // classes, not every pod.
  std::vector<topology::WaitingClass> waiting_ TS_GUARDED_BY(mu_);
  // Gang id -> the uids of its members in pods_.
  std::unordered_map<std::string, std::unordered_set<std::string>> gang_members_ TS_GUARDED_BY(mu_);
  // Gang id -> its size read through options_.gang_size (0: no gang), kept while gang_members_
  // has the id.
  std::unordered_map<std::string, int> gang_sizes_ TS_GUARDED_BY(mu_);
  // Bound pods whose node is not known (not yet listed, or deleted while they run): node ->
  // uid -> pod. Adopted into the tracker when the node is learned, before it can be used.
  std::unordered_map<std::string, std::unordered_map<std::string, kube::Pod>> unplaced_
      TS_GUARDED_BY(mu_);
  // Nodes not offered because the DRA driver hands out their devices, or its claims still hold
  // some (docs/dra.md, "Switching a node"). `facts`: what the node was when last offered, the
  // last known LNC when it comes back (its parked holds were taken at that shape); `dra_held`:
  // the device plugin's claims::kLabelDraClaimsHeld, for filter's reason.
  struct NotOffered {
    std::optional<NodeFacts> facts;
    std::string dra_held;
  };
  std::unordered_map<std::string, NotOffered> not_offered_ TS_GUARDED_BY(mu_);
  // Live bound pods whose record the tracker refused (AllocationConflict), by uid: the latest
  // version seen. Retried by AdoptContested.
  std::unordered_map<std::string, kube::Pod> contested_ TS_GUARDED_BY(mu_);
  // Pods to evict off failed devices (by uid): their namespace/name and the steady time of the
  // next try.
  struct PendingEviction {
    std::string pod;
    int64_t next_ns = 0;
  };
  std::unordered_map<std::string, PendingEviction> evictions_ TS_GUARDED_BY(mu_);
  // Gang id -> its bound members whose devices are out of service, while any is: the gang's
  // other members were told once (TellGangOfFailedMember).
  std::unordered_map<std::string, std::unordered_set<std::string>> gang_failures_
      TS_GUARDED_BY(mu_);
  // Live bound pods naming a partition (uid -> (namespace/name, partition)), for reconciliation.
  std::unordered_map<std::string, std::pair<std::string, std::string>> annotated_
      TS_GUARDED_BY(mu_);
  // With a provisioner: every live listed pod (uid -> namespace/name), whatever it asks for. A
  // partition's owner is alive while listed here, even when it asks no resource the current flags
  // manage (a renamed --device-resource): liveness never depends on the resource flags.
  std::unordered_map<std::string, std::string> listed_ TS_GUARDED_BY(mu_);
  // Binds whose Binding's outcome is not yet known, by uid (their ids stay held).
  std::unordered_map<std::string, UnknownBind> unknown_binds_ TS_GUARDED_BY(mu_);
  std::atomic<bool> nodes_synced_{false};
  std::atomic<bool> pods_synced_{false};
  // Set by RequireReconcile: the next tick that may write tells every pod on a failed device.
  std::atomic<bool> retell_failed_devices_{false};
  std::atomic<bool> api_healthy_{true};
  std::atomic<bool> partitions_synced_{true};
  // tracker_.Generation() when the pending pod list was requested (BeginPodList), else 0.
  std::atomic<uint64_t> pod_list_mark_{0};
  std::atomic<bool> pod_list_marked_{false};

  // Binds running, for the drain at shutdown.
  Mutex binds_mu_;
  CondVar binds_done_;
  int binds_in_flight_ TS_GUARDED_BY(binds_mu_) = 0;
  bool binds_stopped_ TS_GUARDED_BY(binds_mu_) = false;

  // The partition step of binds into shared pools; set when options_.provisioner is.
  std::unique_ptr<PartitionSteps> partitions_;
};

}  // namespace toposched::extender

#endif  // TOPOSCHED_EXTENDER_SERVICE_H_
