// A deterministic fault simulation of toposched's promise (issue 18): no Neuron device or core is
// given to two live containers, and no live pod's ids are free in the leading extender's tracker.
//
// The real code under test, driven synchronously by one seeded scheduler of events (no threads,
// no real time): two extender::ExtenderService instances (leader and standby, each with its own
// tracker and its own lagging pod watch), and per node the real deviceplugin::AllocationService
// behind a kubelet model (test/support/kubelet_model.h). Around them, models of what they talk
// to: the API server (pods, resourceVersions, an event log that watches and LISTs read),
// kube-scheduler (filter, then bind, retrying failed binds) and the binary's wiring
// (extender_command.cc: who leads, what a takeover does). Invariants are checked after every
// event, including events that happen while a Binding write is in flight.
//
// The DRA side (issue 29; kinds dra_claims and mode_switch): per node a model of kube-scheduler's
// DRA allocator over what the DRA plugin published, and the DRA plugin's prepare with its real
// checks (draplugin::CheckClaimFree over kubelet's PodResources, OverlapWithPrepared); prepared
// claims are listed by the kubelet model as dynamic_resources, which the real device plugin reads.
// Invariant (a) covers the grants, the records and the prepared claims.
//
// Replay a seed: TOPOSCHED_FAULT_SEED=N TOPOSCHED_FAULT_KINDS=kinds
//   ./build/test/fault_sim_test --gtest_filter=FaultSimTest.Replay
// (docs/reliability.md). The model follows the fixed interfaces: the writer's
// BindWithOutcome/ReadPod, kubelet's PodResources (KubeletView), the plugin's granted write-back,
// the fenced takeover and the informer's quorum relist.
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "claims/allocation_record.h"
#include "claims/annotations.h"
#include "claims/keys.h"
#include "claims/resources.h"
#include "deviceplugin/allocation.h"
#include "dra/offers.h"
#include "draplugin/node_holders.h"
#include "draplugin/prepare.h"
#include "extender/metrics.h"
#include "extender/protocol.h"
#include "extender/service.h"
#include "kube/objects.h"
#include "nodeagent/pod_resources.h"
#include "nodeagent/pod_source.h"
#include "support/every_verdict.h"
#include "support/kubelet_model.h"
#include "support/pods.h"
#include "topology/catalog.h"
#include "topology/id_ranges.h"

