// The extender's verbs against recorded scheduler payloads, in offline mode (nodes from data,
// binds in memory), with a fake clock.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "claims/allocation_record.h"
#include "claims/keys.h"
#include "deviceplugin/allocation.h"
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
using ::testing::UnorderedElementsAre;

simdjson::padded_string Padded(const std::string& s) { return simdjson::padded_string(s); }

class ServiceTest : public ::testing::Test {
 protected:
  ServiceTest()
      : service_(
            topology::Catalog::Embedded(), testing::EveryVerdict(), writer_, metrics_,
            [this] { return now_; }, [] { return int64_t{1743574052764891534}; }) {
    std::vector<kube::Node> nodes;
    for (auto [name, type, devices, cores] :
         {std::tuple{"trn-a", "trn1.32xlarge", 16, 32},
          std::tuple{"trn-b", "trn1.32xlarge", 16, 32},
          std::tuple{"inf-a", "inf2.48xlarge", 12, 24}, std::tuple{"odd", "m5.large", 0, 0}}) {
      auto node = kube::DecodeNode(testing::EksNodeJson(name, type, devices, cores));
      EXPECT_TRUE(node.ok()) << node.error();
      nodes.push_back(*node);
    }
    service_.ReplaceNodes(nodes);
    service_.ReplacePods({});
  }

  json Filter(const std::string& pod, const std::vector<std::string>& names) {
    auto padded = Padded(testing::NamesArgs(pod, names));
    auto args = DecodeExtenderArgs(padded);
    EXPECT_TRUE(args.ok()) << args.error();
    return json::parse(service_.Filter(*args));
  }

  json Bind(const std::string& name, const std::string& uid, const std::string& node) {
    BindingArgs args{name, "default", uid, node};
    return json::parse(service_.Bind(args));
  }

  OfflineClusterWriter writer_;
  Metrics metrics_;
  int64_t now_ = 1'000'000'000;
  ExtenderService service_;
};

// NodeNames is read into a vector sized from the array's count, at most 100,000 up front.
TEST(ExtenderArgsDecode, ANameListLongerThanTheReservationDecodesWhole) {
  std::vector<std::string> names;
  for (int i = 0; i < 120'000; ++i)
    names.push_back("ip-10-0-" + std::to_string(i) + ".ec2.internal");
  const auto padded =
      Padded(testing::NamesArgs(testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 1), names));
  const auto args = DecodeExtenderArgs(padded);
  ASSERT_TRUE(args.ok()) << args.error();
  EXPECT_EQ(args->CandidateNames(), names);
}

TEST(ExtenderArgsDecode, ANameThatIsNotAStringIsRefusedWithItsPlace) {
  const std::string pod = testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 1);
  const auto numbers = Padded(R"({"Pod":)" + pod + R"(,"NodeNames":["a",7,8,9]})");
  const auto args = DecodeExtenderArgs(numbers);
  ASSERT_FALSE(args.ok());
  EXPECT_THAT(args.error(), ::testing::HasSubstr("NodeNames[1]"));
  const auto cut = Padded(R"({"Pod":)" + pod + R"(,"NodeNames":["a","b",})");
  EXPECT_FALSE(DecodeExtenderArgs(cut).ok());
}

TEST_F(ServiceTest, FilterKeepsNodesWithALegalSetAndExplainsTheRest) {
  const auto pod = testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 4);
  const json r = Filter(pod, {"trn-a", "inf-a", "odd", "ghost"});
  EXPECT_THAT(r["NodeNames"], ElementsAre("trn-a", "inf-a"));
  EXPECT_TRUE(r["Nodes"].is_null());
  EXPECT_EQ(r["Error"], "");
  EXPECT_THAT(r["FailedAndUnresolvableNodes"]["odd"].get<std::string>(),
              ::testing::HasSubstr("unknown instance type 'm5.large'"));
  EXPECT_THAT(r["FailedNodes"]["ghost"].get<std::string>(), ::testing::HasSubstr("not known"));
}

