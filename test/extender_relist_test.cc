// Relists and node churn against the extender service (issue 18, rows 3 and 6): a relist merges
// into the tracker instead of replacing it, pods seen before their node are adopted when it
// appears, and a node deleted and re-added keeps its running pods' holds. Offline writer, fake
// clock; every scenario ends with the question that matters: does the next pod get ids a running
// pod holds?
#include <cstddef>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "claims/allocation_record.h"
#include "claims/keys.h"
#include "extender/offline.h"
#include "extender/protocol.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "kube/decode.h"
#include "support/every_verdict.h"
#include "support/pods.h"

namespace toposched::extender {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

kube::Node TrnNode(const std::string& name) {
  auto node = kube::DecodeNode(testing::EksNodeJson(name, "trn1.32xlarge", 16, 32));
  EXPECT_TRUE(node.ok()) << node.error();
  return *node;
}

// A pod asking for `devices` Neuron devices, pending (no node) as a stale list shows it.
kube::Pod PendingPod(const std::string& name, const std::string& uid, int devices) {
  kube::Pod pod = testing::MakePod(name, {{"main", "aws.amazon.com/neuron", devices}}, {}, "");
  pod.uid = uid;
  return pod;
}

// The same pod running on `node` with the record a bind wrote (ids as "0,1,2,3").
kube::Pod RunningPod(const std::string& name, const std::string& uid, int devices,
                     const std::string& node, const std::string& ids) {
  kube::Pod pod = PendingPod(name, uid, devices);
  pod.node_name = node;
  pod.phase = "Running";
  pod.annotations[std::string(claims::kAnnotationAllocTime)] = "100";
  pod.annotations[std::string(claims::kAnnotationRecord)] =
      R"({"node":")" + node +
      R"(","instanceType":"trn1.32xlarge","containers":[{"name":"main","resource":"aws.amazon.com/neuron","ids":[)" +
      ids + "]}]}";
  return pod;
}

class RelistTest : public ::testing::Test {
 protected:
  RelistTest()
      : service_(
            topology::Catalog::Embedded(), testing::EveryVerdict(), writer_, metrics_,
            [this] { return now_; }, [] { return int64_t{1743574052764891534}; }) {}

  json Filter(const std::string& name, const std::string& uid, int devices,
              const std::vector<std::string>& nodes) {
    const auto padded = simdjson::padded_string(
        testing::NamesArgs(testing::PodJson(name, uid, "aws.amazon.com/neuron", devices), nodes));
    auto args = DecodeExtenderArgs(padded);
    EXPECT_TRUE(args.ok()) << args.error();
    return json::parse(service_.Filter(*args));
  }

  // Filter then bind, as kube-scheduler does; the ids written, or the bind's error.
  std::string FilterAndBind(const std::string& name, const std::string& uid, int devices,
                            const std::string& node) {
    Filter(name, uid, devices, {node});
    const json r = json::parse(service_.Bind({name, "default", uid, node}));
    if (r["Error"] != "") return "error: " + r["Error"].get<std::string>();
    return writer_.Bindings().at(uid).annotations.at("AWS_NEURON_IDS");
  }

  OfflineClusterWriter writer_;
  Metrics metrics_;
  int64_t now_ = 1'000'000'000;
  ExtenderService service_;
};

// Row 3: the pod watch ends with 410 Gone; the relist's snapshot was taken before b's bind was
// committed, so it shows b still pending. Before the fix the rebuild replaced b's committed hold
// with the stale list and c was given b's ids (the policy is deterministic).
TEST_F(RelistTest, StaleRelistKeepsABindCommittedAfterItsSnapshot) {
  service_.ReplaceNodes({TrnNode("trn-a")});
  service_.ReplacePods({});
  ASSERT_TRUE(service_.Ready());
  service_.UpsertPod(PendingPod("b", "uid-b", 4));
  ASSERT_EQ(FilterAndBind("b", "uid-b", 4, "trn-a"), "0,1,2,3");

  // The relist: b as it was before its Binding, c just created.
  service_.ReplacePods({PendingPod("b", "uid-b", 4), PendingPod("c", "uid-c", 4)});
  EXPECT_EQ(FilterAndBind("c", "uid-c", 4, "trn-a"), "4,5,6,7") << "c was given b's ids";
  ASSERT_TRUE(service_.tracker().Find("uid-b").has_value()) << "b's committed hold was dropped";
  EXPECT_EQ(service_.tracker().Find("uid-b")->state, tracker::HoldState::kCommitted);
}

// Row 3 when the stale list does not show the pod at all (created after the list's snapshot):
// the pod informer calls BeginPodList just before it requests the list, and a hold newer than
// that is kept; one older than it whose pod the list does not show is gone.
TEST_F(RelistTest, AHoldNewerThanTheListRequestOutlivesItsPodsAbsenceFromTheList) {
  service_.ReplaceNodes({TrnNode("trn-a")});
  service_.ReplacePods({});
  service_.UpsertPod(PendingPod("gone", "uid-gone", 4));
  ASSERT_EQ(FilterAndBind("gone", "uid-gone", 4, "trn-a"), "0,1,2,3");
  service_.BeginPodList();  // the relist is requested...
  service_.UpsertPod(PendingPod("b", "uid-b", 4));
  ASSERT_EQ(FilterAndBind("b", "uid-b", 4, "trn-a"), "4,5,6,7");
  service_.ReplacePods({PendingPod("c", "uid-c", 4)});            // ...and shows neither
  EXPECT_FALSE(service_.tracker().Find("uid-gone").has_value());  // deleted while unwatched
  ASSERT_TRUE(service_.tracker().Find("uid-b").has_value());
  const std::string c = FilterAndBind("c", "uid-c", 4, "trn-a");
  EXPECT_THAT(c, ::testing::Not(HasSubstr("error")));
  EXPECT_NE(c, "4,5,6,7");
}

// Row 6, first variant: the node LIST fails for longer than the extender waits, so the pods are
// listed before their node is known. Before the fix the running pod's hold was dropped for good
// ("node trn-a is not known") and, once the node was listed, the extender turned Ready and
// /filter passed trn-a for 16 devices that pod holds.
TEST_F(RelistTest, PodsListedBeforeTheirNodeAreAdoptedWhenItAppears) {
  service_.ReplacePods(
      {RunningPod("x", "uid-x", 16, "trn-a", "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15")});
  EXPECT_FALSE(service_.Ready());
  service_.ReplaceNodes({TrnNode("trn-a"), TrnNode("trn-b")});
  ASSERT_TRUE(service_.Ready());
  const json r = Filter("y", "uid-y", 16, {"trn-a", "trn-b"});
  EXPECT_THAT(r["NodeNames"], ElementsAre("trn-b")) << "trn-a passed for 16 devices x holds";
  EXPECT_TRUE(r["FailedNodes"].contains("trn-a")) << r.dump();
  EXPECT_TRUE(service_.tracker().Find("uid-x").has_value());
}

// A list long enough to be read on two threads (a first list of a large cluster) gives what a
// short one gives: the earlier allocation keeps contested ids though it is in the list's second
// half, an invalid record there is refused, a pod on an unknown node there is adopted with it.
TEST_F(RelistTest, ALongListReadOnTwoThreadsKeepsTheListsRules) {
  constexpr int kNodes = 1500;  // x 16 one-device pods: 24,000, past the split
  std::vector<kube::Node> nodes;
  std::vector<kube::Pod> pods;
  for (int n = 0; n < kNodes; ++n) {
    const std::string node = "trn-" + std::to_string(n);
    nodes.push_back(TrnNode(node));
    for (int d = 0; d < 16; ++d) {
      const std::string name = node + "-" + std::to_string(d);
      pods.push_back(RunningPod(name, "uid-" + name, 1, node, std::to_string(d)));
    }
  }
  // trn-0's device 0 is claimed again at the list's end, by an earlier allocation.
  pods.front().annotations[std::string(claims::kAnnotationAllocTime)] = "200";
  kube::Pod early = RunningPod("early", "uid-early", 1, "trn-0", "0");
  early.annotations[std::string(claims::kAnnotationAllocTime)] = "50";
  pods.push_back(early);
  kube::Pod wrong = RunningPod("wrong", "uid-wrong", 1, "trn-1", "0");
  wrong.node_name = "trn-2";  // its record names trn-1
  pods.push_back(wrong);
  pods.push_back(RunningPod("later", "uid-later", 4, "trn-new", "0,1,2,3"));
  service_.ReplaceNodes(nodes);
  service_.ReplacePods(pods);
  ASSERT_TRUE(service_.Ready());

  EXPECT_TRUE(service_.tracker().Find("uid-early").has_value());
  EXPECT_FALSE(service_.tracker().Find("uid-trn-0-0").has_value()) << "the later claim kept 0";
  EXPECT_FALSE(service_.tracker().Find("uid-wrong").has_value());
  EXPECT_FALSE(service_.tracker().Find("uid-later").has_value()) << "its node is not known yet";
  EXPECT_EQ(service_.tracker().Stats().committed, kNodes * 16);
  service_.UpsertNode(TrnNode("trn-new"));
  EXPECT_TRUE(service_.tracker().Find("uid-later").has_value());
  // Every device of the listed nodes is held: none is given again.
  const json r = Filter("next", "uid-next", 1, {"trn-0", "trn-1", "trn-1499"});
  EXPECT_TRUE(r["NodeNames"].empty()) << r.dump();
}

// The same through the watch: a bound pod's event arrives while its node is unknown.
TEST_F(RelistTest, APodSeenByTheWatchBeforeItsNodeIsAdoptedWhenTheNodeArrives) {
  service_.ReplaceNodes({TrnNode("trn-b")});
  service_.ReplacePods({});
  service_.UpsertPod(RunningPod("x", "uid-x", 4, "trn-a", "0,1,2,3"));
  service_.UpsertNode(TrnNode("trn-a"));
  EXPECT_EQ(FilterAndBind("y", "uid-y", 4, "trn-a"), "4,5,6,7") << "y was given x's ids";
  EXPECT_TRUE(service_.tracker().Find("uid-x").has_value());
}

// Row 6, second variant: the Node object is deleted and re-created (a kubelet re-registering,
// an operator's kubectl delete node) while its pods keep running. Before the fix the deletion
// dropped the pods' holds and the re-added node looked empty.
TEST_F(RelistTest, ANodeDeletedAndReAddedKeepsItsRunningPodsHolds) {
  service_.ReplaceNodes({TrnNode("trn-a")});
  service_.ReplacePods({});
  service_.UpsertPod(PendingPod("x", "uid-x", 16));
  ASSERT_EQ(FilterAndBind("x", "uid-x", 16, "trn-a"), "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15");

  service_.DeleteNode(TrnNode("trn-a"));
  service_.UpsertNode(TrnNode("trn-a"));
  const json r = Filter("y", "uid-y", 16, {"trn-a"});
  EXPECT_TRUE(r["NodeNames"].empty()) << "trn-a passed for 16 devices x holds: " << r.dump();
  ASSERT_TRUE(service_.tracker().Find("uid-x").has_value());

  // Once the pod is gone, so is its hold.
  service_.DeletePod(RunningPod("x", "uid-x", 16, "trn-a", "0"));
  EXPECT_FALSE(service_.tracker().Find("uid-x").has_value());
  EXPECT_THAT(Filter("y", "uid-y", 16, {"trn-a"})["NodeNames"], ElementsAre("trn-a"));
}

// A node relist that misses a node (deleted meanwhile) and a later one that has it again.
TEST_F(RelistTest, ANodeMissingFromOneNodeListKeepsItsPodsHoldsUntilItReturns) {
  service_.ReplaceNodes({TrnNode("trn-a"), TrnNode("trn-b")});
  service_.ReplacePods({RunningPod("x", "uid-x", 4, "trn-a", "0,1,2,3")});
  service_.ReplaceNodes({TrnNode("trn-b")});
  service_.ReplaceNodes({TrnNode("trn-a"), TrnNode("trn-b")});
  EXPECT_EQ(FilterAndBind("y", "uid-y", 4, "trn-a"), "4,5,6,7") << "y was given x's ids";
  EXPECT_TRUE(service_.tracker().Find("uid-x").has_value());
}

// Seeded interleavings of the faults above against the real service: binds, deletions, pod
// relists whose snapshot is taken after BeginPodList but delivered after more binds and deletions
// (the events in between replayed after it, as the informer does from the list's
// resourceVersion), and nodes deleted and re-added. After every step no id is recorded for two
// live pods; after every relist's replay, every live bound pod's ids are held in the tracker.
TEST_F(RelistTest, SeededRelistsAndNodeChurnNeverGiveAnIdTwice) {
  constexpr int kSeeds = 300;
  constexpr int kSteps = 120;
  int binds = 0;
  int relists = 0;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    OfflineClusterWriter writer;
    Metrics metrics;
    ExtenderService service(
        topology::Catalog::Embedded(), ExtenderOptions{}, writer, metrics, [] { return 1; },
        [] { return int64_t{1}; });
    const std::vector<std::string> nodes = {"trn-a", "trn-b"};
    service.ReplaceNodes({TrnNode("trn-a"), TrnNode("trn-b")});
    service.ReplacePods({});
    std::mt19937 rng(static_cast<unsigned>(seed));
    std::map<std::string, kube::Pod> live;  // the cluster's truth, by uid
    struct Event {
      bool deleted;
      kube::Pod pod;
    };
    std::vector<Event> since_list;  // events the service has not seen yet (the watch is down)
    std::vector<kube::Pod> snapshot;
    bool listing = false;  // from the list's request until the watch has replayed what followed
    bool listed = false;   // the list is delivered; the replay is not
    int next = 0;
    auto deliver = [&](const Event& e) {
      if (e.deleted) {
        service.DeletePod(e.pod);
      } else {
        service.UpsertPod(e.pod);
      }
    };
    for (int step = 0; step < kSteps; ++step) {
      const int op = static_cast<int>(rng() % 10);
      if (op <= 3) {  // a pod is created and bound
        const int sizes[] = {1, 2, 4, 8};
        const std::string name = "p" + std::to_string(next++);
        kube::Pod pod = PendingPod(name, "uid-" + name, sizes[rng() % 4]);
        service.UpsertPod(pod);
        const std::string& node = nodes[rng() % 2];
        const auto padded = simdjson::padded_string(testing::NamesArgs(
            testing::PodJson(name, pod.uid, "aws.amazon.com/neuron",
                             static_cast<int>(pod.containers[0].requests.begin()->second)),
            {node}));
        auto args = DecodeExtenderArgs(padded);
        ASSERT_TRUE(args.ok());
        EXPECT_FALSE(service.Filter(*args).empty());  // kube-scheduler filters before it binds
        const json r = json::parse(service.Bind({name, "default", pod.uid, node}));
        if (r["Error"] == "") {
          ++binds;
          const auto binding = writer.Bindings().at(pod.uid);
          pod.node_name = binding.node;
          pod.phase = "Running";
          for (const auto& [k, v] : binding.annotations) pod.annotations[k] = v;
          live[pod.uid] = pod;
          if (listing) since_list.push_back({false, pod});
        }
      } else if (op <= 5 && !live.empty()) {  // a pod is deleted
        auto it = live.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng() % live.size()));
        const kube::Pod pod = it->second;
        live.erase(it);
        if (listing) {
          since_list.push_back({true, pod});
        } else {
          service.DeletePod(pod);
        }
      } else if (op == 6 && !listing) {  // the watch ends with 410: a list is requested
        service.BeginPodList();
        snapshot.clear();
        for (const auto& [uid, pod] : live) snapshot.push_back(pod);
        listing = true;
      } else if (op == 7 && listing && !listed) {  // the (now stale) list arrives
        ++relists;
        service.ReplacePods(snapshot);
        listed = true;
      } else if (op == 9 && listed) {  // the new watch replays what followed the snapshot
        for (const auto& e : since_list) deliver(e);
        since_list.clear();
        listing = false;
        listed = false;
        for (const auto& [uid, pod] : live) {
          auto hold = service.tracker().Find(uid);
          ASSERT_TRUE(hold.has_value())
              << "seed " << seed << " step " << step << ": " << uid << " runs without its hold";
          EXPECT_EQ(hold->allocation.node, pod.node_name);
        }
      } else if (op == 8) {  // a node is deleted and re-added
        const std::string& node = nodes[rng() % 2];
        service.DeleteNode(TrnNode(node));
        service.UpsertNode(TrnNode(node));
      }
      // No id recorded for two live pods.
      std::map<std::string, std::set<int>> used;
      for (const auto& [uid, pod] : live) {
        auto record = claims::ParseAllocationRecord(
            pod.annotations.at(std::string(claims::kAnnotationRecord)));
        ASSERT_TRUE(record.ok());
        for (const auto& c : record->containers) {
          for (int id : c.ids) {
            ASSERT_TRUE(used[pod.node_name].insert(id).second)
                << "seed " << seed << " step " << step << ": " << pod.node_name << " id " << id
                << " given twice";
          }
        }
      }
    }
  }
  EXPECT_GT(binds, kSeeds * 10);
  EXPECT_GT(relists, kSeeds);
  std::printf("%d seeds, %d binds, %d stale relists, 0 ids given twice\n", kSeeds, binds, relists);
}

}  // namespace
}  // namespace toposched::extender