namespace toposched::faultsim {
namespace {

using nlohmann::json;
using topology::Unit;

constexpr char kNeuron[] = "aws.amazon.com/neuron";
constexpr char kCore[] = "aws.amazon.com/neuroncore";

// ---------------------------------------------------------------------------------------------
// Fault kinds: each can be switched on alone or together. Deletions, completions, concurrent binds
// (a bind running while another's Binding write is in flight) and kubelet admissions are always on.
enum class Fault {
  // Pod watch events reach each extender late, in batches, interleaved with binds: the watch
  // shows a Binding before or after the bind's own commit, and the standby trails the leader.
  kWatchDelay,
  // A pod watch ends with 410 Gone and the informer relists from a LIST served a few seconds old
  // (a lagging API server or watch cache): binds committed meanwhile are missing from it.
  kRelist,
  // A Binding's outcome is unknown to the extender: applied but answered 504; applied after the
  // client gave up (timeout); or a definite 500, not applied.
  kWriteUnknown,
  // The standby takes over the Lease (leader SIGTERMed or partitioned), sometimes while the old
  // leader's Binding is still in flight: that write lands after the takeover.
  kLeaderChange,
  // A Node object is deleted and re-added (kubelet re-registers) while its pods keep running.
  kNodeReadd,
  // kubelet admits pods in creation order, not in the order they were bound.
  kKubeletOrder,
  // kubelet sometimes takes its own lowest free ids instead of the plugin's preference (its
  // topology manager overrules it): the plugin grants them and writes toposched.io/granted. Not
  // in "all": the leader's books cannot know kubelet's choice before the annotation arrives
  // (docs/reliability.md, "The granted write-back's window").
  kKubeletChoice,
  // DRA claims beside extender pods (issue 29): inf-b is labelled
  // toposched.io/neuron-management=dra
  // once, early, while its pods run; kube-scheduler's DRA allocator allocates claims there from
  // what the DRA plugin published, the DRA plugin prepares them (the real checks) and they are
  // deleted. Not in "all", which keeps its seeds' runs.
  kDraClaims,
  // Nodes' labels flip to dra and back, again and again, while pods and claims run; the device
  // plugin labels a node toposched.io/dra-claims-held while claims still hold its devices.
  kModeSwitch,
};
constexpr std::array kAllFaults = {Fault::kWatchDelay,   Fault::kRelist,    Fault::kWriteUnknown,
                                   Fault::kLeaderChange, Fault::kNodeReadd, Fault::kKubeletOrder};
constexpr std::array kParsedFaults = {
    Fault::kWatchDelay,    Fault::kRelist,    Fault::kWriteUnknown,
    Fault::kLeaderChange,  Fault::kNodeReadd, Fault::kKubeletOrder,
    Fault::kKubeletChoice, Fault::kDraClaims, Fault::kModeSwitch};

std::string_view FaultName(Fault fault) {
  switch (fault) {
    case Fault::kWatchDelay:
      return "watch_delay";
    case Fault::kRelist:
      return "relist";
    case Fault::kWriteUnknown:
      return "write_unknown";
    case Fault::kLeaderChange:
      return "leader";
    case Fault::kNodeReadd:
      return "node_readd";
    case Fault::kKubeletOrder:
      return "kubelet_order";
    case Fault::kKubeletChoice:
      return "kubelet_choice";
    case Fault::kDraClaims:
      return "dra_claims";
    case Fault::kModeSwitch:
      return "mode_switch";
  }
  return "?";
}

std::string FaultList(const std::set<Fault>& faults) {
  std::string out;
  for (Fault f : faults) out += (out.empty() ? "" : ",") + std::string(FaultName(f));
  return out.empty() ? "none" : out;
}

// "all", "none", or names separated by commas.
Result<std::set<Fault>> ParseFaults(std::string_view text) {
  std::set<Fault> out;
  if (text == "none" || text.empty()) return out;
  if (text == "all") return std::set<Fault>(kAllFaults.begin(), kAllFaults.end());
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view name = text.substr(0, comma);
    bool known = false;
    for (Fault f : kParsedFaults) {
      if (FaultName(f) == name) {
        out.insert(f);
        known = true;
      }
    }
    if (!known) return Error{fmt::format("unknown fault kind '{}'", name)};
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

struct SimOptions {
  uint64_t seed = 1;
  std::set<Fault> faults;
  int steps = 150;
  // The binary's wiring around the service (src/cli/extender_command.cc), today's values. The
  // leader-fencing fix changes them: a new leader relists (quorum read) before its first bind,
  // and a leader drains its in-flight binds before it lets the Lease go.
  // Both on: the binary's wiring since the fix (TOPOSCHED_FAULT_FENCED=0 turns them off).
  bool takeover_relists = true;
  bool drain_before_handover = true;
  // (b) and (c) below: live pods' recorded ids, and live containers' granted ids, must be held in
  // the leader's tracker.
  bool check_tracker = true;
  bool check_grants_held = true;
  // (a) over the extender's records of live bound pods (off: (a) over the plugin's grants only).
  bool check_records = true;
  // Replay: print the step log as it happens (interleaved with the service's own log).
  bool log_to_stderr = false;
  // Planted defects, to show the checker catches what it claims to (FaultSimCheckTest).
  // kSpuriousDelete: on every tick the leader is told a live bound pod was deleted.
  // kSkipClaimFree: the DRA plugin prepares a claim without asking kubelet who holds its devices
  // (no draplugin::CheckClaimFree).
  // kNoDraLabel: the DRA plugin never labels its node toposched.io/dra-claims-held (the device
  // plugin's PodResources pass alone does, after the switch back).
  enum class Mutant { kNone, kSpuriousDelete, kSkipClaimFree, kNoDraLabel };
  Mutant mutant = Mutant::kNone;
};

struct SimResult {
  std::string violation;  // empty: the promise held for every step
  std::vector<std::string> log;
  int steps = 0;
  int binds_ok = 0;
  int admissions = 0;
  int window_binds = 0;  // binds that took ids in a granted write-back's window
  int claims_prepared = 0;
  int prepares_refused = 0;  // by the DRA plugin's real checks
  int mode_switches = 0;
};

// ---------------------------------------------------------------------------------------------
// The API server: the pods, a resourceVersion bumped on every change, and the log of changes that
// watches deliver and that LISTs at an older resourceVersion are rebuilt from.
class FakeApi {
 public:
  struct Event {
    int64_t rv = 0;
    kube::WatchEventType type = kube::WatchEventType::kAdded;
    kube::Pod pod;
  };

  int64_t rv() const { return rv_; }
  const std::vector<Event>& log() const { return log_; }
  const std::map<std::string, kube::Pod>& pods() const { return pods_; }
  const kube::Pod* Find(const std::string& uid) const {
    auto it = pods_.find(uid);
    return it == pods_.end() ? nullptr : &it->second;
  }
  const kube::Pod* FindByKey(const std::string& key) const {
    for (const auto& [uid, pod] : pods_) {
      if (pod.Key() == key) return &pod;
    }
    return nullptr;
  }

  void Create(kube::Pod pod) {
    const std::string uid = pod.uid;
    pods_[uid] = std::move(pod);
    Record(kube::WatchEventType::kAdded, uid);
  }
  // A Binding: 404 when the pod (by uid) is gone, 409 when it is bound already, else 201 and the
  // pod is bound with the Binding's annotations in the same write.
  int Bind(const std::string& uid, const std::string& node,
           const std::map<std::string, std::string>& annotations) {
    auto it = pods_.find(uid);
    if (it == pods_.end() || it->second.deleting) return 404;
    if (!it->second.node_name.empty()) return 409;
    it->second.node_name = node;
    for (const auto& [key, value] : annotations) it->second.annotations[key] = value;
    Record(kube::WatchEventType::kModified, uid);
    return 201;
  }
  Status Patch(const std::string& uid,
               const std::map<std::string, std::optional<std::string>>& changes) {
    auto it = pods_.find(uid);
    if (it == pods_.end()) return Error{"pods \"" + uid + "\" not found"};
    for (const auto& [key, value] : changes) {
      if (value) {
        it->second.annotations[key] = *value;
      } else {
        it->second.annotations.erase(key);
      }
    }
    Record(kube::WatchEventType::kModified, uid);
    return OkStatus();
  }
  void SetPhase(const std::string& uid, const std::string& phase) {
    auto it = pods_.find(uid);
    if (it == pods_.end() || it->second.phase == phase) return;
    it->second.phase = phase;
    Record(kube::WatchEventType::kModified, uid);
  }
  void Delete(const std::string& uid) {
    auto it = pods_.find(uid);
    if (it == pods_.end()) return;
    kube::Pod last = it->second;
    pods_.erase(it);
    ++rv_;
    last.resource_version = std::to_string(rv_);
    log_.push_back({rv_, kube::WatchEventType::kDeleted, std::move(last)});
  }
  // LIST as of resourceVersion `rv`.
  std::vector<kube::Pod> ListAt(int64_t rv) const {
    std::map<std::string, kube::Pod> state;
    for (const Event& e : log_) {
      if (e.rv > rv) break;
      if (e.type == kube::WatchEventType::kDeleted) {
        state.erase(e.pod.uid);
      } else {
        state[e.pod.uid] = e.pod;
      }
    }
    std::vector<kube::Pod> out;
    out.reserve(state.size());
    for (auto& [uid, pod] : state) out.push_back(std::move(pod));
    return out;
  }
  // The index in log() of the first event after resourceVersion `rv`.
  size_t FirstAfter(int64_t rv) const {
    size_t i = 0;
    while (i < log_.size() && log_[i].rv <= rv) ++i;
    return i;
  }

 private:
  void Record(kube::WatchEventType type, const std::string& uid) {
    ++rv_;
    kube::Pod& pod = pods_.at(uid);
    pod.resource_version = std::to_string(rv_);
    log_.push_back({rv_, type, pod});
  }

  int64_t rv_ = 0;
  std::map<std::string, kube::Pod> pods_;  // by uid
  std::vector<Event> log_;
};

bool Live(const kube::Pod& pod) { return !pod.deleting && !pod.Terminated(); }

// ---------------------------------------------------------------------------------------------
class Simulation {
 public:
  explicit Simulation(SimOptions options)
      : options_(std::move(options)), rng_(options_.seed), specs_(claims::ResourceSet{}.Specs()) {}

  SimResult Run() {
    Setup();
    for (step_ = 1; step_ <= options_.steps && result_.violation.empty(); ++step_) {
      now_ += Between(500, 1500) * kMs;
      ApplyDueWrites();
      ReaddDueNodes();
      DeliverDueNodeUpdates();
      if (!result_.violation.empty()) break;
      if (step_ == switch_step_) SwitchMode("inf-b");
      RunEvent(PickEvent(/*nested=*/false));
      if (!result_.violation.empty()) break;
      // Without the watch fault, each extender's pod watch catches up at the end of every step.
      if (!Has(Fault::kWatchDelay)) {
        for (size_t i = 0; i < instances_.size() && result_.violation.empty(); ++i) {
          DeliverWatch(i, SIZE_MAX);
        }
      }
      Check("end of step");
    }
    result_.steps = result_.violation.empty() ? step_ - 1 : step_;
    return std::move(result_);
  }

 private:
  static constexpr int64_t kMs = 1'000'000;
  static constexpr int64_t kWallBase = 1'764'000'000'000'000'000;  // 2025-11-24, Unix ns
  // The writer's longest write (its client's timeout): the service adds it to a reservation.
  static constexpr std::chrono::milliseconds kMaxWriteTime{10000};
  static constexpr int kMaxLivePods = 22;

  enum class EventKind {
    kCreatePod,
    kSchedule,
    kAdmit,
    kDeletePod,
    kCompletePod,
    kTick,
    kWatch,
    kRelist,
    kLeaderChange,
    kNodeDelete,
    kRecordGrants,
    kModeSwitch,
    kDraPublish,
    kDraAllocate,
    kDraPrepare,
    kDraDelete,
    kLabelPass,
  };

  // One extender replica: its service, the writer that is its API client, and its pod watch's
  // position in the API's event log.
  struct Instance;
  class Writer final : public extender::ClusterWriter {
   public:
    Writer(Simulation& sim, size_t index) : sim_(sim), index_(index) {}
    // The Binding classified as kube::ClassifyWrite does (ApiClusterWriter::BindWithOutcome).
    kube::WriteResult BindWithOutcome(
        const std::string& ns, const std::string& name, const std::string& uid,
        const std::string& node, const std::map<std::string, std::string>& annotations) override {
      return sim_.WriteBinding(index_, ns + "/" + name, uid, node, annotations);
    }
    Status Bind(const std::string& ns, const std::string& name, const std::string& uid,
                const std::string& node,
                const std::map<std::string, std::string>& annotations) override {
      return BindWithOutcome(ns, name, uid, node, annotations).ToStatus();
    }
    // The read-back after an unknown outcome: a GET of the pod, answered by the API model now.
    Result<std::optional<kube::Pod>> ReadPod(const std::string& ns,
                                             const std::string& name) override {
      const kube::Pod* pod = sim_.api_.FindByKey(ns + "/" + name);
      sim_.Log(fmt::format("{} reads back {}/{}: {}", sim_.instances_[index_].name, ns, name,
                           pod == nullptr           ? "not found"
                           : pod->node_name.empty() ? "not bound"
                                                    : "bound to " + pod->node_name));
      if (pod == nullptr) return std::optional<kube::Pod>();
      return std::optional<kube::Pod>(*pod);
    }
    std::chrono::milliseconds MaxWriteTime() const override { return kMaxWriteTime; }
    void Event(const std::string& ns, const std::string& name, const std::string&,
               std::string_view type, std::string_view reason, std::string_view message) override {
      sim_.Log(fmt::format("{} posts {} event {} on {}/{}: {}", sim_.instances_[index_].name, type,
                           reason, ns, name, message));
    }

   private:
    Simulation& sim_;
    size_t index_;
  };
  struct Instance {
    std::string name;
    std::unique_ptr<Writer> writer;
    std::unique_ptr<extender::Metrics> metrics;
    std::unique_ptr<extender::ExtenderService> service;
    size_t watch_next = 0;  // index into FakeApi::log() of the next event its pod watch delivers
  };

  // The device plugin's view of the pods bound to its node: the API itself (its informer cache
  // is not modelled lagging: the plugin already falls back to a fresh read when it lags). Its
  // writes go to the API model: annotation patches are seen by the extenders' watches like any
  // other change; Warning events and node labels are logged. kubelet's PodResources (every pod's
  // booked ids) is the KubeletModel, set with AllocationService::set_kubelet_view.
  class NodePods final : public nodeagent::PodSource {
   public:
    NodePods(Simulation& sim, FakeApi& api, std::string node)
        : sim_(sim), api_(api), node_(std::move(node)) {}
    Status PostWarning(const kube::Pod& pod, std::string_view reason,
                       std::string_view message) override {
      sim_.Log(fmt::format("device plugin on {} posts Warning {} on {}: {}", node_, reason,
                           pod.Key(), message));
      return OkStatus();
    }
    Status PatchNodeLabel(std::string_view key, const std::optional<std::string>& value) override {
      sim_.Log(fmt::format("device plugin on {} labels its node {}={}", node_, key,
                           value.value_or("(deleted)")));
      return OkStatus();
    }
    Result<std::vector<kube::Pod>> PodsOnNode() override {
      std::vector<kube::Pod> out;
      for (const auto& [uid, pod] : api_.pods()) {
        if (pod.node_name == node_) out.push_back(pod);
      }
      return out;
    }
    Status PatchAnnotations(
        const kube::Pod& pod,
        const std::map<std::string, std::optional<std::string>>& changes) override {
      return api_.Patch(pod.uid, changes);
    }

   private:
    Simulation& sim_;
    FakeApi& api_;
    std::string node_;
  };

  // A ResourceClaim kube-scheduler's DRA allocator allocated on a node, for one pod's container.
  struct DraClaim {
    std::string uid;
    std::string name;  // the claim's; its pod is "pod-" + name
    dra::Offer offer;
  };

  struct NodeState {
    kube::Node node;
    topology::NodeShape shape;
    bool present = true;  // the Node object exists in the API
    int64_t readd_at = 0;
    std::unique_ptr<NodePods> pods;
    std::unique_ptr<deviceplugin::AllocationService> plugin;
    std::unique_ptr<testing::KubeletModel> kubelet;
    std::set<std::string> rejected;  // pods kubelet refused to admit
    // The plugin granted ids its records do not say (set_on_grant_to_record): its pass over
    // PodResources (PlanRecordPatches) that writes toposched.io/granted is due.
    bool record_due = false;
    // The DRA side (kDraClaims, kModeSwitch). `dra`: the node is labelled for DRA in the API.
    bool dra = false;
    // The offers the DRA plugin last published (empty while no DRA plugin runs here).
    std::vector<dra::Offer> published;
    std::map<std::string, DraClaim> claims;                    // allocated here, by claim uid
    std::map<std::string, draplugin::PreparedClaim> prepared;  // the DRA plugin's checkpoint
    // toposched.io/dra-claims-held as each plugin process last wrote it (nullopt inside: removed;
    // unset: not written since that process started).
    std::optional<std::optional<std::string>> claims_held;  // the device plugin's
    std::optional<std::optional<std::string>> dra_label;    // the DRA plugin's
  };

  // A Binding the API server applies after its client gave up.
  struct LateWrite {
    int64_t due = 0;
    std::string key;
    std::string uid;
    std::string node;
    std::map<std::string, std::string> annotations;
  };

  bool Has(Fault f) const { return options_.faults.count(f) != 0; }
  uint64_t Uniform(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  int64_t Between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Uniform(static_cast<uint64_t>(hi - lo + 1)));
  }
  bool Chance(int percent) { return static_cast<int>(Uniform(100)) < percent; }

  void Log(const std::string& line) {
    std::string full = fmt::format("[{:3} t={:7.1f}s{}] {}", step_, static_cast<double>(now_) / 1e9,
                                   depth_ > 0 ? " in-write" : "", line);
    if (options_.log_to_stderr) std::cerr << full << '\n';
    result_.log.push_back(std::move(full));
  }

  // ---- setup ----------------------------------------------------------------------------------
  void Setup() {
    const topology::Catalog& catalog = topology::Catalog::Embedded();
    for (auto [name, type] :
         {std::pair{"inf-a", "inf2.24xlarge"}, std::pair{"inf-b", "inf2.24xlarge"},
          std::pair{"trn-a", "trn1.32xlarge"}}) {
      NodeState state;
      state.shape = *topology::NodeShape::Make(*catalog.Find(type));
      state.node.name = name;
      state.node.resource_version = "1";
      state.node.instance_type = type;
      state.node.allocatable[kNeuron] = state.shape.devices;
      state.node.allocatable[kCore] = state.shape.cores;
      state.pods = std::make_unique<NodePods>(*this, api_, name);
      state.plugin = std::make_unique<deviceplugin::AllocationService>(
          *state.pods, state.shape,
          deviceplugin::AllocatorOptions{name, nodeagent::CoreNumbering::kHost,
                                         claims::DefaultResources(kNeuron, kCore)});
      state.kubelet = std::make_unique<testing::KubeletModel>(
          name, *state.plugin, state.shape.devices, state.shape.cores);
      state.plugin->set_kubelet_view(state.kubelet.get());
      names_.push_back(name);
      auto [it, inserted] = nodes_.emplace(name, std::move(state));
      // The binary kicks its reconcile loop (DevicePluginManager::KickReconcile); here the pass
      // is an event of its own, so the watch can deliver and binds can run before it.
      it->second.plugin->set_on_grant_to_record(
          [this, node = std::string(name)](const std::string& /*pod*/) {
            nodes_.at(node).record_due = true;
          });
    }
    for (const char* name : {"A", "B"}) {
      Instance inst;
      inst.name = name;
      inst.writer = std::make_unique<Writer>(*this, instances_.size());
      inst.metrics = std::make_unique<extender::Metrics>();
      inst.service = MakeService(inst);
      instances_.push_back(std::move(inst));
    }
    for (Instance& inst : instances_) {
      inst.service->ReplaceNodes(PresentNodes());
      inst.service->ReplacePods({});
    }
    Log(
        fmt::format("seed {} faults {}: nodes inf-a, inf-b (inf2.24xlarge), trn-a "
                    "(trn1.32xlarge); extenders A (leader) and B (standby)",
                    options_.seed, FaultList(options_.faults)));
    for (int i = 0; i < 4; ++i) CreatePod();
    // dra_claims alone: inf-b moves to DRA once, early, with its pods running.
    if (Has(Fault::kDraClaims) && !Has(Fault::kModeSwitch)) {
      switch_step_ = static_cast<int>(Between(8, 30));
    }
  }

  std::unique_ptr<extender::ExtenderService> MakeService(Instance& inst) {
    // Every node that fits passes and the simulated scheduler picks one at random: safety must
    // hold whichever it picks (the policy's pick is one of them).
    extender::ExtenderOptions options = testing::EveryVerdict();
    options.reservation_timeout = std::chrono::milliseconds(30000);
    return std::make_unique<extender::ExtenderService>(
        topology::Catalog::Embedded(), options, *inst.writer, *inst.metrics,
        [this] { return now_; },
        // Strictly increasing: two binds never stamp the same NEURON_ALLOC_TIME, as on a real
        // clock with nanoseconds.
        [this] { return kWallBase + now_ + ++wall_reads_; });
  }

  std::vector<kube::Node> PresentNodes() const {
    std::vector<kube::Node> out;
    for (const auto& [name, state] : nodes_) {
      if (state.present) out.push_back(state.node);
    }
    return out;
  }

  // ---- the event scheduler --------------------------------------------------------------------
  EventKind PickEvent(bool nested) {
    std::vector<std::pair<EventKind, int>> weights;
    const int live = LivePods();
    if (!nested && live < kMaxLivePods) weights.emplace_back(EventKind::kCreatePod, 30);
    weights.emplace_back(EventKind::kSchedule, nested ? 20 : 50);
    weights.emplace_back(EventKind::kAdmit, 30);
    weights.emplace_back(EventKind::kDeletePod, live > 6 ? 14 : 4);
    weights.emplace_back(EventKind::kCompletePod, live > 6 ? 6 : 2);
    weights.emplace_back(EventKind::kTick, 15);
    if (Has(Fault::kWatchDelay)) weights.emplace_back(EventKind::kWatch, 35);
    // One relist at a time; no takeover while a list is under way (the new leader's own relist
    // would supersede it: kube::Informer::Relist).
    const bool relisting = relisting_ != SIZE_MAX;
    if (Has(Fault::kRelist) && !relisting) weights.emplace_back(EventKind::kRelist, 5);
    if (Has(Fault::kLeaderChange) && !relisting && (!nested || !options_.drain_before_handover)) {
      weights.emplace_back(EventKind::kLeaderChange, nested ? 6 : 4);
    }
    if (Has(Fault::kNodeReadd) && !nested) weights.emplace_back(EventKind::kNodeDelete, 3);
    for (const auto& [name, state] : nodes_) {
      if (state.record_due) {
        weights.emplace_back(EventKind::kRecordGrants, 30);
        break;
      }
    }
    if (Has(Fault::kModeSwitch) && !nested) weights.emplace_back(EventKind::kModeSwitch, 8);
    if (Has(Fault::kDraClaims) || Has(Fault::kModeSwitch)) {
      bool any_dra = false;
      bool any_claim = false;
      for (const auto& [name, state] : nodes_) {
        any_dra = any_dra || state.dra;
        any_claim = any_claim || !state.claims.empty();
      }
      if (any_dra) {
        weights.emplace_back(EventKind::kDraPublish, 12);
        weights.emplace_back(EventKind::kDraAllocate, 15);
        weights.emplace_back(EventKind::kDraPrepare, 20);
      }
      if (any_claim) weights.emplace_back(EventKind::kDraDelete, 8);
      weights.emplace_back(EventKind::kLabelPass, 8);
    }
    int total = 0;
    for (const auto& w : weights) total += w.second;
    int pick = static_cast<int>(Uniform(static_cast<uint64_t>(total)));
    for (const auto& [kind, weight] : weights) {
      if (pick < weight) return kind;
      pick -= weight;
    }
    return EventKind::kTick;
  }

  void RunEvent(EventKind kind) {
    switch (kind) {
      case EventKind::kCreatePod:
        CreatePod();
        break;
      case EventKind::kSchedule:
        ScheduleOne();
        break;
      case EventKind::kAdmit:
        AdmitOne();
        break;
      case EventKind::kDeletePod:
        EndPod(/*complete=*/false);
        break;
      case EventKind::kCompletePod:
        EndPod(/*complete=*/true);
        break;
      case EventKind::kTick:
        Tick();
        break;
      case EventKind::kWatch:
        DeliverWatch(Uniform(instances_.size()), static_cast<size_t>(Between(1, 4)));
        break;
      case EventKind::kRelist:
        Relist(Uniform(instances_.size()));
        break;
      case EventKind::kLeaderChange:
        ChangeLeader();
        break;
      case EventKind::kNodeDelete:
        DeleteNode();
        break;
      case EventKind::kRecordGrants:
        RecordGrants();
        break;
      case EventKind::kModeSwitch:
        SwitchMode(names_.empty() ? "" : names_[Uniform(names_.size())]);
        break;
      case EventKind::kDraPublish:
        DraPublish();
        break;
      case EventKind::kDraAllocate:
        DraAllocate();
        break;
      case EventKind::kDraPrepare:
        DraPrepare();
        break;
      case EventKind::kDraDelete:
        DraDelete();
        break;
      case EventKind::kLabelPass:
        LabelPass();
        break;
    }
  }

  int LivePods() const {
    int n = 0;
    for (const auto& [uid, pod] : api_.pods()) n += Live(pod) ? 1 : 0;
    return n;
  }

  // ---- events -----------------------------------------------------------------------------------

  // A user creates a pod asking for devices or cores (one container).
  void CreatePod() {
    const int n = ++pods_created_;
    static constexpr std::array kDeviceAsks = {1, 1, 1, 2, 2, 3, 4};
    static constexpr std::array kCoreAsks = {1, 1, 2, 2, 4};
    // One app container, or two (kubelet allocates each on its own, in order).
    std::vector<testing::ContainerAsk> asks;
    std::string what;
    for (const char* name : {"main", "side"}) {
      if (!asks.empty() && !Chance(15)) break;
      const bool cores = Chance(35);
      const int count =
          cores ? kCoreAsks[Uniform(kCoreAsks.size())] : kDeviceAsks[Uniform(kDeviceAsks.size())];
      asks.push_back({name, cores ? kCore : kNeuron, count});
      what +=
          fmt::format("{}{} {} {}", what.empty() ? "" : ", ", name, count, cores ? kCore : kNeuron);
    }
    kube::Pod pod = testing::MakePod(fmt::format("p{}", n), asks, {}, "");
    const int64_t seconds = (kWallBase + now_) / 1'000'000'000;
    pod.creation_timestamp =
        fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(static_cast<std::time_t>(seconds)));
    pod.scheduler_name = "toposched";
    created_order_[pod.uid] = n;
    Log(fmt::format("create {} asking for {}", pod.Key(), what));
    api_.Create(std::move(pod));
  }