TEST_F(ServiceTest, SevenDevicesOnTrn1IsUnresolvableWithAwsText) {
  const json r =
      Filter(testing::PodJson("p", "u7", "aws.amazon.com/neuron", 7), {"trn-a", "inf-a"});
  EXPECT_THAT(r["NodeNames"], ElementsAre("inf-a"));
  EXPECT_EQ(r["FailedAndUnresolvableNodes"]["trn-a"],
            "Instance type trn1.32xlarge does not support requests for device: 7. Please request "
            "a different number of devices.");
  // Also in FailedNodes, where kube-scheduler < 1.22 looks for the reason.
  EXPECT_EQ(r["FailedNodes"]["trn-a"], r["FailedAndUnresolvableNodes"]["trn-a"]);
}

TEST_F(ServiceTest, PodAskingForNothingPassesEveryNodeUntouched) {
  const json r =
      Filter(testing::PodJson("p", "u0", "example.com/other", 3), {"trn-a", "odd", "ghost"});
  EXPECT_THAT(r["NodeNames"], ElementsAre("trn-a", "odd", "ghost"));
  EXPECT_TRUE(r["FailedNodes"].empty());
}

TEST_F(ServiceTest, NodeNamesIsAnEmptyArrayNeverNull) {
  const json r = Filter(testing::PodJson("p", "u", "aws.amazon.com/neuron", 16), {"inf-a"});
  ASSERT_TRUE(r["NodeNames"].is_array());
  EXPECT_TRUE(r["NodeNames"].empty());
}

TEST_F(ServiceTest, BindWritesAwsAnnotationsAndOurRecordThenCommits) {
  Filter(testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 4), {"trn-a"});
  const json r = Bind("p", "uid-p", "trn-a");
  EXPECT_EQ(r["Error"], "");
  const auto bindings = writer_.Bindings();
  ASSERT_EQ(bindings.count("uid-p"), 1u);
  const auto& b = bindings.at("uid-p");
  EXPECT_EQ(b.node, "trn-a");
  EXPECT_EQ(b.annotations.at("AWS_NEURON_IDS"), "0,1,2,3");
  EXPECT_EQ(b.annotations.at("NEURON_ALLOCATED"), "false");
  EXPECT_EQ(b.annotations.at("NEURON_ALLOC_TIME"), "1743574052764891534");
  auto record =
      claims::ParseAllocationRecord(b.annotations.at(std::string(claims::kAnnotationRecord)));
  ASSERT_TRUE(record.ok()) << record.error();
  EXPECT_EQ(record->node, "trn-a");
  ASSERT_EQ(record->containers.size(), 1u);
  EXPECT_EQ(record->containers[0].resource, "aws.amazon.com/neuron");
  auto hold = service_.tracker().Find("uid-p");
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->state, tracker::HoldState::kCommitted);
  // The next 4-device pod gets the next row.
  Filter(testing::PodJson("q", "uid-q", "aws.amazon.com/neuron", 4), {"trn-a"});
  EXPECT_EQ(Bind("q", "uid-q", "trn-a")["Error"], "");
  EXPECT_EQ(writer_.Bindings().at("uid-q").annotations.at("AWS_NEURON_IDS"), "4,5,6,7");
}

TEST_F(ServiceTest, BindOfUnknownOrAlreadyBoundPodIsAnErrorAndChangesNothing) {
  EXPECT_THAT(Bind("nobody", "uid-x", "trn-a")["Error"].get<std::string>(),
              ::testing::HasSubstr("not known"));
  Filter(testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 1), {"trn-a"});
  EXPECT_EQ(Bind("p", "uid-p", "trn-a")["Error"], "");
  const auto before = service_.tracker().Stats();
  EXPECT_THAT(Bind("p", "uid-p", "trn-b")["Error"].get<std::string>(),
              ::testing::HasSubstr("already bound"));
  EXPECT_EQ(service_.tracker().Stats().committed, before.committed);
}

