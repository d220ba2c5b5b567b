// Gangs through the extender's verbs (offline writer, fake clock): the first member's filter holds
// a whole UltraServer, each member passes only its seat, bind writes the gang record, a gang that
// cannot be placed keeps every member out, expiry releases it whole, single pods stay off held
// nodes, a restart completes a half-bound gang, and gang members are never preemption victims.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "claims/gang.h"
#include "claims/keys.h"
#include "extender/offline.h"
#include "extender/protocol.h"
#include "extender/service.h"
#include "extender_fixtures.h"
#include "kube/decode.h"
#include "support/every_verdict.h"

namespace toposched::extender {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A gang member asking for `devices` whole devices, by our own annotations (MPIJob labels when
// `mpijob` is set: job "train", replica index `index`).
std::string MemberJson(const std::string& name, const std::string& gang, int size, int nodes,
                       int devices, int index = -1, bool mpijob = false) {
  const std::string labels =
      mpijob ? fmt::format(R"("training.kubeflow.org/job-name":"{}","training.kubeflow.org/)"
                           R"(job-role":"worker","training.kubeflow.org/replica-index":"{}")",
                           gang, index)
             : R"("app":"train")";
  const std::string annotations =
      mpijob ? fmt::format(R"("toposched.io/ultraserver-nodes":"{}")", nodes)
             : fmt::format(R"("toposched.io/gang":"{}","toposched.io/gang-size":"{}",)"
                           R"("toposched.io/ultraserver-nodes":"{}")",
                           gang, size, nodes);
  return fmt::format(
      R"({{"metadata":{{"name":"{0}","namespace":"default","uid":"uid-{0}","labels":{{{1}}},)"
      R"("annotations":{{{2}}}}},"spec":{{"schedulerName":"my-scheduler","hostname":"{0}",)"
      R"("subdomain":"{3}","containers":[{{"name":"main","resources":{{"limits":{{)"
      R"("aws.amazon.com/neuron":"{4}"}}}}}}]}},"status":{{"phase":"Pending"}}}})",
      name, labels, annotations, gang, devices);
}

// A member of an upstream group: `group` is the pod's spec field, spec.schedulingGroup or
// spec.workloadRef, as JSON ("schedulingGroup":{...}); `nodes` 0 sets no ultraserver-nodes.
std::string UpstreamMemberJson(const std::string& name, const std::string& group, int nodes,
                               int devices) {
  const std::string annotations =
      nodes > 0 ? fmt::format(R"("toposched.io/ultraserver-nodes":"{}")", nodes) : "";
  return fmt::format(
      R"({{"metadata":{{"name":"{0}","namespace":"default","uid":"uid-{0}",)"
      R"("annotations":{{{1}}}}},"spec":{{"schedulerName":"my-scheduler","hostname":"{0}",)"
      R"("subdomain":"job",{2},"containers":[{{"name":"main","resources":{{"limits":{{)"
      R"("aws.amazon.com/neuron":"{3}"}}}}}}]}},"status":{{"phase":"Pending"}}}})",
      name, annotations, group, devices);
}

kube::Node UltraServerNode(const std::string& name, const std::string& us, int id) {
  auto node = kube::DecodeNode(testing::EksNodeJson(name, "trn2u.48xlarge", 16, 64));
  EXPECT_TRUE(node.ok()) << node.error();
  node->labels[std::string(claims::kLabelUltraServerMode)] = "1_2_4";
  node->labels[std::string(claims::kLabelUltraServerServerId4)] = us;
  node->labels[std::string(claims::kLabelUltraServerNodeId4)] = std::to_string(id);
  node->labels[std::string(claims::kLabelUltraServerServerId2)] = us + (id < 2 ? "a" : "b");
  node->labels[std::string(claims::kLabelUltraServerNodeId2)] = std::to_string(id % 2);
  return *node;
}

class GangServiceTest : public ::testing::Test {
 protected:
  GangServiceTest() { Start(); }