  // kube-scheduler: one pending pod through filter (names-only, nodes that pass its own count
  // check) and bind on the leader. A pod whose bind answered an error is retried later, even if
  // the write was in fact applied (the scheduler's cache trails the API too).
  void ScheduleOne() {
    std::vector<std::string> pending;
    for (const auto& [uid, pod] : api_.pods()) {
      if (!Live(pod) || in_flight_.count(uid) != 0) continue;
      if (pod.node_name.empty() || retry_.count(uid) != 0) pending.push_back(uid);
    }
    if (pending.empty()) return;
    const std::string uid = pending[Uniform(pending.size())];
    retry_.erase(uid);
    kube::Pod pod = *api_.Find(uid);
    pod.node_name.clear();  // as the scheduler last saw it
    const size_t leader = leader_;
    extender::ExtenderService& service = *instances_[leader].service;
    extender::ExtenderArgs args;
    args.pod = pod;
    args.node_names = std::vector<std::string>();
    for (const auto& [name, state] : nodes_) {
      if (state.present && CountFits(name, pod)) args.node_names->push_back(name);
    }
    const json filtered = json::parse(service.Filter(args));
    std::vector<std::string> passed;
    if (filtered["NodeNames"].is_array()) {
      for (const auto& n : filtered["NodeNames"]) passed.push_back(n.get<std::string>());
    }
    if (passed.empty()) {
      Log(fmt::format("schedule {}: no node passes filter on {}", pod.Key(),
                      instances_[leader].name));
      return;
    }
    const std::string node = passed[Uniform(passed.size())];
    in_flight_.insert(uid);
    Log(fmt::format("schedule {}: bind to {} via {}", pod.Key(), node, instances_[leader].name));
    const json answer =
        json::parse(service.Bind(extender::BindingArgs{pod.name, pod.ns, pod.uid, node}));
    in_flight_.erase(uid);
    const std::string error = answer["Error"].get<std::string>();
    if (error.empty()) {
      ++result_.binds_ok;
      Log(fmt::format("bind {} to {} via {}: ok", pod.Key(), node, instances_[leader].name));
    } else {
      retry_.insert(uid);
      Log(fmt::format("bind {} to {} via {}: error: {}", pod.Key(), node, instances_[leader].name,
                      error));
    }
  }

  // kube-scheduler's own NodeResourcesFit: the extended-resource counts against allocatable.
  bool CountFits(const std::string& node, const kube::Pod& pod) const {
    const NodeState& state = nodes_.at(node);
    for (const auto& spec : claims::DefaultResources(kNeuron, kCore)) {
      int64_t used = 0;
      for (const auto& [uid, other] : api_.pods()) {
        if (other.node_name != node || !Live(other)) continue;
        for (const auto& c : other.containers) used += claims::AsksWithAliases(c, spec);
      }
      int64_t want = 0;
      for (const auto& c : pod.containers) want += claims::AsksWithAliases(c, spec);
      if (want > 0 && used + want > state.node.allocatable.at(spec.name)) return false;
    }
    return true;
  }