TEST_F(ServiceTest, BeforeTheFirstSyncNeuronPodsAreRefusedAndRetriedNotGuessed) {
  // A restarted extender that has not listed the pods yet would hand out ids running pods hold.
  ExtenderService fresh(
      topology::Catalog::Embedded(), ExtenderOptions{}, writer_, metrics_, [this] { return now_; },
      [] { return int64_t{1}; });
  auto node = kube::DecodeNode(testing::EksNodeJson("trn-a", "trn1.32xlarge", 16, 32));
  ASSERT_TRUE(node.ok());
  fresh.ReplaceNodes({*node});  // nodes listed, pods not yet
  ASSERT_FALSE(fresh.Ready());
  const auto neuron = Padded(
      testing::NamesArgs(testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 4), {"trn-a"}));
  const json r = json::parse(fresh.Filter(*DecodeExtenderArgs(neuron)));
  EXPECT_TRUE(r["NodeNames"].empty());
  EXPECT_TRUE(r["FailedAndUnresolvableNodes"].empty());  // resolvable: the scheduler retries
  EXPECT_THAT(r["FailedNodes"]["trn-a"].get<std::string>(), ::testing::HasSubstr("starting"));
  EXPECT_THAT(
      json::parse(fresh.Bind({"p", "default", "uid-p", "trn-a"}))["Error"].get<std::string>(),
      ::testing::HasSubstr("starting"));
  EXPECT_TRUE(writer_.Bindings().empty());
  // Pods that ask for no Neuron resource are not ours to hold back.
  const auto other =
      Padded(testing::NamesArgs(testing::PodJson("o", "uid-o", "example.com/other", 1), {"trn-a"}));
  EXPECT_THAT(json::parse(fresh.Filter(*DecodeExtenderArgs(other)))["NodeNames"],
              ElementsAre("trn-a"));
  fresh.ReplacePods({});
  ASSERT_TRUE(fresh.Ready());
  EXPECT_THAT(json::parse(fresh.Filter(*DecodeExtenderArgs(neuron)))["NodeNames"],
              ElementsAre("trn-a"));
  EXPECT_EQ(json::parse(fresh.Bind({"p", "default", "uid-p", "trn-a"}))["Error"], "");
}

TEST_F(ServiceTest, FailedBindRollsBack) {
  Filter(testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 16), {"trn-a"});
  // A pod the writer already has (another binder got there first) makes the write fail.
  ASSERT_TRUE(writer_.Bind("default", "p", "uid-p", "trn-b", {}).ok());
  EXPECT_THAT(Bind("p", "uid-p", "trn-a")["Error"].get<std::string>(),
              ::testing::HasSubstr("already assigned"));
  EXPECT_FALSE(service_.tracker().Find("uid-p").has_value());
  EXPECT_EQ(service_.tracker().Stats().reserved, 0);
  const json r = Filter(testing::PodJson("z", "uid-z", "aws.amazon.com/neuron", 16), {"trn-a"});
  EXPECT_THAT(r["NodeNames"], ElementsAre("trn-a"));
}

TEST_F(ServiceTest, FilterAndPrioritizeNeverTakeCapacity) {
  const auto pod = testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 16);
  for (int i = 0; i < 5; ++i)
    EXPECT_THAT(Filter(pod, {"trn-a"})["NodeNames"], ElementsAre("trn-a"));
  EXPECT_EQ(service_.tracker().Stats().reserved + service_.tracker().Stats().committed, 0);
}

TEST_F(ServiceTest, PrioritizePrefersTheNodeWhereThePodFillsAHole) {
  // trn-a: devices 0-8 used, so row 8-11 is broken and a 1-device pod fills a hole there.
  Filter(testing::PodJson("big", "uid-big", "aws.amazon.com/neuron", 8), {"trn-a"});
  ASSERT_EQ(Bind("big", "uid-big", "trn-a")["Error"], "");
  Filter(testing::PodJson("one0", "uid-one0", "aws.amazon.com/neuron", 1), {"trn-a"});
  ASSERT_EQ(Bind("one0", "uid-one0", "trn-a")["Error"], "");
  const auto pod = testing::PodJson("one", "uid-one", "aws.amazon.com/neuron", 1);
  auto padded = Padded(testing::NamesArgs(pod, {"trn-a", "trn-b", "odd"}));
  auto args = DecodeExtenderArgs(padded);
  ASSERT_TRUE(args.ok());
  const json r = json::parse(service_.Prioritize(*args));
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0]["Host"], "trn-a");
  EXPECT_GE(r[0]["Score"].get<int>(), 8);
  EXPECT_LE(r[1]["Score"].get<int>(), 2);
  EXPECT_EQ(r[2]["Score"], 0);
  for (const auto& h : r) {
    EXPECT_GE(h["Score"].get<int>(), 0);
    EXPECT_LE(h["Score"].get<int>(), 10);
  }
}