  void Start() {
    ExtenderOptions options = testing::EveryVerdict();
    options.gang_timeout = std::chrono::seconds(60);
    options.gang_size = [this](const std::string& ns,
                               const claims::GangMembership& gang) -> Result<int> {
      asked_ += ns + "/" + gang.job_name + " ";
      if (gang.source == "MPIJob" && gang.job_name == "train") return 2;
      if (gang.source == "PodGroup" && gang.job_name == "pg-gang") return 4;
      if (gang.source == "PodGroup" && gang.job_name == "pg-basic") return 0;
      if (gang.source == "Workload" && gang.job_name == "wl" && gang.pod_group == "workers") {
        return 2;
      }
      return Error{"no such " + gang.source};
    };
    service_ = std::make_unique<ExtenderService>(
        topology::Catalog::Embedded(), options, writer_, metrics_, [this] { return now_; },
        [] { return int64_t{1743574052764891534}; });
    names_.clear();
    std::vector<kube::Node> nodes;
    for (const std::string us : {"us1srv00", "us2srv00"}) {
      for (int i = 0; i < 4; ++i) {
        nodes.push_back(UltraServerNode(fmt::format("{}-n{}", us.substr(0, 3), i), us, i));
        names_.push_back(nodes.back().name);
      }
    }
    auto plain = kube::DecodeNode(testing::EksNodeJson("plain", "trn2.48xlarge", 16, 64));
    nodes.push_back(*plain);
    names_.push_back("plain");
    service_->ReplaceNodes(nodes);
    service_->ReplacePods(bound_);
  }

  json Filter(const std::string& pod) {
    auto padded = simdjson::padded_string(testing::NamesArgs(pod, names_));
    auto args = DecodeExtenderArgs(padded);
    EXPECT_TRUE(args.ok()) << args.error();
    return json::parse(service_->Filter(*args));
  }
  json Prioritize(const std::string& pod) {
    auto padded = simdjson::padded_string(testing::NamesArgs(pod, names_));
    auto args = DecodeExtenderArgs(padded);
    return json::parse(service_->Prioritize(*args));
  }
  // Filters then binds to the one node filter passed; returns that node ("" if none).
  std::string Schedule(const std::string& pod_json) {
    const json r = Filter(pod_json);
    if (r["NodeNames"].size() != 1) return "";
    const std::string node = r["NodeNames"][0];
    const auto pod = kube::DecodePod(simdjson::padded_string(pod_json));
    const json b = json::parse(service_->Bind(BindingArgs{pod->name, "default", pod->uid, node}));
    EXPECT_EQ(b["Error"], "") << b.dump();
    // What the pod watch sees next: the pod bound with its annotations.
    kube::Pod bound = *pod;
    bound.node_name = node;
    const auto bindings = writer_.Bindings();
    for (const auto& [k, v] : bindings.at(pod->uid).annotations) bound.annotations[k] = v;
    bound_.push_back(bound);
    service_->UpsertPod(bound);
    return node;
  }
  claims::GangRecord RecordOf(const std::string& name) {
    const auto bindings = writer_.Bindings();
    auto record = claims::DecodeGangRecord(
        bindings.at("uid-" + name).annotations.at(std::string(claims::kAnnotationGangRecord)));
    EXPECT_TRUE(record.ok()) << record.error();
    return *record;
  }

  OfflineClusterWriter writer_;
  Metrics metrics_;
  int64_t now_ = 1'000'000'000;
  std::unique_ptr<ExtenderService> service_;
  std::vector<std::string> names_;
  std::vector<kube::Pod> bound_;
  std::string asked_;  // the MPIJobs the service read
};