  // The Binding write, as the extender's API client makes it. The leader gate is checked once,
  // right before the write (ApiClusterWriter). While the write is in flight other events run
  // (the service's locks are not held across a write, so this is a legal interleaving of the
  // threaded service): watch deliveries, other binds, admissions, deletions, a takeover.
  kube::WriteResult WriteBinding(size_t index, const std::string& key, const std::string& uid,
                                 const std::string& node,
                                 const std::map<std::string, std::string>& annotations) {
    const Instance& inst = instances_[index];
    if (index != leader_) {
      // The fence refuses: the Binding is not sent.
      return {kube::WriteOutcome::kNotApplied, 0,
              "not bound: this extender lost the leader lease; the scheduler will retry the pod"};
    }
    enum class Outcome { kApplied, kApplied504, kNotApplied500, kAppliedLate };
    Outcome outcome = Outcome::kApplied;
    if (Has(Fault::kWriteUnknown)) {
      const int r = static_cast<int>(Uniform(100));
      outcome = r < 12   ? Outcome::kApplied504
                : r < 20 ? Outcome::kNotApplied500
                : r < 28 ? Outcome::kAppliedLate
                         : Outcome::kApplied;
    }
    const std::string ids = annotations.count(std::string(claims::kAnnotationNeuronIds)) != 0
                                ? annotations.at(std::string(claims::kAnnotationNeuronIds))
                                : "";
    Log(fmt::format("{} writes Binding {} -> {} ids {}", inst.name, key, node, ids));
    const bool nest = depth_ == 0;
    ++depth_;
    if (nest) RunNested(Between(0, 2));
    int code = 0;
    if (result_.violation.empty() &&
        (outcome == Outcome::kApplied || outcome == Outcome::kApplied504)) {
      code = api_.Bind(uid, node, annotations);
      Log(fmt::format("API applies Binding {} -> {}: {}", key, node, code));
      if (code == 201) NoteWindowBind(uid);
      Check("Binding applied");
    }
    if (nest) RunNested(Between(0, 2));
    now_ += Between(5, 300) * kMs;
    --depth_;
    // As kube::ClassifyWrite: 4xx is definite, 5xx and timeouts are unknown.
    if (code == 404) {
      return {kube::WriteOutcome::kNotApplied, 404, fmt::format("pods \"{}\" not found", key)};
    }
    if (code == 409) {
      return {kube::WriteOutcome::kNotApplied, 409,
              fmt::format("Operation cannot be fulfilled on pods/binding \"{}\": pod {} is "
                          "already assigned to a node",
                          key, key)};
    }
    switch (outcome) {
      case Outcome::kApplied:
        return {};
      case Outcome::kApplied504:
        Log(fmt::format("{}'s client gets 504 for Binding {} (it was applied)", inst.name, key));
        return {kube::WriteOutcome::kUnknown, 504,
                "the server was unable to return a response in the time allotted, but may "
                "still be processing the request (504)"};
      case Outcome::kNotApplied500:
        Log(fmt::format("{}'s client gets 500 for Binding {} (not applied)", inst.name, key));
        return {kube::WriteOutcome::kUnknown, 500, "Internal error occurred (500)"};
      case Outcome::kAppliedLate:
        late_.push_back({now_ + Between(100, 5000) * kMs, key, uid, node, annotations});
        Log(fmt::format("{}'s client times out on Binding {} (the API server applies it later)",
                        inst.name, key));
        return {kube::WriteOutcome::kUnknown, 0,
                fmt::format("Post binding: context deadline exceeded (Client.Timeout "
                            "exceeded while awaiting headers) after {} ms",
                            kMaxWriteTime.count())};
    }
    return {};
  }

  void RunNested(int64_t count) {
    for (int64_t i = 0; i < count && result_.violation.empty(); ++i) {
      RunEvent(PickEvent(/*nested=*/true));
      Check("in-write event");
    }
  }

  void ApplyDueWrites() {
    for (auto it = late_.begin(); it != late_.end() && result_.violation.empty();) {
      if (it->due > now_) {
        ++it;
        continue;
      }
      const int code = api_.Bind(it->uid, it->node, it->annotations);
      Log(fmt::format("API applies the late Binding {} -> {}: {}", it->key, it->node, code));
      if (code == 201) NoteWindowBind(it->uid);
      it = late_.erase(it);
      Check("late Binding applied");
    }
  }

  // kubelet on one node admits the next pod bound to it: the oldest by creation
  // (kKubeletOrder), else the oldest NEURON_ALLOC_TIME (the order the plugin assumes).
  void AdmitOne() {
    std::vector<std::string> names;
    for (const auto& [name, state] : nodes_) names.push_back(name);
    NodeState& state = nodes_.at(names[Uniform(names.size())]);
    const kube::Pod* next = nullptr;
    auto order = [&](const kube::Pod& pod) -> int64_t {
      if (Has(Fault::kKubeletOrder)) return created_order_.at(pod.uid);
      auto t = pod.annotations.find(std::string(claims::kAnnotationAllocTime));
      if (t == pod.annotations.end()) return INT64_MAX;
      auto parsed = claims::ParseAllocTime(t->second);
      return parsed.ok() ? *parsed : INT64_MAX;
    };
    for (const auto& [uid, pod] : api_.pods()) {
      if (pod.node_name != state.node.name || !Live(pod)) continue;
      if (state.kubelet->Admitted(uid) || state.rejected.count(uid) != 0) continue;
      if (next == nullptr || order(pod) < order(*next)) next = &pod;
    }
    if (next == nullptr) return;
    const kube::Pod pod = *next;
    // kubelet's own choice (kKubeletChoice): its topology manager, or a kubelet that does not ask
    // GetPreferredAllocation, takes the lowest free ids instead of the plugin's preference; the
    // plugin grants them and writes toposched.io/granted for the extender to adopt.
    const bool own_choice = Has(Fault::kKubeletChoice) && Chance(15);
    auto admitted = state.kubelet->Admit(pod, /*follow_preference=*/!own_choice);
    if (!admitted.ok()) {
      state.rejected.insert(pod.uid);
      Log(fmt::format("kubelet {} rejects {}: {}", state.node.name, pod.Key(), admitted.error()));
      api_.SetPhase(pod.uid, "Failed");
      return;
    }
    ++result_.admissions;
    std::string what;
    for (const auto& g : *admitted) {
      what += fmt::format(" {} {} (kubelet chose {})", g.resource,
                          topology::FormatIdRanges(g.granted_ids),
                          topology::FormatIdRanges(g.kubelet_ids));
    }
    Log(fmt::format("kubelet {} admits {}:{}", state.node.name, pod.Key(), what));
    api_.SetPhase(pod.uid, "Running");
  }

  // A pod is deleted (its containers stop), or completes (Succeeded).
  void EndPod(bool complete) {
    std::vector<std::string> candidates;
    for (const auto& [uid, pod] : api_.pods()) {
      if (!Live(pod)) continue;
      if (complete && pod.phase != "Running") continue;
      candidates.push_back(uid);
    }
    if (candidates.empty()) return;
    const std::string uid = candidates[Uniform(candidates.size())];
    const kube::Pod pod = *api_.Find(uid);
    if (!pod.node_name.empty()) nodes_.at(pod.node_name).kubelet->Remove(uid);
    if (complete) {
      Log(fmt::format("{} completes (Succeeded)", pod.Key()));
      api_.SetPhase(uid, "Succeeded");
    } else {
      Log(fmt::format("delete {}{}", pod.Key(),
                      pod.node_name.empty() ? " (pending)" : " on " + pod.node_name));
      api_.Delete(uid);
    }
  }

  // Time passes; the binary's once-a-second loop expires reservations on both replicas.
  void Tick() {
    now_ += Between(depth_ > 0 ? 100 : 1000, depth_ > 0 ? 1500 : 6000) * kMs;
    for (Instance& inst : instances_) inst.service->ExpireReservations();
    if (options_.mutant == SimOptions::Mutant::kSpuriousDelete) {
      for (const auto& [uid, pod] : api_.pods()) {
        if (pod.node_name.empty() || !Live(pod)) continue;
        Log(fmt::format("mutant: the leader forgets live {}", pod.Key()));
        instances_[leader_].service->DeletePod(pod);
        break;
      }
    }
  }

  // The pod informer delivers up to `count` events to the replica.
  void DeliverWatch(size_t index, size_t count) {
    if (index == relisting_) return;  // its watch ended; the list is under way
    Instance& inst = instances_[index];
    const auto& log = api_.log();
    size_t delivered = 0;
    while (inst.watch_next < log.size() && delivered < count && result_.violation.empty()) {
      const FakeApi::Event& e = log[inst.watch_next++];
      ++delivered;
      if (e.type == kube::WatchEventType::kDeleted) {
        inst.service->DeletePod(e.pod);
      } else {
        inst.service->UpsertPod(e.pod);
      }
      if (Has(Fault::kWatchDelay)) {
        Log(fmt::format("{}'s watch delivers rv {} {} {}{}", inst.name, e.rv,
                        e.type == kube::WatchEventType::kDeleted ? "DELETED" : "MODIFIED",
                        e.pod.Key(), e.pod.node_name.empty() ? "" : " on " + e.pod.node_name));
        Check("watch event delivered");
      }
    }
  }

  // The pod watch ends with 410 Gone; the informer relists (kube::Informer): it calls
  // on_list_start (BeginPodList) and sends the LIST, a quorum read (no resourceVersion, so
  // never older than the request: a LIST from a lagging watch cache is what the fixed informer no
  // longer asks for). The API server takes its snapshot some events later, and the answer reaches
  // the service some events after that: binds, commits, admissions and deletions run meanwhile,
  // and the list misses what was committed after its snapshot. The watch resumes from the list.
  void Relist(size_t index) {
    Instance& inst = instances_[index];
    relisting_ = index;
    Log(fmt::format("{}'s pod watch ends with 410 Gone; it sends a LIST", inst.name));
    inst.service->BeginPodList();
    RunNested(Between(0, 2));
    const int64_t at = api_.rv();
    std::vector<kube::Pod> list = api_.ListAt(at);
    Log(fmt::format("the API server answers {}'s LIST at rv {}: {} pods", inst.name, at,
                    list.size()));
    RunNested(Between(0, 2));
    relisting_ = SIZE_MAX;
    if (!result_.violation.empty()) return;
    Log(fmt::format("{} merges the list of rv {} (current {})", inst.name, at, api_.rv()));
    inst.service->ReplacePods(list);
    inst.watch_next = api_.FirstAfter(at);
  }

  // The standby takes the Lease. With the fenced wiring (src/cli/extender_command.cc): the old
  // leader is SIGTERMed, stops accepting binds (StopBinds), drains them (WaitForBinds: in this
  // synchronous model none is in flight, PickEvent does not nest a takeover into a write) and
  // releases the Lease; every Binding it sent was fenced by the API server's deadline
  // (?timeout=, the write's budget), so one applied after its client gave up has landed by then.
  // The old process restarts as the standby (a fresh service that lists, then watches). The new
  // leader lists afresh (Informer::Relist, a quorum read) before its first bind.
  void ChangeLeader() {
    const size_t old = leader_;
    if (options_.drain_before_handover) {
      instances_[old].service->StopBinds();
      if (!instances_[old].service->WaitForBinds(std::chrono::milliseconds(0))) {
        result_.violation = "the old leader still has binds in flight at the hand-over";
        return;
      }
      for (LateWrite& w : late_) w.due = now_;
      ApplyDueWrites();
      if (!result_.violation.empty()) return;
    }
    leader_ = 1 - leader_;
    Instance& inst = instances_[leader_];
    Log(fmt::format("{} takes over the Lease{}", inst.name,
                    depth_ > 0 ? " while the old leader's Binding is in flight" : ""));
    inst.service->RequireReconcile();
    if (options_.takeover_relists) {
      inst.service->BeginPodList();
      inst.service->ReplacePods(api_.ListAt(api_.rv()));
      inst.watch_next = api_.log().size();
    }
    if (options_.drain_before_handover) {
      Log(fmt::format("{} restarts as the standby", instances_[old].name));
      instances_[old].service = MakeService(instances_[old]);
      instances_[old].service->ReplaceNodes(PresentNodes());
      instances_[old].service->ReplacePods(api_.ListAt(api_.rv()));
      instances_[old].watch_next = api_.log().size();
    }
  }