TEST_F(ServiceTest, ReservationOfABindThatNeverReturnsExpires) {
  tracker::PodSpec spec{"uid-r", "default/r", {{"main", {topology::Unit::kDevice, 16}}}};
  // A reservation made directly, as a bind stuck before its API write would leave it.
  auto reserved =
      const_cast<tracker::Tracker&>(service_.tracker()).Reserve(spec, "trn-a", now_ + 5);
  ASSERT_TRUE(reserved.ok());
  service_.ExpireReservations();
  EXPECT_TRUE(service_.tracker().Find("uid-r").has_value());
  now_ += 10;
  service_.ExpireReservations();
  EXPECT_FALSE(service_.tracker().Find("uid-r").has_value());
}

TEST_F(ServiceTest, PreemptKeepsOnlyTheFewestVictimsThatFreeALegalSet) {
  // Four 4-device pods on trn-a's rows.
  for (int i = 0; i < 4; ++i) {
    const std::string name = "row" + std::to_string(i);
    Filter(testing::PodJson(name, "uid-" + name, "aws.amazon.com/neuron", 4), {"trn-a"});
    ASSERT_EQ(Bind(name, "uid-" + name, "trn-a")["Error"], "");
  }
  const std::string body =
      R"({"Pod":)" + testing::PodJson("hi", "uid-hi", "aws.amazon.com/neuron", 4) +
      R"(,"NodeNameToVictims":null,"NodeNameToMetaVictims":{"trn-a":{"Pods":[{"UID":"uid-row0"},{"UID":"uid-row1"},{"UID":"uid-cpu-hog"}],"NumPDBViolations":0},"inf-a":{"Pods":[],"NumPDBViolations":0}}})";
  auto padded = Padded(body);
  auto args = DecodePreemptionArgs(padded);
  ASSERT_TRUE(args.ok()) << args.error();
  const json r = json::parse(service_.Preempt(*args));
  const auto& victims = r["NodeNameToMetaVictims"]["trn-a"]["Pods"];
  ASSERT_EQ(victims.size(), 2u);  // the cpu-hog (not ours, kept) and one row
  std::vector<std::string> uids;
  for (const auto& v : victims) uids.push_back(v["UID"]);
  EXPECT_THAT(uids, UnorderedElementsAre("uid-cpu-hog", "uid-row0"));
  // inf-a fits without victims: kept with none.
  EXPECT_TRUE(r["NodeNameToMetaVictims"]["inf-a"]["Pods"].empty());
}

TEST_F(ServiceTest, PreemptDropsNodesWhereVictimsCannotFreeALegalSet) {
  Filter(testing::PodJson("a", "uid-a", "aws.amazon.com/neuron", 8), {"trn-a"});
  ASSERT_EQ(Bind("a", "uid-a", "trn-a")["Error"], "");
  Filter(testing::PodJson("b", "uid-b", "aws.amazon.com/neuron", 8), {"trn-a"});
  ASSERT_EQ(Bind("b", "uid-b", "trn-a")["Error"], "");
  const std::string body =
      R"({"Pod":)" + testing::PodJson("hi", "uid-hi", "aws.amazon.com/neuron", 16) +
      R"(,"NodeNameToMetaVictims":{"trn-a":{"Pods":[{"UID":"uid-a"}],"NumPDBViolations":0}}})";
  auto padded = Padded(body);
  auto args = DecodePreemptionArgs(padded);
  ASSERT_TRUE(args.ok()) << args.error();
  const json r = json::parse(service_.Preempt(*args));
  EXPECT_FALSE(r["NodeNameToMetaVictims"].contains("trn-a"));
}

TEST_F(ServiceTest, RebuildRestoresRecordedPodsAndReportsConflicts) {
  auto bound = [](const std::string& name, const std::string& uid, const std::string& ids,
                  const std::string& time) {
    kube::Pod pod = testing::MakePod(name, {{"main", "aws.amazon.com/neuron", 4}}, {}, "trn-a");
    pod.uid = uid;
    pod.phase = "Running";
    pod.annotations[std::string(claims::kAnnotationAllocTime)] = time;
    pod.annotations[std::string(claims::kAnnotationRecord)] =
        R"({"node":"trn-a","instanceType":"trn1.32xlarge","containers":[{"name":"main","resource":"aws.amazon.com/neuron","ids":[)" +
        ids + "]}]}";
    return pod;
  };
  service_.ReplacePods({bound("late", "uid-late", "4,5,6,7", "200"),
                        bound("early", "uid-early", "4,5,6,7", "100"),
                        bound("other", "uid-other", "0,1,2,3", "150")});
  EXPECT_TRUE(service_.tracker().Find("uid-early").has_value());
  EXPECT_TRUE(service_.tracker().Find("uid-other").has_value());
  EXPECT_FALSE(service_.tracker().Find("uid-late").has_value());
  EXPECT_THAT(metrics_.Serialize(), ::testing::HasSubstr("toposched_rebuild_conflicts_total 1"));
  // A new 4-device pod gets a free row, never a recorded one.
  Filter(testing::PodJson("n", "uid-n", "aws.amazon.com/neuron", 4), {"trn-a"});
  EXPECT_EQ(Bind("n", "uid-n", "trn-a")["Error"], "");
  EXPECT_EQ(writer_.Bindings().at("uid-n").annotations.at("AWS_NEURON_IDS"), "8,9,10,11");
}