TEST_F(GangServiceTest, InterleavedGangsEachLandWholeOnOneUltraServerRankedByNodeId) {
  std::map<std::string, std::string> placed;
  for (int i = 0; i < 4; ++i) {
    for (const std::string gang : {"a", "b"}) {
      const std::string name = fmt::format("{}-{}", gang, i);
      placed[name] = Schedule(MemberJson(name, gang, 4, 4, 16));
      ASSERT_FALSE(placed[name].empty()) << name;
    }
  }
  for (const std::string gang : {"a", "b"}) {
    const std::string us = placed[gang + "-0"].substr(0, 3);
    for (int i = 0; i < 4; ++i) {
      const std::string name = fmt::format("{}-{}", gang, i);
      EXPECT_EQ(placed[name], fmt::format("{}-n{}", us, i)) << name;  // rank i = node id i
      const claims::GangRecord record = RecordOf(name);
      EXPECT_EQ(record.rank, i);
      EXPECT_EQ(record.size, 4);
      EXPECT_EQ(record.node_id, i);
      EXPECT_EQ(record.server_id, us + "srv00");
      EXPECT_EQ(record.rank0_host, fmt::format("{}-0.{}.default.svc", gang, gang));
      EXPECT_EQ(record.nodes[static_cast<size_t>(i)], placed[name]);
    }
  }
  EXPECT_NE(placed["a-0"].substr(0, 3), placed["b-0"].substr(0, 3));
  EXPECT_EQ(service_->tracker().Stats().reserved, 0);
  const std::string metrics = metrics_.Serialize();
  EXPECT_THAT(metrics, HasSubstr("toposched_gang_outcomes_total{outcome=\"bound\"} 2"));
  EXPECT_THAT(metrics, HasSubstr("toposched_gangs_held 0"));
}

TEST_F(GangServiceTest, AGangThatCannotBePlacedWholeKeepsEveryMemberOut) {
  // Break both UltraServers with single pods on one node each.
  for (const std::string node : {"us1-n2", "us2-n0"}) {
    kube::Pod pod = *kube::DecodePod(simdjson::padded_string(
        testing::PodJson("s-" + node, "uid-s-" + node, "aws.amazon.com/neuron", 1)));
    pod.node_name = node;
    pod.annotations[std::string(claims::kAnnotationNeuronIds)] = "0";
    service_->UpsertPod(pod);
  }
  for (int i = 0; i < 4; ++i) {
    const json r = Filter(MemberJson(fmt::format("c-{}", i), "c", 4, 4, 16));
    EXPECT_THAT(r["NodeNames"], IsEmpty());
    EXPECT_THAT(r["FailedNodes"]["us1-n0"].get<std::string>(),
                HasSubstr("gang default/gang:c (4 members"));
  }
  EXPECT_FALSE(service_->tracker().FindGang("default/gang:c").has_value());
  // Two 2-node gangs still fit in the unbroken halves.
  EXPECT_FALSE(Schedule(MemberJson("d-0", "d", 2, 2, 16)).empty());
  EXPECT_FALSE(Schedule(MemberJson("d-1", "d", 2, 2, 16)).empty());
}

TEST_F(GangServiceTest, SinglePodsStayOffAHeldGangsNodesAndExpiryReleasesItWhole) {
  const json first = Filter(MemberJson("a-0", "a", 4, 4, 8));
  ASSERT_EQ(first["NodeNames"].size(), 1u);
  const auto gang = service_->tracker().FindGang("default/gang:a");
  ASSERT_TRUE(gang.has_value());
  const json single = Filter(testing::PodJson("s", "uid-s", "aws.amazon.com/neuron", 1));
  for (const auto& node : gang->Nodes()) {
    EXPECT_THAT(single["FailedNodes"][node].get<std::string>(), HasSubstr("held for gang"));
  }
  const json scores = Prioritize(MemberJson("a-0", "a", 4, 4, 8));
  for (const auto& p : scores) {
    EXPECT_EQ(p["Score"], p["Host"] == first["NodeNames"][0] ? 10 : 0) << p.dump();
  }
  EXPECT_THAT(metrics_.Serialize(), HasSubstr("toposched_gangs_held 1"));
  now_ += int64_t{61} * 1'000'000'000;
  service_->ExpireReservations();
  EXPECT_FALSE(service_->tracker().FindGang("default/gang:a").has_value());
  EXPECT_THAT(metrics_.Serialize(),
              HasSubstr("toposched_gang_outcomes_total{outcome=\"expired\"} 1"));
  EXPECT_THAT(metrics_.Serialize(), HasSubstr("toposched_gangs_held 0"));
  EXPECT_EQ(service_->tracker().Stats().reserved, 0);
  const json after = Filter(testing::PodJson("s", "uid-s", "aws.amazon.com/neuron", 1));
  EXPECT_EQ(after["NodeNames"].size(), names_.size());
}