  // The device plugin's pass over kubelet's PodResources on one node (RecordKubeletAssignments):
  // a pod whose containers kubelet booked other ids than its record says gets
  // toposched.io/granted, patched through the API (the extenders' watches deliver it).
  void RecordGrants() {
    for (auto& [name, state] : nodes_) {
      if (!state.record_due) continue;
      state.record_due = false;
      const nodeagent::RecordContext context{name, state.node.instance_type, &state.shape,
                                             state.plugin->options().resources};
      auto pods = state.pods->PodsOnNode();
      auto assigned = state.kubelet->List();
      if (!pods.ok() || !assigned.ok()) return;
      std::vector<std::string> warnings;
      for (const nodeagent::RecordPatch& patch :
           nodeagent::PlanRecordPatches(*pods, *assigned, context, kWallBase + now_, &warnings)) {
        const kube::Pod* pod = api_.FindByKey(patch.ns + "/" + patch.name);
        if (pod == nullptr) continue;
        Log(fmt::format("device plugin on {} records what {}/{} got: {}", name, patch.ns,
                        patch.name, patch.changes.begin()->second.value_or("")));
        const Status patched = api_.Patch(pod->uid, patch.changes);
        if (!patched.ok()) Log("patch failed: " + patched.error());
        granted_event_[pod->uid] = api_.log().size() - 1;
      }
      return;
    }
  }

  // A Node object is deleted; the kubelet re-registers it a few seconds later. Its pods keep
  // running. Both replicas' node watches see both events at once.
  void DeleteNode() {
    std::vector<std::string> present;
    for (const auto& [name, state] : nodes_) {
      if (state.present) present.push_back(name);
    }
    if (present.size() < 2) return;
    NodeState& state = nodes_.at(present[Uniform(present.size())]);
    state.present = false;
    state.readd_at = now_ + Between(2000, 10000) * kMs;
    Log(fmt::format("node {} is deleted (its pods keep running)", state.node.name));
    for (Instance& inst : instances_) inst.service->DeleteNode(state.node);
  }

  void ReaddDueNodes() {
    for (auto& [name, state] : nodes_) {
      if (state.present || state.readd_at > now_) continue;
      state.present = true;
      // kubelet registers the Node with its own labels (the management label among them, set
      // with --node-labels); a label a plugin wrote through the API is gone.
      const bool had_held = state.node.labels.erase(std::string(claims::kLabelDraClaimsHeld)) != 0;
      state.node.resource_version = std::to_string(++node_rv_);
      Log(fmt::format("node {} is re-added{}", name,
                      had_held ? " without its toposched.io/dra-claims-held label" : ""));
      for (Instance& inst : instances_) inst.service->UpsertNode(state.node);
      Check("node re-added");
    }
  }

  // ---- the DRA side (issue 29) -----------------------------------------------------------------

  // kubelet's PodResources on the node, as the DRA plugin's NodeHolders reads it (HoldersOf).
  draplugin::HolderView HoldersNow(NodeState& state) {
    draplugin::HolderView view;
    auto listed = state.kubelet->List();
    auto holders = listed.ok() ? draplugin::HoldersOf(state.shape, *listed)
                               : Result<std::vector<draplugin::Holder>>(Error{listed.error()});
    if (!holders.ok()) {
      view.checked = false;
      view.error = holders.error();
      view.withheld = state.shape.AllDevices();
      return view;
    }
    view.holders = std::move(*holders);
    for (const draplugin::Holder& h : view.holders) view.withheld |= h.devices;
    return view;
  }

  // The node's toposched.io/neuron-management label flips (an operator moves it between the device
  // plugin and DRA). The DaemonSets follow: the DRA plugin starts (it publishes at its first
  // DraPublish) or stops (its slices go; prepared claims stay prepared). The extenders' node
  // watches deliver the change a little later, each on its own.
  void SwitchMode(const std::string& name) {
    if (name.empty()) return;
    NodeState& state = nodes_.at(name);
    state.dra = !state.dra;
    ++result_.mode_switches;
    if (state.dra) {
      state.node.labels[std::string(claims::kLabelNeuronManagement)] =
          std::string(claims::kNeuronManagementDra);
    } else {
      state.node.labels.erase(std::string(claims::kLabelNeuronManagement));
      state.published.clear();
    }
    // The plugin of the old mode stops; the new one starts with no memory of the label.
    state.claims_held.reset();
    state.dra_label.reset();
    Log(fmt::format("node {} is labelled {}", name,
                    state.dra ? "toposched.io/neuron-management=dra"
                              : "toposched.io/neuron-management- (back to the device plugin)"));
    NodeChanged(name);
    // The DRA plugin's Start: the label follows the claims its checkpoint holds.
    if (state.dra) DraSyncLabel(state, /*starting=*/true);
  }

  // toposched.io/dra-claims-held written on the node (nullopt: removed) by `who`.
  void WriteClaimsHeld(NodeState& state, const std::optional<std::string>& value,
                       std::string_view who) {
    const auto it = state.node.labels.find(claims::kLabelDraClaimsHeld);
    if (value ==
        (it == state.node.labels.end() ? std::nullopt : std::optional<std::string>(it->second))) {
      return;  // an unchanged merge-patch changes nothing
    }
    if (value) {
      state.node.labels[std::string(claims::kLabelDraClaimsHeld)] = *value;
    } else {
      state.node.labels.erase(std::string(claims::kLabelDraClaimsHeld));
    }
    Log(fmt::format("{} on {} labels its node {}={}", who, state.node.name,
                    claims::kLabelDraClaimsHeld, value.value_or("(deleted)")));
    NodeChanged(state.node.name);
  }

  // The DRA plugin's SyncClaimsLabel (plugin.cc): the label appears or goes with its prepared
  // claims' holds (draplugin::ClaimsHeldValue).
  void DraSyncLabel(NodeState& state, bool starting) {
    if (options_.mutant == SimOptions::Mutant::kNoDraLabel) return;
    const std::optional<std::string> value = draplugin::ClaimsHeldValue(state.prepared);
    const bool appears_or_goes =
        !state.dra_label || state.dra_label->has_value() != value.has_value();
    if (!appears_or_goes && !(starting && *state.dra_label != value)) return;
    state.dra_label.emplace(value);
    WriteClaimsHeld(state, value, "DRA plugin");
  }

  void NodeChanged(const std::string& name) {
    NodeState& state = nodes_.at(name);
    state.node.resource_version = std::to_string(++node_rv_);
    for (size_t i = 0; i < instances_.size(); ++i) {
      node_updates_.push_back({now_ + Between(0, 3000) * kMs, i, name});
    }
  }

  void DeliverDueNodeUpdates() {
    for (auto it = node_updates_.begin(); it != node_updates_.end() && result_.violation.empty();) {
      if (it->due > now_) {
        ++it;
        continue;
      }
      const NodeState& state = nodes_.at(it->node);
      if (state.present) {
        Log(fmt::format("{}'s node watch delivers {} (labels: {})", instances_[it->index].name,
                        it->node, LabelsOf(state.node)));
        instances_[it->index].service->UpsertNode(state.node);
      }
      it = node_updates_.erase(it);
      Check("node update delivered");
    }
  }

  static std::string LabelsOf(const kube::Node& node) {
    std::string out;
    for (const auto& [key, value] : node.labels) {
      out += fmt::format("{}{}={}", out.empty() ? "" : ",", key, value);
    }
    return out.empty() ? "none" : out;
  }

  // The DRA plugin on a dra node publishes its offers: every legal choice, less the devices that
  // containers outside DRA hold (its NodeHolders view of kubelet's PodResources). Its health
  // loop also removes the dra-claims-held label once no prepared claim holds a device.
  void DraPublish() {
    std::vector<std::string> dra;
    for (const auto& [name, state] : nodes_) {
      if (state.dra) dra.push_back(name);
    }
    if (dra.empty()) return;
    NodeState& state = nodes_.at(dra[Uniform(dra.size())]);
    DraSyncLabel(state, /*starting=*/false);  // its health loop: the label goes once none holds
    const draplugin::HolderView view = HoldersNow(state);
    state.published =
        dra::LegalOffers(state.shape, dra::OfferScope::kDeviceSetsAndCores, view.withheld);
    Log(fmt::format("DRA plugin on {} publishes {} offers (withholds devices {:#x})",
                    state.node.name, state.published.size(), view.withheld));
  }

  // kube-scheduler's DRA allocator: a new claim gets one published offer that no allocated claim
  // on the node meets (its own books; shared counters make overlapping offers exclusive).
  void DraAllocate() {
    std::vector<std::string> dra;
    for (const auto& [name, state] : nodes_) {
      if (state.dra && !state.published.empty()) dra.push_back(name);
    }
    if (dra.empty()) return;
    NodeState& state = nodes_.at(dra[Uniform(dra.size())]);
    std::vector<const dra::Offer*> free;
    for (const dra::Offer& offer : state.published) {
      const draplugin::PhysicalUnits units = draplugin::PhysicalUnitsOf(state.shape, offer);
      bool taken = false;
      for (const auto& [uid, claim] : state.claims) {
        taken = taken || units.Meets(draplugin::PhysicalUnitsOf(state.shape, claim.offer));
      }
      if (!taken) free.push_back(&offer);
    }
    if (free.empty()) return;
    const int n = ++claims_created_;
    DraClaim claim{fmt::format("claim-uid-{}", n), fmt::format("c{}", n),
                   *free[Uniform(free.size())]};
    Log(fmt::format("DRA allocator allocates claim default/{} on {}: {}", claim.name,
                    state.node.name, claim.offer.name));
    state.claims.emplace(claim.uid, std::move(claim));
  }