TEST_F(ServiceTest, StrippedNodesHandedBackByTheSchedulerTeachNothing) {
  // With nodeCacheCapable: false, kube-scheduler 1.20 passes our filter answer's Node objects
  // (only metadata.name) on to prioritize.
  const std::string stripped =
      "{\"Pod\":" + testing::PodJson("p", "uid-p", "aws.amazon.com/neuron", 4) +
      ",\"Nodes\":{\"items\":[{\"metadata\":{\"name\":\"trn-a\"}}]}}";
  auto padded = Padded(stripped);
  auto args = DecodeExtenderArgs(padded);
  ASSERT_TRUE(args.ok()) << args.error();
  (void)service_.Prioritize(*args);
  const json r = json::parse(service_.Filter(*args));
  ASSERT_EQ(r["Nodes"]["items"].size(), 1u) << r.dump();
  EXPECT_EQ(r["Nodes"]["items"][0]["metadata"]["name"], "trn-a");
}

TEST_F(ServiceTest, PodsPlacedByAwsExtenderCountAsUsed) {
  // AWS's extender writes only AWS_NEURON_IDS (every container's ids, init containers first).
  kube::Pod pod = testing::MakePod(
      "aws-placed",
      {{"warmup", "aws.amazon.com/neuron", 1, /*init=*/true}, {"main", "aws.amazon.com/neuron", 4}},
      {}, "trn-a");
  pod.uid = "uid-aws";
  pod.phase = "Running";
  pod.annotations["AWS_NEURON_IDS"] = "8,4,5,6,7";
  pod.annotations["NEURON_ALLOCATED"] = "true";
  pod.annotations["NEURON_ALLOC_TIME"] = "100";
  service_.ReplacePods({pod});
  auto hold = service_.tracker().Find("uid-aws");
  ASSERT_TRUE(hold.has_value());
  // A new 4-device pod does not get the AWS-placed row.
  Filter(testing::PodJson("n", "uid-n", "aws.amazon.com/neuron", 4), {"trn-a"});
  EXPECT_EQ(Bind("n", "uid-n", "trn-a")["Error"], "");
  EXPECT_NE(writer_.Bindings().at("uid-n").annotations.at("AWS_NEURON_IDS"), "4,5,6,7");

  // A count that does not add up is reported, not guessed.
  kube::Pod broken = pod;
  broken.uid = "uid-broken";
  broken.name = "broken";
  broken.annotations["AWS_NEURON_IDS"] = "0,1";
  service_.UpsertPod(broken);
  EXPECT_FALSE(service_.tracker().Find("uid-broken").has_value());
  service_.ReplacePods({pod, broken});
  EXPECT_TRUE(service_.tracker().Find("uid-aws").has_value());
  EXPECT_FALSE(service_.tracker().Find("uid-broken").has_value());
  EXPECT_THAT(metrics_.Serialize(), ::testing::HasSubstr("toposched_rebuild_conflicts_total 1"));
}