TEST_F(GangServiceTest, DeletingTheLastPodOfAGangReleasesItsSeatsAtOnce) {
  ASSERT_EQ(Filter(MemberJson("a-0", "a", 4, 4, 16))["NodeNames"].size(), 1u);
  ASSERT_EQ(Filter(MemberJson("a-1", "a", 4, 4, 16))["NodeNames"].size(), 1u);
  auto pod = [](const std::string& name) {
    return *kube::DecodePod(simdjson::padded_string(MemberJson(name, "a", 4, 4, 16)));
  };
  service_->DeletePod(pod("a-0"));
  EXPECT_TRUE(service_->tracker().FindGang("default/gang:a").has_value());  // a-1 still there
  service_->DeletePod(pod("a-1"));
  EXPECT_FALSE(service_->tracker().FindGang("default/gang:a").has_value());
  EXPECT_EQ(service_->tracker().Stats().reserved, 0);
}

TEST_F(GangServiceTest, MalformedGangKeysRefuseThePodButNeverFreeABoundPodsIds) {
  // A running pod whose gang annotation was mangled after it was bound keeps its devices.
  kube::Pod bound = *kube::DecodePod(simdjson::padded_string(MemberJson("old-0", "old", 2, 2, 16)));
  bound.annotations["toposched.io/gang-size"] = "two";
  bound.node_name = "us1-n0";
  bound.annotations[std::string(claims::kAnnotationNeuronIds)] = "0-15";
  bound_.push_back(bound);
  Start();
  EXPECT_EQ(service_->tracker().Stats().committed, 1);
  EXPECT_FALSE(
      Filter(testing::PodJson("s", "uid-s", "aws.amazon.com/neuron", 1))["FailedNodes"].contains(
          "us2-n0"));
  EXPECT_THAT(
      Filter(testing::PodJson("s", "uid-s", "aws.amazon.com/neuron", 16))["FailedNodes"]["us1-n0"]
          .get<std::string>(),
      HasSubstr("in use"));
  // An unbound pod with the same typo is refused on every node, naming the key; nothing is held.
  std::string pending = MemberJson("new-0", "new", 2, 2, 16);
  pending.replace(pending.find(R"("toposched.io/gang-size":"2")"),
                  std::string(R"("toposched.io/gang-size":"2")").size(),
                  R"("toposched.io/gang-size":"two")");
  const json r = Filter(pending);
  EXPECT_THAT(r["NodeNames"], IsEmpty());
  EXPECT_THAT(r["FailedAndUnresolvableNodes"]["plain"].get<std::string>(),
              HasSubstr("toposched.io/gang-size"));
  service_->UpsertPod(*kube::DecodePod(simdjson::padded_string(pending)));  // the watch saw it
  const json b =
      json::parse(service_->Bind(BindingArgs{"new-0", "default", "uid-new-0", "us2-n0"}));
  EXPECT_THAT(b["Error"].get<std::string>(), HasSubstr("toposched.io/gang-size"));
  EXPECT_EQ(service_->tracker().Stats().reserved, 0);
}

