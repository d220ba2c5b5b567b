// What the extender learns from the node and its device plugin (issue 18, items 1 and 5): the
// LNC only on positive evidence (the plugin's label, an unambiguous allocatable, else the last
// known value), the extender's node facts and the tracker's shape one and the same, and the
// truth of what a container got (toposched.io/granted, written by the plugin from kubelet's
// books) adopted over the bind-time record.
#include <algorithm>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "extender/offline.h"
#include "extender/protocol.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "kube/decode.h"
#include "support/pods.h"

namespace toposched::extender {
namespace {

using ::testing::ElementsAre;

constexpr char kLncLabel[] = "toposched.io/neuron-lnc";
constexpr char kGranted[] = "toposched.io/granted";

class NodeTruthTest : public ::testing::Test {
 protected:
  NodeTruthTest()
      : service_(
            topology::Catalog::Embedded(), ExtenderOptions{}, writer_, metrics_,
            [] { return int64_t{1'000'000'000}; }, [] { return int64_t{1743574052764891534}; }) {
    service_.ReplacePods({});
  }

  // A trn2.48xlarge node advertising `devices` devices and `cores` cores; `version` is its
  // resourceVersion (each update is a new one).
  static kube::Node Trn2(int devices, int cores, int version,
                         std::optional<std::string> lnc_label = std::nullopt) {
    auto node = kube::DecodeNode(testing::EksNodeJson("trn2-a", "trn2.48xlarge", devices, cores));
    EXPECT_TRUE(node.ok()) << node.error();
    node->resource_version = std::to_string(version);
    if (lnc_label) node->labels[kLncLabel] = *lnc_label;
    return *node;
  }

  int TrackerLnc() {
    auto snapshot = service_.tracker().Snapshot("trn2-a");
    return snapshot ? snapshot->info.lnc : -1;
  }

  // A record (allocation or granted) of container main holding `cores` on trn2-a.
  static std::string CoreRecord(const std::string& cores) {
    return R"({"node":"trn2-a","instanceType":"trn2.48xlarge","containers":[{"name":"main","resource":"aws.amazon.com/neuroncore","ids":[)" +
           cores + "]}]}";
  }

  static kube::Pod CorePod(const std::string& name, const std::string& cores) {
    kube::Pod pod =
        testing::MakePod(name, {{"main", "aws.amazon.com/neuroncore", 4}}, {}, "trn2-a");
    pod.phase = "Running";
    pod.annotations["toposched.io/allocation"] = CoreRecord(cores);
    pod.annotations["NEURON_ALLOC_TIME"] = "100";
    return pod;
  }

  // Filter's answer for a new pending pod asking for `cores` NeuronCores, on trn2-a.
  std::string Filter(const std::string& name, int cores) {
    simdjson::padded_string body(testing::NamesArgs(
        testing::PodJson(name, name + "-uid", "aws.amazon.com/neuroncore", cores), {"trn2-a"}));
    auto args = DecodeExtenderArgs(body);
    EXPECT_TRUE(args.ok()) << args.error();
    return service_.Filter(*args);
  }

  OfflineClusterWriter writer_;
  Metrics metrics_;
  ExtenderService service_;
};

// Before the fix any core count other than 64 or 128 meant LNC 2: after a kubelet restart (0) or
// with one device unhealthy (15 devices, 120 cores at LNC 1) an LNC 1 node became LNC 2, and the
// core ids of the next pods named other devices than the plugin serves.
TEST_F(NodeTruthTest, AmbiguousAllocatableKeepsTheLastKnownLnc) {
  service_.ReplaceNodes({Trn2(16, 128, 1)});
  ASSERT_EQ(TrackerLnc(), 1);
  service_.UpsertNode(Trn2(0, 0, 2));  // kubelet restarted: nothing advertised yet
  EXPECT_EQ(TrackerLnc(), 1);
  service_.UpsertNode(Trn2(15, 120, 3));  // one device unhealthy
  EXPECT_EQ(TrackerLnc(), 1);
  service_.UpsertNode(Trn2(16, 64, 4));  // the whole node at LNC 2: unambiguous
  EXPECT_EQ(TrackerLnc(), 2);
}

TEST_F(NodeTruthTest, TheDevicePluginsLabelWins) {
  service_.ReplaceNodes({Trn2(16, 64, 1, "1")});  // 64 cores would say LNC 2
  EXPECT_EQ(TrackerLnc(), 1);
  service_.UpsertNode(Trn2(0, 0, 2, "1"));
  EXPECT_EQ(TrackerLnc(), 1);
  service_.UpsertNode(Trn2(16, 64, 3, "not-a-number"));  // a bad label is no evidence
  EXPECT_EQ(TrackerLnc(), 2);
}

// The tracker keeps a node's shape while pods hold ids on it; before the fix the extender's facts
// took the new LNC anyway, so a core pod read back with the new cores-per-device was held as on
// device 0 while its cores 4-7 are on device 1 in the shape the tracker keeps.
TEST_F(NodeTruthTest, NodeFactsFollowTheShapeTheTrackerKeeps) {
  service_.ReplaceNodes({Trn2(16, 64, 1)});
  ASSERT_EQ(TrackerLnc(), 2);
  service_.ReplacePods({CorePod("c", "0,1,2,3")});
  ASSERT_TRUE(service_.tracker().Find("c-uid").has_value());
  service_.UpsertNode(Trn2(16, 128, 2, "1"));  // the node says LNC 1 while c holds cores
  EXPECT_EQ(TrackerLnc(), 2) << "the shape is kept while pods hold ids";
  service_.UpsertPod(CorePod("e", "4,5,6,7"));  // device 1 at the LNC the tracker keeps
  ASSERT_TRUE(service_.tracker().Find("e-uid").has_value());
  auto snapshot = service_.tracker().Snapshot("trn2-a");
  ASSERT_TRUE(snapshot.has_value());
  EXPECT_TRUE(snapshot->usage.busy_devices() & (topology::DeviceMask{1} << 1));
  auto hold = service_.tracker().Find("e-uid");
  EXPECT_EQ(hold->allocation.containers.at(0).placement.devices, topology::DeviceMask{1} << 1)
      << "e's cores 4-7 are on device 1 at the LNC the tracker keeps";
}

// What a container really got (toposched.io/granted) wins over what bind recorded, at a rebuild
// and when a watch event brings it.
TEST_F(NodeTruthTest, GrantedTruthIsAdopted) {
  service_.ReplaceNodes({Trn2(16, 64, 1)});
  kube::Pod pod = CorePod("g", "0,1,2,3");
  pod.annotations[kGranted] = CoreRecord("8,9,10,11");
  service_.ReplacePods({pod});
  auto hold = service_.tracker().Find("g-uid");
  ASSERT_TRUE(hold.has_value());
  EXPECT_THAT(hold->allocation.containers.at(0).placement.ids, ElementsAre(8, 9, 10, 11));

  kube::Pod other = CorePod("h", "4,5,6,7");
  service_.UpsertPod(other);
  other.annotations[kGranted] = CoreRecord("12,13,14,15");
  service_.UpsertPod(other);
  hold = service_.tracker().Find("h-uid");
  ASSERT_TRUE(hold.has_value());
  EXPECT_THAT(hold->allocation.containers.at(0).placement.ids, ElementsAre(12, 13, 14, 15));
}

// Found by the fault simulation (test/fault_sim_test.cc, kubelet_order): kubelet gave g other
// cores (8-11) than its record (0-3), and before the plugin's toposched.io/granted reached the
// extender, the extender bound q to 8-11. The granted record then conflicts with q's hold and is
// refused (AllocationConflict, g keeps 0-3). When q goes, g's record must be held: before the fix
// nothing retried it, so cores 8-11, on which g runs, stayed free in the tracker.
TEST_F(NodeTruthTest, AGrantedRecordRefusedForAConflictIsHeldOnceTheConflictGoes) {
  service_.ReplaceNodes({Trn2(16, 64, 1)});
  kube::Pod g = CorePod("g", "0,1,2,3");
  service_.UpsertPod(g);
  kube::Pod q = CorePod("q", "8,9,10,11");
  service_.UpsertPod(q);
  g.resource_version = "2";
  g.annotations[kGranted] = CoreRecord("8,9,10,11");
  service_.UpsertPod(g);  // conflicts with q: g keeps what it held
  auto hold = service_.tracker().Find("g-uid");
  ASSERT_TRUE(hold.has_value());
  EXPECT_THAT(hold->allocation.containers.at(0).placement.ids, ElementsAre(0, 1, 2, 3));

  service_.DeletePod(q);
  hold = service_.tracker().Find("g-uid");
  ASSERT_TRUE(hold.has_value());
  EXPECT_THAT(hold->allocation.containers.at(0).placement.ids, ElementsAre(8, 9, 10, 11))
      << "g runs on cores 8-11: once q is gone they must be held for g";
}

// The same, when q does not go but moves: kubelet steered q away from g's cores (to 12-15), and
// q's own granted record arrives after g's.
TEST_F(NodeTruthTest, AGrantedRecordRefusedForAConflictIsHeldOnceTheOtherPodMoves) {
  service_.ReplaceNodes({Trn2(16, 64, 1)});
  kube::Pod g = CorePod("g", "0,1,2,3");
  service_.UpsertPod(g);
  kube::Pod q = CorePod("q", "8,9,10,11");
  service_.UpsertPod(q);
  g.resource_version = "2";
  g.annotations[kGranted] = CoreRecord("8,9,10,11");
  service_.UpsertPod(g);  // conflicts with q
  q.resource_version = "3";
  q.annotations[kGranted] = CoreRecord("12,13,14,15");
  service_.UpsertPod(q);
  auto hold = service_.tracker().Find("g-uid");
  ASSERT_TRUE(hold.has_value());
  EXPECT_THAT(hold->allocation.containers.at(0).placement.ids, ElementsAre(8, 9, 10, 11));
}

// Issue 29 row 1: an operator labels a node toposched.io/neuron-management=dra while a
// device-plugin pod runs on it (the DaemonSets move: the device plugin leaves, the DRA plugin
// comes), then takes the label off again. The pod runs throughout: its hold must survive both
// flips, a relist in between, and the node coming back before its device plugin advertises
// anything (no LNC label, allocatable 0 until it registers).
TEST_F(NodeTruthTest, FlippingToDraAndBackKeepsTheRunningPodsHold) {
  service_.ReplaceNodes({Trn2(16, 128, 1)});  // LNC 1, read from allocatable
  ASSERT_EQ(TrackerLnc(), 1);
  service_.ReplacePods({CorePod("c", "0,1,2,3")});
  ASSERT_TRUE(service_.tracker().Find("c-uid").has_value());

  kube::Node dra = Trn2(16, 128, 2);
  dra.labels["toposched.io/neuron-management"] = "dra";
  service_.UpsertNode(dra);
  const std::string refused = Filter("all-cores", 128);
  EXPECT_THAT(refused, ::testing::HasSubstr("\"FailedNodes\":{\"trn2-a\""))
      << "a DRA node is not offered";
  EXPECT_THAT(refused, ::testing::HasSubstr("node trn2-a is managed by the DRA driver (label "
                                            "toposched.io/neuron-management=dra)"));
  service_.ReplacePods({CorePod("c", "0,1,2,3")});  // a relist while the node is DRA's

  service_.UpsertNode(Trn2(0, 0, 3));  // back to the device plugin, not registered yet
  service_.UpsertNode(Trn2(16, 128, 4));
  auto hold = service_.tracker().Find("c-uid");
  ASSERT_TRUE(hold.has_value()) << "c still runs on cores 0-3";
  EXPECT_THAT(hold->allocation.containers.at(0).placement.ids, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(TrackerLnc(), 1);
  EXPECT_EQ(hold->allocation.containers.at(0).placement.devices, topology::DeviceMask{1})
      << "at LNC 1 cores 0-3 are on device 0";
  // A new pod cannot get c's cores: all 128 do not fit, 124 do.
  EXPECT_THAT(Filter("all-cores", 128), ::testing::HasSubstr("\"FailedNodes\":{\"trn2-a\""));
  EXPECT_THAT(Filter("rest", 124), ::testing::HasSubstr("\"NodeNames\":[\"trn2-a\"]"));
}

// Issue 29 row 2: the label dra was removed while DRA claims are prepared on the node. The
// device plugin labels the node with how many DRA devices they hold
// (toposched.io/dra-claims-held); the extender does not offer it, and says why, until the label
// goes. The running device-plugin pod keeps its hold throughout.
TEST_F(NodeTruthTest, ADevicePluginNodeWhoseDraClaimsStillHoldDevicesIsNotOffered) {
  service_.ReplaceNodes({Trn2(16, 128, 1)});
  service_.ReplacePods({CorePod("c", "0,1,2,3")});
  kube::Node held = Trn2(16, 128, 2);
  held.labels["toposched.io/dra-claims-held"] = "2";
  service_.UpsertNode(held);
  const std::string refused = Filter("one", 4);
  EXPECT_THAT(refused, ::testing::HasSubstr("node trn2-a still runs DRA claims of neuron.aws.com "
                                            "(2 devices, label toposched.io/dra-claims-held)"));

  service_.UpsertNode(Trn2(16, 128, 3));  // the claims ended: the plugin removed its label
  EXPECT_THAT(Filter("one", 4), ::testing::HasSubstr("\"NodeNames\":[\"trn2-a\"]"));
  auto hold = service_.tracker().Find("c-uid");
  ASSERT_TRUE(hold.has_value());
  EXPECT_THAT(hold->allocation.containers.at(0).placement.ids, ElementsAre(0, 1, 2, 3));
}

// Issue 29, row 5: the Node object of a Trn2 LNC 1 node is deleted and re-created (kubelet
// re-registering) while a pod runs on device 1 (cores 8-15), and comes back without the plugin's
// label and with an allocatable that does not pin the LNC. Before the fix the extender forgot the
// LNC with the node, took the type's default (LNC 2), and the parked hold's cores 8-15 landed on
// devices 2 and 3: device 1 was free while the pod ran on it.
TEST_F(NodeTruthTest, ANodeReCreatedWithoutEvidenceKeepsItsLncWhileHoldsAreParked) {
  struct Case {
    const char* what;
    int devices;
    int cores;
  };
  for (const Case& c : {Case{"one device unhealthy", 15, 120}, Case{"nothing advertised", 0, 0}}) {
    SCOPED_TRACE(c.what);
    Metrics metrics;
    ExtenderService service(
        topology::Catalog::Embedded(), ExtenderOptions{}, writer_, metrics,
        [] { return int64_t{1'000'000'000}; }, [] { return int64_t{1743574052764891534}; });
    service.ReplaceNodes({Trn2(16, 128, 1, "1")});
    kube::Pod running =
        testing::MakePod("r", {{"main", "aws.amazon.com/neuroncore", 8}}, {}, "trn2-a");
    running.phase = "Running";
    running.annotations["toposched.io/allocation"] = CoreRecord("8,9,10,11,12,13,14,15");
    running.annotations["NEURON_ALLOC_TIME"] = "100";
    service.ReplacePods({running});
    const topology::DeviceMask device1 = topology::DeviceMask{1} << 1;
    ASSERT_EQ(service.tracker().Find("r-uid")->allocation.containers.at(0).placement.devices,
              device1);

    service.DeleteNode(Trn2(16, 128, 2, "1"));
    service.UpsertNode(Trn2(c.devices, c.cores, 3));  // re-created: no label yet
    auto snapshot = service.tracker().Snapshot("trn2-a");
    ASSERT_TRUE(snapshot.has_value());
    EXPECT_EQ(snapshot->info.lnc, 1) << "the LNC last known while r's hold was parked";
    auto hold = service.tracker().Find("r-uid");
    ASSERT_TRUE(hold.has_value());
    EXPECT_FALSE(hold->parked);
    EXPECT_EQ(hold->allocation.containers.at(0).placement.devices, device1) << "r runs on device 1";
    EXPECT_TRUE(snapshot->usage.busy_devices() & device1);

    // Pods asking for one device each, through filter and bind as kube-scheduler sends them:
    // every device but 1 goes, and device 1 never does.
    std::vector<std::string> given;
    for (int i = 0; i < 16; ++i) {
      const std::string uid = fmt::format("{}-d{}", c.devices, i);
      const auto padded = simdjson::padded_string(testing::NamesArgs(
          testing::PodJson("d" + std::to_string(i), uid, "aws.amazon.com/neuron", 1), {"trn2-a"}));
      auto args = DecodeExtenderArgs(padded);
      ASSERT_TRUE(args.ok()) << args.error();
      service.Filter(*args);
      service.Bind({"d" + std::to_string(i), "default", uid, "trn2-a"});
      const auto bindings = writer_.Bindings();
      if (auto it = bindings.find(uid); it != bindings.end()) {
        given.push_back(it->second.annotations.at("AWS_NEURON_IDS"));
      }
    }
    EXPECT_THAT(given, ::testing::Not(::testing::Contains("1")))
        << "device 1, on which r runs, was given to a new pod";
    EXPECT_EQ(given.size(), 15u);
  }
}

// The tracker's side of the same rule: a node that comes back with another shape while holds are
// parked for it keeps the shape those holds were taken on until they are gone (as a node present
// all along does), and says so.
TEST(TrackerParkedShapeTest, AReturningNodeKeepsTheShapeItsParkedHoldsWereTakenOn) {
  tracker::Tracker tracker(topology::Catalog::Embedded(), topology::Policy::kBestFit, nullptr);
  ASSERT_TRUE(tracker.UpsertNode({"trn2-a", "trn2.48xlarge", 1}).ok());
  tracker::RecordedPod running{
      "r-uid",
      "default/r",
      {"trn2-a",
       {{"main",
         topology::Placement::FromIds(topology::Unit::kCore, {8, 9, 10, 11, 12, 13, 14, 15}, 8)}}}};
  ASSERT_TRUE(tracker.Adopt(running).ok());
  tracker.RemoveNode("trn2-a");

  const Status back = tracker.UpsertNode({"trn2-a", "trn2.48xlarge", 2});
  ASSERT_FALSE(back.ok());
  EXPECT_THAT(back.error(), ::testing::HasSubstr("keeping LNC 1"));
  auto snapshot = tracker.Snapshot("trn2-a");
  ASSERT_TRUE(snapshot.has_value());
  EXPECT_EQ(snapshot->info.lnc, 1);
  EXPECT_EQ(tracker.Find("r-uid")->allocation.containers.at(0).placement.devices,
            topology::DeviceMask{1} << 1);

  // Once the pod is gone the node takes its new shape.
  EXPECT_TRUE(tracker.Forget("r-uid"));
  EXPECT_TRUE(tracker.UpsertNode({"trn2-a", "trn2.48xlarge", 2}).ok());
  EXPECT_EQ(tracker.Snapshot("trn2-a")->info.lnc, 2);
}

// A writer that records what the extender tells pods whose devices fail.
class DeviceFailureWriter final : public ClusterWriter {
 public:
  Status Bind(const std::string&, const std::string&, const std::string&, const std::string&,
              const std::map<std::string, std::string>&) override {
    return OkStatus();
  }
  void Event(const std::string&, const std::string& name, const std::string&, std::string_view,
             std::string_view reason, std::string_view message) override {
    events.push_back(name + " " + std::string(reason) + ": " + std::string(message));
  }
  Status SetCondition(const std::string&, const std::string& name, const std::string&,
                      const kube::PodCondition& condition) override {
    conditions.push_back(name + " " + condition.type + "=" + condition.status + " " +
                         condition.reason);
    return OkStatus();
  }
  Status Evict(const std::string&, const std::string& name, const std::string&) override {
    evictions.push_back(name);
    if (budget_blocks > 0) {
      --budget_blocks;
      return Error{"a PodDisruptionBudget does not allow it now"};
    }
    return OkStatus();
  }
  std::vector<std::string> events, conditions, evictions;
  int budget_blocks = 0;
};

class DeviceFailureTest : public ::testing::Test {
 protected:
  explicit DeviceFailureTest(bool evict = true)
      : service_(
            topology::Catalog::Embedded(), Options(evict), writer_, metrics_,
            [this] { return steady_ns_; }, [] { return int64_t{1743574052764891534}; }) {}

  ExtenderOptions Options(bool evict) {
    ExtenderOptions options;
    options.evict_on_device_failure = evict;
    options.may_reconcile = [this] { return leader_; };
    return options;
  }
  static kube::Node Inf2(int version, std::optional<std::string> unhealthy,
                         const std::string& name = "inf2-a") {
    auto node = kube::DecodeNode(testing::EksNodeJson(name, "inf2.48xlarge", 12, 24));
    EXPECT_TRUE(node.ok()) << node.error();
    node->resource_version = std::to_string(version);
    if (unhealthy) {
      node->annotations["toposched.io/unhealthy-devices"] = *unhealthy;
      node->annotations["toposched.io/unhealthy-devices-why"] =
          "2: /dev/neuron2 is missing, since 2026-11-29T12:00:00Z";
    }
    return *node;
  }
  static kube::Pod DevicePod(const std::string& name, const std::string& ids,
                             const std::string& node = "inf2-a") {
    kube::Pod pod = testing::MakePod(name, {{"main", "aws.amazon.com/neurondevice", 4}}, {}, node);
    pod.phase = "Running";
    pod.annotations["toposched.io/allocation"] =
        R"({"node":")" + node +
        R"(","instanceType":"inf2.48xlarge","containers":[{"name":"main","resource":"aws.amazon.com/neurondevice","ids":[)" +
        ids + "]}]}";
    pod.annotations["NEURON_ALLOC_TIME"] = "100";
    return pod;
  }
  topology::DeviceMask OutOfService() {
    auto snapshot = service_.tracker().Snapshot("inf2-a");
    return snapshot ? snapshot->usage.out_of_service() : ~topology::DeviceMask{0};
  }

  int64_t steady_ns_ = 1'000'000'000;
  bool leader_ = true;  // read only through may_reconcile, after construction
  DeviceFailureWriter writer_;
  Metrics metrics_;
  ExtenderService service_;
};

// Issue 32: the device plugin's annotation reaches the tracker (no new set contains the device),
// the pod on it is told and evicted (a budget that blocks it is retried), a bad annotation keeps
// what was known, and the device's return sets the condition back and drops the eviction.
TEST_F(DeviceFailureTest, AFailedDeviceIsRefusedAndItsPodToldAndEvicted) {
  service_.ReplaceNodes({Inf2(1, std::nullopt)});
  service_.ReplacePods({DevicePod("on-2", "0,1,2,3"), DevicePod("elsewhere", "8,9,10,11")});
  ASSERT_EQ(OutOfService(), 0u);
  writer_.budget_blocks = 1;
  service_.UpsertNode(Inf2(2, "2"));
  EXPECT_EQ(OutOfService(), topology::DeviceMask{1} << 2);
  ASSERT_EQ(writer_.events.size(), 1u);
  EXPECT_THAT(writer_.events[0], ::testing::HasSubstr("on-2 NeuronDeviceFailed: Neuron device(s) 2 "
                                                      "of node inf2-a"));
  EXPECT_THAT(writer_.events[0], ::testing::HasSubstr("/dev/neuron2 is missing"));
  EXPECT_THAT(writer_.conditions,
              ElementsAre("on-2 toposched.io/NeuronDevicesHealthy=False DeviceFailed"));
  EXPECT_THAT(writer_.evictions, ElementsAre("on-2"));  // refused by the budget
  service_.ExpireReservations();
  EXPECT_THAT(writer_.evictions, ElementsAre("on-2")) << "not before the retry interval";
  steady_ns_ += 6'000'000'000;
  service_.ExpireReservations();
  EXPECT_THAT(writer_.evictions, ElementsAre("on-2", "on-2"));
  steady_ns_ += 6'000'000'000;
  service_.ExpireReservations();
  EXPECT_EQ(writer_.evictions.size(), 2u) << "evicted: not asked again";
  // The holder keeps its ids until it leaves; the free 4-sets avoid 2.
  ASSERT_TRUE(service_.tracker().Find("on-2-uid").has_value());
  tracker::PodSpec four{"n-uid", "default/n", {{"main", {topology::Unit::kDevice, 4}}}};
  const tracker::FitResult fit = service_.tracker().Fit(four, "inf2-a");
  ASSERT_TRUE(fit.fits) << fit.reason;
  const std::vector<int> ids = fit.allocation.containers.at(0).placement.ids;
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 0);
  EXPECT_EQ(ids.back() - ids.front(), 3);

  // The operators' views show it: the JSON names it, the page crosses it out and says so.
  EXPECT_THAT(service_.FleetView({}), ::testing::HasSubstr("\"out_of_service\":[2]"));
  EXPECT_THAT(service_.FleetPage({}, ""), ::testing::HasSubstr("out of service: 2"));
  // A damaged annotation is no evidence that the device is back.
  service_.UpsertNode(Inf2(3, "two"));
  EXPECT_EQ(OutOfService(), topology::DeviceMask{1} << 2);
  // Back in service: the condition is set back.
  service_.UpsertNode(Inf2(4, std::nullopt));
  EXPECT_EQ(OutOfService(), 0u);
  EXPECT_THAT(writer_.conditions,
              ElementsAre("on-2 toposched.io/NeuronDevicesHealthy=False DeviceFailed",
                          "on-2 toposched.io/NeuronDevicesHealthy=True DevicesInService"));
}

TEST_F(DeviceFailureTest, ADeviceBackBeforeTheBudgetAllowsItIsNotEvicted) {
  service_.ReplaceNodes({Inf2(1, std::nullopt)});
  service_.ReplacePods({DevicePod("on-2", "0,1,2,3")});
  writer_.budget_blocks = 5;
  service_.UpsertNode(Inf2(2, "2"));
  EXPECT_THAT(writer_.evictions, ElementsAre("on-2"));
  service_.UpsertNode(Inf2(3, std::nullopt));
  steady_ns_ += 60'000'000'000;
  service_.ExpireReservations();
  EXPECT_THAT(writer_.evictions, ElementsAre("on-2"));
}

// After a restart (or a takeover) the node, its device already failed, may be learned before the
// pods holding ids on it: each is told when its hold is first adopted, the same way and once (not
// again on its next events or relists); a pod clear of the device is not told.
TEST_F(DeviceFailureTest, APodAdoptedOntoAFailedDeviceIsToldOnce) {
  service_.ReplaceNodes({Inf2(1, "2")});
  service_.ReplacePods({});
  EXPECT_TRUE(writer_.events.empty());
  service_.UpsertPod(DevicePod("on-2", "0,1,2,3"));
  service_.UpsertPod(DevicePod("elsewhere", "8,9,10,11"));
  ASSERT_TRUE(service_.tracker().Find("on-2-uid").has_value());
  ASSERT_TRUE(service_.tracker().Find("elsewhere-uid").has_value());
  ASSERT_EQ(writer_.events.size(), 1u);
  EXPECT_THAT(writer_.events[0], ::testing::HasSubstr("on-2 NeuronDeviceFailed: Neuron device(s) 2 "
                                                      "of node inf2-a"));
  EXPECT_THAT(writer_.events[0], ::testing::HasSubstr("/dev/neuron2 is missing"));
  EXPECT_THAT(writer_.conditions,
              ElementsAre("on-2 toposched.io/NeuronDevicesHealthy=False DeviceFailed"));
  EXPECT_THAT(writer_.evictions, ElementsAre("on-2"));
  // Seen again: an update event, a relist.
  service_.UpsertPod(DevicePod("on-2", "0,1,2,3"));
  service_.ReplacePods({DevicePod("on-2", "0,1,2,3"), DevicePod("elsewhere", "8,9,10,11")});
  EXPECT_EQ(writer_.events.size(), 1u);
  EXPECT_EQ(writer_.conditions.size(), 1u);
  EXPECT_THAT(writer_.evictions, ElementsAre("on-2"));
}

// The same when the pods come in the first list after the node (a restart's usual order).
TEST_F(DeviceFailureTest, APodListedOntoAFailedDeviceIsToldOnce) {
  service_.ReplaceNodes({Inf2(1, "2")});
  service_.ReplacePods({DevicePod("on-2", "0,1,2,3"), DevicePod("elsewhere", "8,9,10,11")});
  ASSERT_TRUE(service_.tracker().Find("on-2-uid").has_value());
  ASSERT_EQ(writer_.events.size(), 1u);
  EXPECT_THAT(writer_.events[0], ::testing::HasSubstr("on-2 NeuronDeviceFailed"));
  EXPECT_THAT(writer_.conditions,
              ElementsAre("on-2 toposched.io/NeuronDevicesHealthy=False DeviceFailed"));
  EXPECT_THAT(writer_.evictions, ElementsAre("on-2"));
  service_.ReplacePods({DevicePod("on-2", "0,1,2,3"), DevicePod("elsewhere", "8,9,10,11")});
  service_.UpsertNode(Inf2(2, "2"));
  EXPECT_EQ(writer_.events.size(), 1u);
  EXPECT_EQ(writer_.conditions.size(), 1u);
  EXPECT_THAT(writer_.evictions, ElementsAre("on-2"));
}

// Pods first, then their node: the node's arrival tells them (their holds were parked), once.
TEST_F(DeviceFailureTest, PodsSeenBeforeTheirFailedNodeAreToldOnce) {
  service_.ReplacePods({DevicePod("on-2", "0,1,2,3"), DevicePod("elsewhere", "8,9,10,11")});
  service_.UpsertPod(DevicePod("on-2", "0,1,2,3"));
  service_.ReplaceNodes({Inf2(1, "2")});
  ASSERT_TRUE(service_.tracker().Find("on-2-uid").has_value());
  ASSERT_EQ(writer_.events.size(), 1u);
  EXPECT_THAT(writer_.events[0], ::testing::HasSubstr("on-2 NeuronDeviceFailed"));
  EXPECT_THAT(writer_.conditions,
              ElementsAre("on-2 toposched.io/NeuronDevicesHealthy=False DeviceFailed"));
  EXPECT_THAT(writer_.evictions, ElementsAre("on-2"));
}

// A standby adopts pods on a failed device without writing (only the leader tells); when it
// becomes leader (RequireReconcile, as the elector's callback does), its next tick tells them,
// once.
TEST_F(DeviceFailureTest, ANewLeaderTellsThePodsAStandbyAdoptedQuietly) {
  leader_ = false;
  service_.ReplaceNodes({Inf2(1, "2")});
  service_.ReplacePods({DevicePod("on-2", "0,1,2,3"), DevicePod("elsewhere", "8,9,10,11")});
  service_.ExpireReservations();
  EXPECT_TRUE(writer_.events.empty());
  EXPECT_TRUE(writer_.conditions.empty());
  service_.RequireReconcile();
  service_.ExpireReservations();
  EXPECT_TRUE(writer_.events.empty()) << "not while it may not write";
  leader_ = true;
  service_.ExpireReservations();
  ASSERT_EQ(writer_.events.size(), 1u);
  EXPECT_THAT(writer_.events[0], ::testing::HasSubstr("on-2 NeuronDeviceFailed"));
  EXPECT_THAT(writer_.conditions,
              ElementsAre("on-2 toposched.io/NeuronDevicesHealthy=False DeviceFailed"));
  EXPECT_THAT(writer_.evictions, ElementsAre("on-2"));
  service_.ExpireReservations();
  EXPECT_EQ(writer_.events.size(), 1u) << "once per leadership";
}

// A bound member of the two-pod gang "train" (ranks on inf2-a and inf2-b).
kube::Pod GangMember(kube::Pod pod, int rank) {
  pod.annotations["toposched.io/gang"] = "train";
  pod.annotations["toposched.io/gang-size"] = "2";
  pod.annotations["toposched.io/gang-record"] = fmt::format(
      R"({{"gang":"default/gang:train","size":2,"groupNodes":1,"rank":{},"nodes":["inf2-a","inf2-b"]}})",
      rank);
  return pod;
}

// Issue 32: a gang's member on a failed device breaks the whole gang (its collective needs every
// rank): the other bound members are told once (event and condition) and, with evict, evicted too,
// so the job's controller places the gang again whole; a pod outside the gang is not told. When
// the device returns, the others' condition is set back and their evictions dropped.
TEST_F(DeviceFailureTest, AGangMemberOnAFailedDeviceBreaksTheWholeGang) {
  service_.ReplaceNodes({Inf2(1, std::nullopt), Inf2(1, std::nullopt, "inf2-b")});
  service_.ReplacePods({GangMember(DevicePod("rank-0", "0,1,2,3"), 0),
                        GangMember(DevicePod("rank-1", "0,1,2,3", "inf2-b"), 1),
                        DevicePod("single", "8,9,10,11", "inf2-b")});
  ASSERT_TRUE(service_.tracker().Find("rank-1-uid").has_value());
  writer_.budget_blocks = 2;  // both first evictions are refused, as a budget would
  service_.UpsertNode(Inf2(2, "2"));
  ASSERT_EQ(writer_.events.size(), 2u);
  EXPECT_THAT(writer_.events[0], ::testing::HasSubstr("rank-0 NeuronDeviceFailed: Neuron "
                                                      "device(s) 2 of node inf2-a"));
  EXPECT_THAT(writer_.events[0], ::testing::HasSubstr("so is every other member of its gang"));
  EXPECT_THAT(writer_.events[1],
              ::testing::HasSubstr("rank-1 NeuronGangMemberDeviceFailed: Member default/rank-0 "
                                   "of gang default/gang:train holds Neuron device(s) 2 of node "
                                   "inf2-a"));
  EXPECT_THAT(writer_.conditions,
              ElementsAre("rank-0 toposched.io/NeuronDevicesHealthy=False DeviceFailed",
                          "rank-1 toposched.io/NeuronDevicesHealthy=False GangMemberDeviceFailed"));
  EXPECT_THAT(writer_.evictions, ::testing::UnorderedElementsAre("rank-0", "rank-1"));
  // Seen again (a node update with the same failure, a relist): nobody is told twice.
  service_.UpsertNode(Inf2(3, "2"));
  service_.ReplacePods({GangMember(DevicePod("rank-0", "0,1,2,3"), 0),
                        GangMember(DevicePod("rank-1", "0,1,2,3", "inf2-b"), 1),
                        DevicePod("single", "8,9,10,11", "inf2-b")});
  EXPECT_EQ(writer_.events.size(), 2u);
  // Back before the budget allowed either eviction: both conditions are set back, neither is
  // evicted at the next retry.
  service_.UpsertNode(Inf2(4, std::nullopt));
  EXPECT_THAT(writer_.conditions,
              ElementsAre("rank-0 toposched.io/NeuronDevicesHealthy=False DeviceFailed",
                          "rank-1 toposched.io/NeuronDevicesHealthy=False GangMemberDeviceFailed",
                          "rank-0 toposched.io/NeuronDevicesHealthy=True DevicesInService",
                          "rank-1 toposched.io/NeuronDevicesHealthy=True DevicesInService"));
  steady_ns_ += 60'000'000'000;
  service_.ExpireReservations();
  EXPECT_EQ(writer_.evictions.size(), 2u);
  // It fails again after the member that held it left: the gang has no member on it, nobody is
  // told.
  service_.DeletePod(GangMember(DevicePod("rank-0", "0,1,2,3"), 0));
  service_.UpsertNode(Inf2(5, "2"));
  EXPECT_EQ(writer_.events.size(), 2u);
}

// Under `event` (the default) the gang's other members are told and keep their devices.
class DeviceFailureEventTest : public DeviceFailureTest {
 protected:
  DeviceFailureEventTest() : DeviceFailureTest(/*evict=*/false) {}
};

TEST_F(DeviceFailureEventTest, TheGangsOtherMembersAreToldNotEvicted) {
  service_.ReplaceNodes({Inf2(1, std::nullopt), Inf2(1, std::nullopt, "inf2-b")});
  service_.ReplacePods({GangMember(DevicePod("rank-0", "0,1,2,3"), 0),
                        GangMember(DevicePod("rank-1", "0,1,2,3", "inf2-b"), 1)});
  service_.UpsertNode(Inf2(2, "2"));
  ASSERT_EQ(writer_.events.size(), 2u);
  EXPECT_THAT(writer_.events[0], ::testing::HasSubstr("its gang's other members are told"));
  EXPECT_THAT(writer_.events[1], ::testing::HasSubstr("Its members keep their devices"));
  EXPECT_TRUE(writer_.evictions.empty());
  EXPECT_TRUE(service_.tracker().Find("rank-1-uid").has_value());
}

}  // namespace
}  // namespace toposched::extender