// AWS_NEURON_IDS of a pod with an init container, a sidecar and two app containers (issue 12):
// written in kubelet's container order, and read back per container by the extender after a
// restart (without toposched.io/allocation) and by the device plugin exactly as bind chose them.
// Before the fix the list was written in the tracker's placement order (largest app first) and
// both readers sorted it before splitting, so every container but one got someone else's ids.
TEST_F(ServiceTest, MultiContainerAwsIdsReadBackAsWritten) {
  json pod = json::parse(testing::PodJson("multi", "uid-multi", "aws.amazon.com/neuron", 1));
  json& spec = pod["spec"];
  spec["containers"][0]["name"] = "small";
  json big = spec["containers"][0];
  big["name"] = "big";
  big["resources"]["requests"]["aws.amazon.com/neuron"] = "4";
  big["resources"]["limits"]["aws.amazon.com/neuron"] = "4";
  spec["containers"].push_back(big);
  json init = spec["containers"][0];
  init["name"] = "init";
  json sidecar = init;
  sidecar["name"] = "proxy";
  sidecar["restartPolicy"] = "Always";
  spec["initContainers"] = json::array({init, sidecar});
  Filter(pod.dump(), {"inf-a"});
  ASSERT_EQ(Bind("multi", "uid-multi", "inf-a")["Error"], "");

  // What bind chose, per container.
  std::map<std::string, std::vector<int>> chosen;
  const auto placed = service_.tracker().Find("uid-multi");
  ASSERT_TRUE(placed.has_value());
  for (const auto& c : placed->allocation.containers) {
    chosen[c.container] = c.placement.ids;
  }
  ASSERT_EQ(chosen.size(), 4u);
  const auto written = writer_.Bindings().at("uid-multi").annotations;
  std::string expected;
  for (const char* name : {"init", "proxy", "small", "big"}) {  // kubelet's order
    for (int id : chosen.at(name)) expected += (expected.empty() ? "" : ",") + std::to_string(id);
  }
  EXPECT_EQ(written.at("AWS_NEURON_IDS"), expected);

  // The bound pod as the API server has it, with only AWS's annotations left.
  pod["spec"]["nodeName"] = "inf-a";
  pod["status"]["phase"] = "Running";
  for (const auto& [k, v] : written) {
    if (k != "toposched.io/allocation") pod["metadata"]["annotations"][k] = v;
  }
  const simdjson::padded_string bound(pod.dump());
  auto decoded = kube::DecodePod(bound);
  ASSERT_TRUE(decoded.ok()) << decoded.error();
  service_.ReplacePods({*decoded});  // a restarted extender's rebuild
  auto hold = service_.tracker().Find("uid-multi");
  ASSERT_TRUE(hold.has_value());
  for (const auto& c : hold->allocation.containers) {
    std::vector<int> ids = c.placement.ids;
    std::sort(ids.begin(), ids.end());
    std::vector<int> want = chosen.at(c.container);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(ids, want) << "extender rebuild, container " << c.container;
  }

  const std::vector<claims::ResourceSpec> devices = {
      {"aws.amazon.com/neuron", topology::Unit::kDevice, {}}};
  auto claims = deviceplugin::ReadPodClaims(*decoded, devices, "inf-a");
  ASSERT_TRUE(claims.ok()) << claims.error();
  EXPECT_FALSE(claims->from_record);
  ASSERT_EQ(claims->claims.size(), 4u);
  for (const auto& claim : claims->claims) {
    std::vector<int> want = chosen.at(claim.container);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(claim.ids, want) << "device plugin, container " << claim.container;
  }
}

TEST_F(ServiceTest, FullNodeObjectsAnswerWithNodesNotNames) {
  const std::string body =
      testing::NodesArgs(testing::PodJson("p", "uid-p", "aws.amazon.com/neuroncore", 9),
                         {testing::EksNodeJson("new-node", "inf1.6xlarge", 4, 16),
                          testing::EksNodeJson("trn-a", "trn1.32xlarge", 16, 32)});
  auto padded = Padded(body);
  auto args = DecodeExtenderArgs(padded);
  ASSERT_TRUE(args.ok()) << args.error();
  const json r = json::parse(service_.Filter(*args));
  EXPECT_TRUE(r["NodeNames"].is_null());
  ASSERT_EQ(r["Nodes"]["items"].size(), 2u);
  EXPECT_EQ(r["Nodes"]["items"][0]["metadata"]["name"], "new-node");
  // The node only seen in the payload was learned: bind works on it, 9 cores = 0-8.
  ASSERT_EQ(Bind("p", "uid-p", "new-node")["Error"], "");
  EXPECT_EQ(writer_.Bindings().at("uid-p").annotations.at("AWS_NEURON_IDS"), "0,1,2,3,4,5,6,7,8");
}

}  // namespace
}  // namespace toposched::extender