  // kubelet asks the DRA plugin to prepare an allocated claim (its pod starts): the plugin's own
  // checks, the real functions (plugin.cc PrepareOne): nothing outside DRA holds it
  // (CheckClaimFree over kubelet's PodResources now) and no prepared claim meets it
  // (OverlapWithPrepared). A refusal leaves the claim allocated; kubelet retries it.
  void DraPrepare() {
    std::vector<std::pair<std::string, std::string>> due;  // node, claim uid
    for (const auto& [name, state] : nodes_) {
      if (!state.dra) continue;
      for (const auto& [uid, claim] : state.claims) {
        if (state.prepared.count(uid) == 0) due.emplace_back(name, uid);
      }
    }
    if (due.empty()) return;
    const auto& [name, uid] = due[Uniform(due.size())];
    NodeState& state = nodes_.at(name);
    const DraClaim& claim = state.claims.at(uid);
    draplugin::PreparedClaim prepared;
    prepared.uid = uid;
    prepared.ns = "default";
    prepared.name = claim.name;
    prepared.lnc = draplugin::NamesLnc(state.shape);
    prepared.instance_type = state.node.instance_type;
    draplugin::PreparedDevice device;
    device.device = claim.offer.name;
    device.pool = name;
    device.requests = {"neuron"};
    device.offer = claim.offer;
    device.units = draplugin::PhysicalUnitsOf(state.shape, claim.offer);
    prepared.devices.push_back(std::move(device));
    draplugin::SetHeldFromDevices(prepared);
    Status free = OkStatus();
    if (options_.mutant != SimOptions::Mutant::kSkipClaimFree) {
      free = draplugin::CheckClaimFree(state.shape, HoldersNow(state), prepared);
    }
    std::string refused = free.ok() ? "" : free.error();
    if (refused.empty()) {
      refused = draplugin::OverlapWithPrepared(*state.shape.type, prepared, state.prepared);
    }
    if (!refused.empty()) {
      ++result_.prepares_refused;
      Log(fmt::format("DRA plugin on {} refuses to prepare default/{}: {}", name, claim.name,
                      refused));
      return;
    }
    // PrepareOne: the node is marked before any claim holds a device.
    if (options_.mutant != SimOptions::Mutant::kNoDraLabel &&
        (!state.dra_label || !state.dra_label->has_value())) {
      const std::optional<std::string> value =
          draplugin::ClaimsHeldValue(state.prepared, &prepared);
      state.dra_label.emplace(value);
      WriteClaimsHeld(state, value, "DRA plugin");
    }
    ++result_.claims_prepared;
    Log(fmt::format("DRA plugin on {} prepares default/{} ({}); pod-{} runs", name, claim.name,
                    claim.offer.name, claim.name));
    state.kubelet->PrepareDra(
        uid, {"default",
              "pod-" + claim.name,
              "main",
              "",
              {},
              {{"default/" + claim.name, std::string(dra::kDriverName), name, claim.offer.name}}});
    state.prepared.emplace(uid, std::move(prepared));
  }

  // A claim's pod ends and the claim is deleted: kubelet unprepares it (on any node mode: the
  // checkpoint outlives the DRA plugin's pod) and the allocator frees it.
  void DraDelete() {
    std::vector<std::pair<std::string, std::string>> all;
    for (const auto& [name, state] : nodes_) {
      for (const auto& [uid, claim] : state.claims) all.emplace_back(name, uid);
    }
    if (all.empty()) return;
    const auto& [name, uid] = all[Uniform(all.size())];
    NodeState& state = nodes_.at(name);
    Log(fmt::format(
        "claim default/{} on {} is deleted{}", state.claims.at(uid).name, name,
        state.prepared.count(uid) != 0 ? " (its pod ends; kubelet unprepares it)" : ""));
    state.kubelet->UnprepareDra(uid);
    state.prepared.erase(uid);
    state.claims.erase(uid);
  }

  // The device plugin's PodResources pass on a node it runs on (DevicePluginManager::
  // PublishDraClaims): toposched.io/dra-claims-held=<devices> while kubelet lists claims of our
  // driver, removed when none is left.
  void LabelPass() {
    NodeState& state = nodes_.at(names_[Uniform(names_.size())]);
    if (state.dra) return;  // no device plugin runs there
    auto listed = state.kubelet->List();
    if (!listed.ok()) return;
    const auto holds = nodeagent::DraHolds(*listed, state.shape, state.node.name, nullptr);
    topology::DeviceMask devices = 0;
    for (const nodeagent::DraHold& hold : holds) devices |= hold.offer.placement.devices;
    const std::optional<std::string> value = nodeagent::DraClaimsHeldValue(devices);
    // Written at every pass while claims remain; the removal once.
    if (state.claims_held && *state.claims_held == value && !value) return;
    state.claims_held.emplace(value);
    WriteClaimsHeld(state, value, "device plugin");
  }

  // ---- invariants -------------------------------------------------------------------------------

  // The cores (node-wide ids) a set of ids covers.
  static std::vector<int> CoresOf(const topology::NodeShape& shape, Unit unit,
                                  const std::vector<int>& ids) {
    if (unit == Unit::kCore) return ids;
    std::vector<int> out;
    for (int d : ids) {
      for (int c = d * shape.cores_per_device; c < (d + 1) * shape.cores_per_device; ++c) {
        out.push_back(c);
      }
    }
    return out;
  }

  static std::string Describe(const topology::NodeShape& shape, int core) {
    return fmt::format("core {} (device {})", core, core / shape.cores_per_device);
  }

  // The allocation a live bound pod's annotations record, per container with its unit.
  struct RecordedIds {
    Unit unit;
    std::vector<int> ids;
    std::string container;
    std::string resource;
  };
  std::vector<RecordedIds> RecordOf(const kube::Pod& pod) {
    auto cached = records_.find(pod.uid);
    if (cached != records_.end() && cached->second.first == pod.resource_version) {
      return cached->second.second;
    }
    std::vector<RecordedIds> out;
    if (claims::HasAllocation(pod)) {
      auto record = claims::RecordFromPod(pod, specs_);
      if (record.ok()) {
        for (const auto& c : record->containers) {
          for (const auto& spec : specs_) {
            if (spec.Matches(c.resource)) {
              std::vector<int> ids = c.ids;
              std::sort(ids.begin(), ids.end());
              out.push_back({spec.unit, std::move(ids), c.container, spec.name});
            }
          }
        }
      }
    }
    records_[pod.uid] = {pod.resource_version, out};
    return out;
  }

  // The granted write-back's window (docs/reliability.md): kubelet gave a container other ids
  // than its pod's record says, and the leader does not know yet: the plugin has not written
  // toposched.io/granted, or the leader's watch has not delivered it. This is real: until then the
  // leader's books follow the record.
  bool WriteBackInFlight(const testing::KubeletModel::ContainerGrant& g) {
    const kube::Pod* pod = api_.Find(g.pod_uid);
    if (pod == nullptr) return false;
    bool recorded = false;
    for (const RecordedIds& r : RecordOf(*pod)) {
      if (r.container == g.container && r.resource == g.resource) {
        recorded = r.ids == g.granted_ids;
      }
    }
    if (!recorded) return true;
    auto patched = granted_event_.find(g.pod_uid);
    return patched != granted_event_.end() && patched->second >= instances_[leader_].watch_next;
  }

  // A Binding just applied: if its record overlaps ids a container on the node got from kubelet
  // while that container's write-back is in flight, the extender handed them out in the window.
  // The pod is then exempt from the book checks ((a) by records, (b)) until the plugin's answer
  // settles it: at its admission the plugin steers kubelet away from the held ids or refuses it
  // (no unit is given twice: (a) by grants stays strict), and its own write-back follows.
  void NoteWindowBind(const std::string& uid) {
    const kube::Pod* pod = api_.Find(uid);
    if (pod == nullptr || pod->node_name.empty()) return;
    const NodeState& state = nodes_.at(pod->node_name);
    std::set<int> cores;
    for (const RecordedIds& r : RecordOf(*pod)) {
      for (int c : CoresOf(state.shape, r.unit, r.ids)) cores.insert(c);
    }
    for (const auto& g : state.kubelet->running()) {
      if (g.pod_uid == uid || !WriteBackInFlight(g)) continue;
      for (int c : CoresOf(state.shape, g.unit, g.granted_ids)) {
        if (cores.count(c) == 0) continue;
        ++result_.window_binds;
        window_bound_.insert(uid);
        Log(
            fmt::format("{} is bound with {} (device {}), which {} container {} got from kubelet "
                        "while its granted write-back is in flight",
                        pod->Key(), Describe(state.shape, c), c / state.shape.cores_per_device,
                        g.pod_key, g.container));
        return;
      }
    }
  }

  // Exempt from the book checks: bound in the window, and not settled yet (not admitted, or its
  // own write-back in flight).
  bool InWindow(const kube::Pod& pod) {
    if (window_bound_.count(pod.uid) == 0) return false;
    const NodeState& state = nodes_.at(pod.node_name);
    if (!state.kubelet->Admitted(pod.uid)) return true;
    for (const auto& g : state.kubelet->Running(pod.uid)) {
      if (WriteBackInFlight(g)) return true;
    }
    window_bound_.erase(pod.uid);
    return false;
  }

  // The cores (node-wide, at the node's LNC) a prepared claim holds. The simulated types have no
  // LNC setting, so physical and logical cores are numbered alike.
  static std::vector<int> ClaimCores(const NodeState& state, const draplugin::PreparedClaim& c) {
    std::vector<int> out;
    for (int core = 0; core < state.shape.cores; ++core) {
      if (c.held.cores.test(static_cast<size_t>(core))) out.push_back(core);
    }
    return out;
  }

  // Admitted, and what its containers run with is what its record says.
  bool Settled(const NodeState& state, const kube::Pod& pod) {
    if (!state.kubelet->Admitted(pod.uid)) return false;
    for (const auto& g : state.kubelet->Running(pod.uid)) {
      if (WriteBackInFlight(g)) return false;
    }
    return true;
  }

  void Check(std::string_view when) {
    if (!result_.violation.empty()) return;
    std::string violation = FindViolation();
    if (violation.empty()) return;
    result_.violation = fmt::format("step {} ({}): {}", step_, when, violation);
    Log("VIOLATION: " + violation);
  }