TEST_F(GangServiceTest, AMemberBindingElsewhereIsRefusedAndKeepsItsSeat) {
  const json r = Filter(MemberJson("a-0", "a", 2, 2, 16));
  ASSERT_EQ(r["NodeNames"].size(), 1u);
  const std::string seat = r["NodeNames"][0];
  const json b = json::parse(service_->Bind(
      BindingArgs{"a-0", "default", "uid-a-0", seat == "plain" ? "us1-n0" : "plain"}));
  EXPECT_THAT(b["Error"].get<std::string>(), HasSubstr("whose seat is on node " + seat));
  EXPECT_TRUE(service_->tracker().FindGang("default/gang:a").has_value());
}

TEST_F(GangServiceTest, ARestartCompletesAHalfBoundGangOnItsRecordedNodes) {
  const std::string n0 = Schedule(MemberJson("f-0", "f", 4, 4, 16));
  const std::string n1 = Schedule(MemberJson("f-1", "f", 4, 4, 16));
  ASSERT_FALSE(n0.empty());
  ASSERT_FALSE(n1.empty());
  // A new process: the tracker is rebuilt from the bound pods and the gang's seats held again.
  Start();
  const auto gang = service_->tracker().FindGang("default/gang:f");
  ASSERT_TRUE(gang.has_value());
  EXPECT_EQ(service_->tracker().Stats().reserved, 2);
  const std::string n2 = Schedule(MemberJson("f-2", "f", 4, 4, 16));
  const std::string n3 = Schedule(MemberJson("f-3", "f", 4, 4, 16));
  EXPECT_EQ(n0.substr(0, 3), n2.substr(0, 3));
  EXPECT_EQ(n0.substr(0, 3), n3.substr(0, 3));
  EXPECT_THAT((std::vector<int>{RecordOf("f-2").rank, RecordOf("f-3").rank}), ElementsAre(2, 3));
  EXPECT_FALSE(service_->tracker().FindGang("default/gang:f").has_value());
  EXPECT_EQ(service_->tracker().Stats().committed, 4);
  // A fifth pod naming the complete gang is refused, saying so.
  const json extra = Filter(MemberJson("f-4", "f", 4, 4, 16));
  EXPECT_THAT(extra["NodeNames"], IsEmpty());
  EXPECT_THAT(extra["FailedNodes"]["plain"].get<std::string>(), HasSubstr("one too many"));
}

TEST_F(GangServiceTest, MpiJobWorkersRankByReplicaIndexAndAskTheJobForTheirSize) {
  // Workers 1 then 0: each still gets the rank of its replica index.
  const std::string n1 = Schedule(MemberJson("train-worker-1", "train", 2, 2, 16, 1, true));
  const std::string n0 = Schedule(MemberJson("train-worker-0", "train", 2, 2, 16, 0, true));
  EXPECT_EQ(RecordOf("train-worker-1").rank, 1);
  EXPECT_EQ(RecordOf("train-worker-0").rank, 0);
  EXPECT_EQ(RecordOf("train-worker-1").node_id, 1);
  EXPECT_EQ(RecordOf("train-worker-0").rank0_host, "train-worker-0.train.default.svc");
  EXPECT_EQ(n0.substr(0, 3), n1.substr(0, 3));
  EXPECT_EQ(asked_, "default/train ");  // once: the second worker found the gang held
  // A job whose size cannot be read and no toposched.io/gang-size: every node refuses, saying why.
  const json r = Filter(MemberJson("other-worker-0", "other", 0, 2, 16, 0, true));
  EXPECT_THAT(r["NodeNames"], IsEmpty());
  EXPECT_THAT(r["FailedNodes"]["plain"].get<std::string>(), HasSubstr("size is unknown"));
}

