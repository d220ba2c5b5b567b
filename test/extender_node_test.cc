// What the extender learns from the node and its device plugin (issue 18, items 1 and 5): the
// LNC only on positive evidence (the plugin's label, an unambiguous allocatable, else the last
// known value), the extender's node facts and the tracker's shape one and the same, and the
// truth of what a container got (toposched.io/granted, written by the plugin from kubelet's
// books) adopted over the bind-time record.
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
  EXPECT_THAT(Filter("all-cores", 128), ::testing::HasSubstr("\"FailedNodes\":{\"trn2-a\""))
      << "a DRA node is not offered";
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

}  // namespace
}  // namespace toposched::extender