  std::string FindViolation() {
    // (a) by the device plugin's grants: no core given to two live containers on a node.
    for (const auto& [name, state] : nodes_) {
      std::map<int, std::string> holder;
      for (const auto& g : state.kubelet->running()) {
        const std::string who = g.pod_key + " container " + g.container;
        for (int core : CoresOf(state.shape, g.unit, g.granted_ids)) {
          auto [it, inserted] = holder.emplace(core, who);
          if (!inserted && it->second != who) {
            return fmt::format(
                "(a) node {}: {} is granted to two live containers, {} and {} "
                "(the device plugin's grants)",
                name, Describe(state.shape, core), it->second, who);
          }
        }
      }
      // ... nor held by a prepared DRA claim besides (the DRA plugin's book, issue 29).
      for (const auto& [uid, claim] : state.prepared) {
        const std::string who = "DRA claim " + claim.Who();
        for (int core : ClaimCores(state, claim)) {
          auto [it, inserted] = holder.emplace(core, who);
          if (!inserted && it->second != who) {
            return fmt::format(
                "(a) node {}: {} is held by two live holders, {} and {} (the device plugin's "
                "grants and prepared DRA claims)",
                name, Describe(state.shape, core), it->second, who);
          }
        }
      }
    }
    // (a) by the extender's records of live bound pods, and the prepared claims. A pod not
    // settled yet (not admitted, or its granted write-back in flight) may be recorded on a
    // claim's units: it was placed in the moment before the label reached the extender, and the
    // device plugin's Allocate refuses or steers it (docs/dra.md, "Why it is safe live").
    std::map<std::string, std::map<int, std::string>> recorded;  // node -> core -> pod
    std::map<std::string, std::map<int, std::string>> claimed;   // node -> core -> claim
    for (const auto& [name, state] : nodes_) {
      for (const auto& [uid, claim] : state.prepared) {
        for (int core : ClaimCores(state, claim)) claimed[name][core] = claim.Who();
      }
    }
    for (const auto& [uid, pod] : api_.pods()) {
      if (pod.node_name.empty() || !Live(pod)) continue;
      const NodeState& state = nodes_.at(pod.node_name);
      // Records against claims is checked also when records against records is not (check_records
      // off): that gap is the granted write-back's window, which a settled pod is out of.
      const bool settled = Settled(state, pod);
      const bool by_records = options_.check_records && !InWindow(pod);
      if (!settled && !by_records) continue;
      for (const RecordedIds& r : RecordOf(pod)) {
        for (int core : CoresOf(state.shape, r.unit, r.ids)) {
          if (auto c = claimed[pod.node_name].find(core);
              settled && c != claimed[pod.node_name].end()) {
            return fmt::format(
                "(a) node {}: {} is recorded for live pod {} and held by DRA claim {} "
                "(records and prepared claims)",
                pod.node_name, Describe(state.shape, core), pod.Key(), c->second);
          }
          if (!by_records) continue;
          auto [it, inserted] = recorded[pod.node_name].emplace(core, pod.Key());
          if (!inserted && it->second != pod.Key()) {
            return fmt::format(
                "(a) node {}: {} is recorded for two live bound pods, {} and {} "
                "(the extender's allocation records)",
                pod.node_name, Describe(state.shape, core), it->second, pod.Key());
          }
        }
      }
    }
    // (b) no live bound pod's recorded ids are free in the leader's tracker; (c) nor the ids a
    // live container was granted. Nodes the tracker does not know (deleted) take no binds.
    if (!options_.check_tracker) return "";
    const Instance& leader = instances_[leader_];
    std::map<std::string, std::optional<tracker::NodeSnapshot>> snapshots;
    auto snapshot = [&](const std::string& node) -> const std::optional<tracker::NodeSnapshot>& {
      auto it = snapshots.find(node);
      if (it == snapshots.end()) {
        it = snapshots.emplace(node, leader.service->tracker().Snapshot(node)).first;
      }
      return it->second;
    };
    // The cores the records of pods bound in a window claim, per node: a pod whose record meets
    // them is contested with such a pod in the leader's tracker (AllocationConflict; the record
    // that came first is held) until that pod settles. Only the books are wrong meanwhile.
    std::map<std::string, std::set<int>> window_cores;
    for (const auto& [uid, pod] : api_.pods()) {
      if (pod.node_name.empty() || !Live(pod) || !InWindow(pod)) continue;
      const NodeState& state = nodes_.at(pod.node_name);
      for (const RecordedIds& r : RecordOf(pod)) {
        for (int c : CoresOf(state.shape, r.unit, r.ids)) window_cores[pod.node_name].insert(c);
      }
    }
    auto contested = [&](const kube::Pod& pod) {
      auto it = window_cores.find(pod.node_name);
      if (it == window_cores.end()) return false;
      const NodeState& state = nodes_.at(pod.node_name);
      for (const RecordedIds& r : RecordOf(pod)) {
        for (int c : CoresOf(state.shape, r.unit, r.ids)) {
          if (it->second.count(c) != 0) return true;
        }
      }
      return false;
    };
    for (const auto& [uid, pod] : api_.pods()) {
      if (pod.node_name.empty() || !Live(pod) || InWindow(pod) || contested(pod)) continue;
      // Its granted record is written but the leader's watch has not delivered it yet.
      if (auto patched = granted_event_.find(uid);
          patched != granted_event_.end() && patched->second >= leader.watch_next) {
        continue;
      }
      const auto& snap = snapshot(pod.node_name);
      if (!snap) continue;
      for (const RecordedIds& r : RecordOf(pod)) {
        for (int id : r.ids) {
          if (snap->usage.AllFree(snap->shape, r.unit, {id})) {
            return fmt::format(
                "(b) {} is bound to {} with {} {} {}, but {} (the leader)'s tracker has {} {} free",
                pod.Key(), pod.node_name, r.unit == Unit::kDevice ? "devices" : "cores",
                topology::FormatIdRanges(r.ids), pod.phase, leader.name,
                r.unit == Unit::kDevice ? "device" : "core", id);
          }
        }
      }
    }
    if (options_.check_grants_held) {
      for (const auto& [name, state] : nodes_) {
        const auto& snap = snapshot(name);
        if (!snap) continue;
        for (const auto& g : state.kubelet->running()) {
          if (WriteBackInFlight(g)) continue;  // the leader cannot know yet
          for (int id : g.granted_ids) {
            if (snap->usage.AllFree(snap->shape, g.unit, {id})) {
              return fmt::format(
                  "(c) {} container {} on {} runs with {} {}, but {} (the leader)'s tracker has "
                  "{} free",
                  g.pod_key, g.container, name, g.resource, topology::FormatIdRanges(g.granted_ids),
                  leader.name, id);
            }
          }
        }
      }
    }
    return "";
  }

  SimOptions options_;
  std::mt19937_64 rng_;
  std::vector<claims::ResourceSpec> specs_;
  FakeApi api_;
  std::map<std::string, NodeState> nodes_;
  std::vector<Instance> instances_;
  size_t leader_ = 0;
  int64_t now_ = 1'000'000'000;
  int step_ = 0;
  int depth_ = 0;                // > 0 while a Binding write is in flight
  size_t relisting_ = SIZE_MAX;  // the replica whose pod LIST is under way
  int pods_created_ = 0;
  int64_t wall_reads_ = 0;
  std::map<std::string, int> created_order_;
  std::set<std::string> in_flight_;
  std::set<std::string> retry_;
  std::vector<LateWrite> late_;
  std::map<std::string, std::pair<std::string, std::vector<RecordedIds>>> records_;
  std::map<std::string, size_t> granted_event_;  // pod uid -> log index of its last granted patch
  std::set<std::string> window_bound_;           // pods bound in a write-back window
  std::vector<std::string> names_;               // the nodes, in setup order
  int switch_step_ = -1;                         // dra_claims alone: the step inf-b moves to DRA
  int claims_created_ = 0;
  int64_t node_rv_ = 1;
  struct NodeUpdate {
    int64_t due = 0;
    size_t index = 0;  // the replica whose node watch delivers it
    std::string node;
  };
  std::vector<NodeUpdate> node_updates_;
  SimResult result_;
};

// ---------------------------------------------------------------------------------------------
// Running seeds.

std::optional<uint64_t> EnvNumber(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::strtoull(value, nullptr, 10);
}

std::string ReplayCommand(uint64_t seed, const std::set<Fault>& faults) {
  return fmt::format(
      "TOPOSCHED_FAULT_SEED={} TOPOSCHED_FAULT_KINDS={}{} ./build/test/fault_sim_test "
      "--gtest_filter=FaultSimTest.Replay",
      seed, FaultList(faults),
      EnvNumber("TOPOSCHED_FAULT_FENCED").value_or(1) == 0 ? " TOPOSCHED_FAULT_FENCED=0" : "");
}

struct SeedsOutcome {
  int seeds = 0;
  int failed = 0;
  uint64_t first_seed = 0;
  SimResult first;
};

// The options every run starts from: TOPOSCHED_FAULT_FENCED=1 gives the wiring of the
// leader-fencing fix (a takeover relists, a leader drains its binds before it lets the Lease go).
SimOptions BaseOptions() {
  SimOptions options;
  if (EnvNumber("TOPOSCHED_FAULT_FENCED").value_or(1) == 0) {
    options.takeover_relists = false;
    options.drain_before_handover = false;
  }
  return options;
}

// The checks of the mode-switch rows (FaultSimTest.ModeSwitch): no unit given twice.
SimOptions ModeSwitchOptions(std::set<Fault> faults) {
  SimOptions options = BaseOptions();
  options.faults = std::move(faults);
  options.check_tracker = false;
  options.check_records = false;
  return options;
}

SeedsOutcome RunSeeds(SimOptions options, int default_seeds) {
  SeedsOutcome out;
  out.seeds = static_cast<int>(EnvNumber("TOPOSCHED_FAULT_SEEDS").value_or(default_seeds));
  const uint64_t base = EnvNumber("TOPOSCHED_FAULT_SEED_BASE").value_or(1);
  for (int i = 0; i < out.seeds; ++i) {
    options.seed = base + static_cast<uint64_t>(i);
    SimResult result = Simulation(options).Run();
    if (result.violation.empty()) continue;
    if (++out.failed == 1) {
      out.first_seed = options.seed;
      out.first = std::move(result);
    }
  }
  return out;
}

void ExpectNoViolationWith(const SimOptions& options, int default_seeds) {
  const SeedsOutcome out = RunSeeds(options, default_seeds);
  if (out.failed == 0) return;
  std::string log;
  for (const std::string& line : out.first.log) log += line + "\n";
  ADD_FAILURE() << out.failed << " of " << out.seeds << " seeds broke the promise with faults "
                << FaultList(options.faults) << ". First: seed " << out.first_seed << ": "
                << out.first.violation
                << "\nreplay: " << ReplayCommand(out.first_seed, options.faults)
                << "\nstep log of seed " << out.first_seed << ":\n"
                << log;
}

void ExpectNoViolation(const std::set<Fault>& faults, int default_seeds) {
  SimOptions options = BaseOptions();
  options.faults = faults;
  ExpectNoViolationWith(options, default_seeds);
}

// The seeds each test runs in CI: each kind passed 2000 seeds (docs/reliability.md); 1500
// keep the whole file near 40 CPU-seconds in the release build (about 2.8 ms a seed). ASan+UBSan
// (about 90 ms a seed) runs 100. TOPOSCHED_FAULT_SEEDS overrides.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kSeeds = 100;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr int kSeeds = 100;
#else
constexpr int kSeeds = 1500;
#endif
#else
constexpr int kSeeds = 1500;
#endif

constexpr int kDraSeeds = kSeeds < 500 ? kSeeds : 500;
// Seeds of kModeSwitch whose run hits the switch-back window when the DRA plugin does not label
// its node (SimOptions::Mutant::kNoDraLabel).
constexpr std::array<uint64_t, 6> kSwitchBackWindowSeeds = {93, 123, 310, 325, 357, 494};

class FaultSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The services log every bind; the step log says what matters. Replay turns them back on.
    spdlog::set_level(spdlog::level::off);
  }
  void TearDown() override { spdlog::set_level(spdlog::level::info); }
};

// The checker itself can fail: planted defects are caught within a few seeds, with no fault on.
TEST_F(FaultSimTest, CheckerCatchesPlantedDefects) {
  // With the tracker checks off, the ids the leader forgot are given again: (a) catches it.
  for (auto [check_tracker, expected] : {std::pair{true, "(b) "}, std::pair{false, "(a) node"}}) {
    int caught = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      SimOptions options;
      options.seed = seed;
      options.mutant = SimOptions::Mutant::kSpuriousDelete;
      options.check_tracker = check_tracker;
      const SimResult result = Simulation(options).Run();
      if (result.violation.find(expected) != std::string::npos) ++caught;
    }
    EXPECT_GE(caught, 10) << expected;
  }
}