TEST_F(GangServiceTest, PodGroupGangTakesItsSizeFromThePodGroupOnce) {
  const std::string group = R"("schedulingGroup":{"podGroupName":"pg-gang"})";
  std::vector<std::string> nodes;
  for (int i = 0; i < 4; ++i) {
    nodes.push_back(Schedule(UpstreamMemberJson(fmt::format("pg-{}", i), group, 4, 16)));
    ASSERT_FALSE(nodes.back().empty()) << "member " << i;
  }
  for (const auto& node : nodes) EXPECT_EQ(node.substr(0, 3), nodes[0].substr(0, 3));
  std::vector<int> ranks;
  for (int i = 0; i < 4; ++i) {
    const claims::GangRecord record = RecordOf(fmt::format("pg-{}", i));
    EXPECT_EQ(record.gang, "default/podgroup:pg-gang");
    EXPECT_EQ(record.size, 4);
    EXPECT_EQ(record.group_nodes, 4);
    ranks.push_back(record.rank);
  }
  std::sort(ranks.begin(), ranks.end());
  EXPECT_THAT(ranks, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(asked_, "default/pg-gang ");  // read once, kept while the gang has pods
}

TEST_F(GangServiceTest, BasicPodGroupPodsArePlacedAsSinglePods) {
  const std::string group = R"("schedulingGroup":{"podGroupName":"pg-basic"})";
  // One device: as a single pod it may go to any node; a gang member would get one seat.
  const json r = Filter(UpstreamMemberJson("basic-0", group, 0, 1));
  EXPECT_GT(r["NodeNames"].size(), 1U) << r.dump();
  EXPECT_FALSE(service_->tracker().FindGang("default/podgroup:pg-basic").has_value());
  const std::string node = r["NodeNames"][0];
  const json b =
      json::parse(service_->Bind(BindingArgs{"basic-0", "default", "uid-basic-0", node}));
  EXPECT_EQ(b["Error"], "") << b.dump();
  EXPECT_EQ(writer_.Bindings()
                .at("uid-basic-0")
                .annotations.count(std::string(claims::kAnnotationGangRecord)),
            0U);
}

TEST_F(GangServiceTest, UnreadablePodGroupKeepsItsMembersPendingSayingWhy) {
  const json r =
      Filter(UpstreamMemberJson("lost-0", R"("schedulingGroup":{"podGroupName":"gone"})", 4, 16));
  EXPECT_THAT(r["NodeNames"], IsEmpty());
  EXPECT_THAT(r["FailedNodes"]["plain"].get<std::string>(),
              HasSubstr("let toposched read the PodGroup gone (RBAC: get podgroups)"));
  // Not cached: the next try asks again.
  Filter(UpstreamMemberJson("lost-0", R"("schedulingGroup":{"podGroupName":"gone"})", 4, 16));
  EXPECT_EQ(asked_, "default/gone default/gone ");
}

TEST_F(GangServiceTest, WorkloadPodGroupReplicaIsAGang) {
  const std::string group =
      R"("workloadRef":{"name":"wl","podGroup":"workers","podGroupReplicaKey":"0"})";
  const std::string n0 = Schedule(UpstreamMemberJson("wl-0", group, 2, 16));
  const std::string n1 = Schedule(UpstreamMemberJson("wl-1", group, 2, 16));
  ASSERT_FALSE(n0.empty());
  ASSERT_FALSE(n1.empty());
  EXPECT_EQ(RecordOf("wl-0").gang, "default/workload:wl/workers/0");
  EXPECT_EQ(RecordOf("wl-1").size, 2);
  EXPECT_EQ(RecordOf("wl-0").server_id, RecordOf("wl-1").server_id);
}

TEST_F(GangServiceTest, GangMembersAreNeverPreemptionVictims) {
  const std::string n0 = Schedule(MemberJson("a-0", "a", 2, 2, 16));
  Schedule(MemberJson("a-1", "a", 2, 2, 16));
  PreemptionArgs args;
  auto pod = kube::DecodePod(
      simdjson::padded_string(testing::PodJson("hi", "uid-hi", "aws.amazon.com/neuron", 16)));
  args.pod = *pod;
  args.node_victims[n0].pod_uids = {"uid-a-0"};
  const json r = json::parse(service_->Preempt(args));
  EXPECT_TRUE(r["NodeNameToMetaVictims"].is_null() || r["NodeNameToMetaVictims"].empty())
      << r.dump();
}

}  // namespace
}  // namespace toposched::extender