// The extended checker catches a DRA claim prepared over a device plugin's grant: the DRA
// plugin's prepare without CheckClaimFree (its published offers may be stale by then).
TEST_F(FaultSimTest, CheckerCatchesClaimOverGrant) {
  int caught = 0;
  int clean = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SimOptions options = ModeSwitchOptions({Fault::kModeSwitch});
    options.seed = seed;
    for (auto mutant : {SimOptions::Mutant::kSkipClaimFree, SimOptions::Mutant::kNone}) {
      options.mutant = mutant;
      const SimResult result = Simulation(options).Run();
      if (mutant == SimOptions::Mutant::kNone) {
        clean += result.violation.empty() ? 1 : 0;
      } else if (result.violation.find("prepared DRA claims") != std::string::npos ||
                 result.violation.find("records and prepared claims") != std::string::npos) {
        ++caught;
      }
    }
  }
  std::cout << fmt::format("claim-over-grant mutant caught in {} of 40 seeds\n", caught);
  EXPECT_GE(caught, 4);
  EXPECT_EQ(clean, 40);
}

// A seed is a replay: the same seed and faults give the same run, step for step.
TEST_F(FaultSimTest, SameSeedSameRun) {
  SimOptions options;
  options.seed = 7;
  options.faults = std::set<Fault>(kAllFaults.begin(), kAllFaults.end());
  options.check_tracker = false;  // run longer before the first violation
  const SimResult first = Simulation(options).Run();
  const SimResult second = Simulation(options).Run();
  EXPECT_GT(first.log.size(), 50u);
  EXPECT_EQ(first.log, second.log);
  EXPECT_EQ(first.violation, second.violation);
}

TEST(FaultSimCheckTest, ParseFaults) {
  auto all = ParseFaults("all");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), kAllFaults.size());
  auto some = ParseFaults("relist,leader");
  ASSERT_TRUE(some.ok()) << some.error();
  EXPECT_EQ(FaultList(*some), "relist,leader");
  EXPECT_FALSE(ParseFaults("relist,bogus").ok());
}

// Deletions, completions, concurrent binds and admissions, no fault.
TEST_F(FaultSimTest, NoFaults) { ExpectNoViolation({}, kSeeds); }

TEST_F(FaultSimTest, WatchDelay) { ExpectNoViolation({Fault::kWatchDelay}, kSeeds); }

// Leader changes with the wiring the leader-fencing fix gives the binary (a takeover relists, a
// leader drains its binds before it lets the Lease go), and lagging watches: the service itself
// keeps the promise then. Today's binary does neither (DISABLED_LeaderChange).
TEST_F(FaultSimTest, LeaderChangeWithFencedWiring) {
  SimOptions options = BaseOptions();
  options.faults = {Fault::kLeaderChange, Fault::kWatchDelay};
  options.takeover_relists = true;
  options.drain_before_handover = true;
  ExpectNoViolationWith(options, kSeeds);
}

// Failing on today's code (issue 18); rename without DISABLED_ as each fix lands. Run them with
// --gtest_also_run_disabled_tests.
TEST_F(FaultSimTest, Relist) { ExpectNoViolation({Fault::kRelist}, kSeeds); }
TEST_F(FaultSimTest, WriteUnknown) { ExpectNoViolation({Fault::kWriteUnknown}, kSeeds); }
TEST_F(FaultSimTest, LeaderChange) { ExpectNoViolation({Fault::kLeaderChange}, kSeeds); }
TEST_F(FaultSimTest, NodeReadd) { ExpectNoViolation({Fault::kNodeReadd}, kSeeds); }
TEST_F(FaultSimTest, KubeletOrder) { ExpectNoViolation({Fault::kKubeletOrder}, kSeeds); }
TEST_F(FaultSimTest, AllFaults) {
  ExpectNoViolation(std::set<Fault>(kAllFaults.begin(), kAllFaults.end()), kSeeds);
}
// Issue 29: DRA claims beside extender pods, and nodes switched between the device plugin and DRA
// both ways. Each step of these rows runs the DRA side's real checks over kubelet's whole list,
// so they run fewer seeds (kDraSeeds).
TEST_F(FaultSimTest, DraClaimsBesideExtenderPods) {
  ExpectNoViolation({Fault::kDraClaims}, kDraSeeds);
}
// A node switched back to the device plugin still carries toposched.io/dra-claims-held, which
// the DRA plugin wrote before its first claim held a device; the device plugin removes it only
// once its PodResources pass finds no claim. So the extender never offers the node while a claim
// holds a device, and the books hold: every settled pod's record, the plugin's grants and the
// prepared claims.
TEST_F(FaultSimTest, ModeSwitch) {
  ExpectNoViolationWith(ModeSwitchOptions({Fault::kModeSwitch}), kDraSeeds);
}
TEST_F(FaultSimTest, ModeSwitchWithNodeReaddAndWriteUnknown) {
  ExpectNoViolationWith(ModeSwitchOptions({Fault::kModeSwitch, Fault::kDraClaims, Fault::kNodeReadd,
                                           Fault::kWriteUnknown, Fault::kWatchDelay}),
                        kDraSeeds);
}
TEST_F(FaultSimTest, ModeSwitchBooks) { ExpectNoViolation({Fault::kModeSwitch}, kDraSeeds); }
// Without the DRA plugin's label the window is back: a node just switched back is offered before
// the device plugin's first pass, and a pod bound then is steered off a claim's units, or its
// record names them: the six seeds of 1–500 that failed ModeSwitchBooks before the DRA plugin
// labelled its node.
TEST_F(FaultSimTest, CheckerCatchesTheSwitchBackWindowWithoutTheDraLabel) {
  int caught = 0;
  for (uint64_t seed : kSwitchBackWindowSeeds) {
    SimOptions options = BaseOptions();
    options.faults = {Fault::kModeSwitch};
    options.seed = seed;
    options.mutant = SimOptions::Mutant::kNoDraLabel;
    if (!Simulation(options).Run().violation.empty()) ++caught;
    options.mutant = SimOptions::Mutant::kNone;
    EXPECT_EQ(Simulation(options).Run().violation, "") << "seed " << seed;
  }
  EXPECT_EQ(caught, static_cast<int>(kSwitchBackWindowSeeds.size()));
}
// Still failing (docs/reliability.md): the books, not the units. With (a) alone it fails too,
// on the extender's records (two live pods recorded on one core), never on the plugin's grants.
TEST_F(FaultSimTest, DISABLED_KubeletChoice) {
  ExpectNoViolation({Fault::kKubeletChoice, Fault::kKubeletOrder}, kSeeds);
}
// kubelet's own choice with check (a) by the plugin's grants only: no unit is given twice.
TEST_F(FaultSimTest, KubeletChoiceNoUnitGivenTwice) {
  SimOptions options = BaseOptions();
  options.faults = {Fault::kKubeletChoice, Fault::kKubeletOrder};
  options.check_tracker = false;
  options.check_records = false;
  ExpectNoViolationWith(options, kSeeds);
}

// For the report: per fault kind alone, how many seeds fail and the first failing seed, with
// every check, then with (a) alone (ids really given twice).
TEST_F(FaultSimTest, DISABLED_Survey) {
  std::vector<std::set<Fault>> sets = {{}};
  for (Fault f : kAllFaults) sets.push_back({f});
  sets.emplace_back(kAllFaults.begin(), kAllFaults.end());
  sets.push_back({Fault::kKubeletChoice, Fault::kKubeletOrder});
  for (bool only_a : {false, true}) {
    std::cout << (only_a ? "checks (a) only\n" : "checks (a), (b), (c)\n");
    for (const auto& faults : sets) {
      SimOptions options = BaseOptions();
      options.faults = faults;
      options.check_tracker = !only_a;
      const SeedsOutcome out = RunSeeds(options, kSeeds);
      std::cout << fmt::format("  {:14} {:5} of {} seeds fail", FaultList(faults), out.failed,
                               out.seeds);
      if (out.failed != 0) {
        std::cout << fmt::format("; first seed {}: {}", out.first_seed, out.first.violation);
      }
      std::cout << std::endl;
    }
  }
}

// For the report on issue 29: the DRA rows' fault sets, with every check, then with (a) alone
// (grants, records and prepared claims), each failing seed listed.
TEST_F(FaultSimTest, DISABLED_DraSurvey) {
  const std::vector<std::set<Fault>> sets = {
      {Fault::kDraClaims},
      {Fault::kModeSwitch},
      {Fault::kModeSwitch, Fault::kDraClaims, Fault::kNodeReadd, Fault::kWriteUnknown,
       Fault::kWatchDelay}};
  for (bool only_a : {false, true}) {
    for (const auto& faults : sets) {
      SimOptions options = BaseOptions();
      options.faults = faults;
      options.check_tracker = !only_a;
      const int seeds = static_cast<int>(EnvNumber("TOPOSCHED_FAULT_SEEDS").value_or(kDraSeeds));
      int failed = 0;
      int64_t prepared = 0, refused = 0, switches = 0, steps = 0;
      for (int i = 1; i <= seeds; ++i) {
        options.seed = static_cast<uint64_t>(i);
        const SimResult r = Simulation(options).Run();
        prepared += r.claims_prepared;
        refused += r.prepares_refused;
        switches += r.mode_switches;
        steps += r.steps;
        if (r.violation.empty()) continue;
        ++failed;
        std::cout << fmt::format("    seed {}: {}\n", i, r.violation);
      }
      std::cout << fmt::format(
                       "{} {}: {} of {} seeds fail; {} steps, {} claims prepared, {} prepares "
                       "refused, {} mode switches",
                       only_a ? "(a) only" : "all checks", FaultList(faults), failed, seeds, steps,
                       prepared, refused, switches)
                << std::endl;
    }
  }
}

// One seed, its step log printed as it runs with the services' own log:
// TOPOSCHED_FAULT_SEED=N TOPOSCHED_FAULT_KINDS=all|none|kind,kind ... --gtest_filter=...Replay
TEST_F(FaultSimTest, Replay) {
  const auto seed = EnvNumber("TOPOSCHED_FAULT_SEED");
  if (!seed) GTEST_SKIP() << "set TOPOSCHED_FAULT_SEED (and TOPOSCHED_FAULT_KINDS) to replay";
  const char* kinds = std::getenv("TOPOSCHED_FAULT_KINDS");
  auto faults = ParseFaults(kinds == nullptr ? "all" : kinds);
  ASSERT_TRUE(faults.ok()) << faults.error();
  spdlog::set_level(spdlog::level::info);
  SimOptions options = BaseOptions();
  options.seed = *seed;
  options.check_tracker = EnvNumber("TOPOSCHED_FAULT_ONLY_A").value_or(0) == 0;
  options.faults = *faults;
  options.log_to_stderr = true;
  if (auto steps = EnvNumber("TOPOSCHED_FAULT_STEPS")) options.steps = static_cast<int>(*steps);
  const SimResult result = Simulation(options).Run();
  EXPECT_EQ(result.violation, "") << ReplayCommand(*seed, *faults);
  std::cerr << fmt::format("{} steps, {} binds, {} admissions\n", result.steps, result.binds_ok,
                           result.admissions);
}

}  // namespace
}  // namespace toposched::faultsim
