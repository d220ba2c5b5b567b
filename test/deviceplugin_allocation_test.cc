// The device plugin's choices without any socket: a kubelet model around the real
// AllocationService (issue 18 row 2: admission in creation order, no id twice, kubelet's ids
// granted and the truth written back), pod claims from annotations, Allocate (creation order,
// same-second ties, multi-container, init and sidecar containers, AWS-only annotations,
// one-or-all without annotation, refusals, a gang member's env), preferences (topology legality,
// must-include, the pending pod's ids), container setup, and recording kubelet's assignment.
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "claims/allocation_record.h"
#include "claims/annotations.h"
#include "deviceplugin/allocation.h"
#include "deviceplugin/manager.h"
#include "deviceplugin_fixtures.h"
#include "extender/pod_requests.h"
#include "nodeagent/pod_resources.h"

namespace toposched::deviceplugin {
namespace {

using ::testing::ElementsAre;
using testing::FakePodSource;
using ::testing::HasSubstr;
using testing::MakePod;
using testing::RecordAnnotations;
using topology::Unit;

constexpr char kNeuron[] = "aws.amazon.com/neuron";
constexpr char kCore[] = "aws.amazon.com/neuroncore";

topology::NodeShape Shape(const std::string& type, int lnc = 0) {
  return *topology::NodeShape::Make(*topology::Catalog::Embedded().Find(type), lnc);
}

std::vector<claims::ResourceSpec> Resources() { return DefaultResources(kNeuron, kCore); }

class DevicePluginAllocationTest : public ::testing::Test {
 protected:
  explicit DevicePluginAllocationTest(const std::string& type = "trn1.32xlarge")
      : shape_(Shape(type)),
        service_(pods_, shape_, {"node-a", nodeagent::CoreNumbering::kHost, Resources()}) {}

  const claims::ResourceSpec& devices() const { return service_.options().resources[0]; }
  const claims::ResourceSpec& cores() const { return service_.options().resources[1]; }

  FakePodSource pods_;
  topology::NodeShape shape_;
  AllocationService service_;
};

// A cache that has not yet seen the newest pod: PodsOnNode lags, PodsOnNodeFresh is the API.
class LaggingPodSource : public FakePodSource {
 public:
  Result<std::vector<kube::Pod>> PodsOnNode() override {
    auto all = FakePodSource::PodsOnNode();
    if (all.ok() && !all->empty()) all->pop_back();
    return all;
  }
  Result<std::vector<kube::Pod>> PodsOnNodeFresh() override {
    ++fresh_lists;
    return FakePodSource::PodsOnNode();
  }
  int fresh_lists = 0;
};

// The units a container asks for, counted by one rule in the extender and the device plugin
// (issue 12): the limit, else the request, summed over a resource's names. The plugin used to
// take the first name it met and the extender the request first, so a container listing both
// device names got 4 devices from the extender and was served 2 by the plugin.
TEST(ContainerUnitsTest, ExtenderAndDevicePluginCountAlike) {
  kube::Pod pod;
  pod.uid = "u";
  kube::Container both;
  both.name = "both";
  both.limits["aws.amazon.com/neuron"] = 2;
  both.limits["aws.amazon.com/neurondevice"] = 2;
  kube::Container requests_only;
  requests_only.name = "requests-only";
  requests_only.requests["aws.amazon.com/neuron"] = 3;
  kube::Container limits_only;
  limits_only.name = "limits-only";
  limits_only.limits["aws.amazon.com/neuron"] = 1;
  pod.containers = {both, requests_only, limits_only};
  const claims::ResourceSpec devices{
      "aws.amazon.com/neuron", topology::Unit::kDevice, {"aws.amazon.com/neurondevice"}};
  auto extender_view = extender::RequestsOf(pod, extender::ResourceNames{});
  ASSERT_TRUE(extender_view.ok()) << extender_view.error();
  ASSERT_EQ(extender_view->spec.containers.size(), 3u);
  for (size_t i = 0; i < pod.containers.size(); ++i) {
    EXPECT_EQ(deviceplugin::AsksWithAliases(pod.containers[i], devices),
              extender_view->spec.containers[i].request.count)
        << pod.containers[i].name;
  }
  EXPECT_EQ(deviceplugin::AsksWithAliases(both, devices), 4);
}

TEST(DevicePluginCacheTest, AllocateAsksTheApiWhenTheCacheLacksThePod) {
  LaggingPodSource pods;
  const auto shape = Shape("trn1.32xlarge");
  AllocationService service(pods, shape, {"node-a", nodeagent::CoreNumbering::kHost, Resources()});
  pods.Add(MakePod("old", {{"main", kNeuron, 4}},
                   RecordAnnotations({{"main", kNeuron, {4, 5, 6, 7}}}, 100)));
  pods.Add(MakePod("new", {{"main", kNeuron, 4}},
                   RecordAnnotations({{"main", kNeuron, {8, 9, 10, 11}}}, 200)));

  auto first = service.Allocate(service.options().resources[0], {4, 5, 6, 7});
  ASSERT_TRUE(first.ok()) << first.error();
  EXPECT_EQ(first->pod, "default/old");
  EXPECT_EQ(pods.fresh_lists, 0) << "the cache had the pod";

  auto second = service.Allocate(service.options().resources[0], {8, 9, 10, 11});
  ASSERT_TRUE(second.ok()) << second.error();
  EXPECT_EQ(second->pod, "default/new");
  EXPECT_THAT(second->ids, ElementsAre(8, 9, 10, 11));
  EXPECT_EQ(pods.fresh_lists, 1);

  // Nothing left anywhere: the error still explains, after one look at the API.
  auto third = service.Allocate(service.options().resources[0], {0, 1, 2, 3});
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(pods.fresh_lists, 2);
}

// A cache that still shows a pod running after the API (and kubelet) have it Failed: a restarted
// kubelet failed its re-admission, the extender saw that and gave its ids to a new pod, and our
// watch has not delivered the status yet.
class StalePhasePodSource : public FakePodSource {
 public:
  Result<std::vector<kube::Pod>> PodsOnNode() override {
    auto all = FakePodSource::PodsOnNode();
    if (all.ok()) {
      for (kube::Pod& pod : *all) {
        if (pod.name == stale_name) pod.phase = "Running";
      }
    }
    return all;
  }
  Result<std::vector<kube::Pod>> PodsOnNodeFresh() override {
    ++fresh_lists;
    return FakePodSource::PodsOnNode();
  }
  std::string stale_name;
  int fresh_lists = 0;
};

TEST(DevicePluginCacheTest, AConflictIsCheckedAgainstTheApiBeforeRefusing) {
  StalePhasePodSource pods;
  const auto shape = Shape("trn1.32xlarge");
  AllocationService service(pods, shape, {"node-a", nodeagent::CoreNumbering::kHost, Resources()});
  kube::Pod failed = MakePod("failed", {{"main", kNeuron, 4}},
                             RecordAnnotations({{"main", kNeuron, {4, 5, 6, 7}}}, 100));
  pods.Add(failed);
  auto first = service.Allocate(service.options().resources[0], {4, 5, 6, 7});
  ASSERT_TRUE(first.ok()) << first.error();
  EXPECT_EQ(pods.fresh_lists, 0);

  // The API has it Failed; the cache still shows it running and our own grant still counts.
  pods.Remove("failed");
  failed.phase = "Failed";
  pods.Add(failed);
  pods.stale_name = "failed";
  pods.Add(MakePod("next", {{"main", kNeuron, 4}},
                   RecordAnnotations({{"main", kNeuron, {4, 5, 6, 7}}}, 200)));
  auto second = service.Allocate(service.options().resources[0], {4, 5, 6, 7});
  ASSERT_TRUE(second.ok()) << second.error();
  EXPECT_EQ(second->pod, "default/next");
  EXPECT_EQ(pods.fresh_lists, 1) << "the refusal was checked against the API once";

  // The API agrees with the cache: the holder really runs, and the ids are refused.
  pods.stale_name.clear();
  pods.Add(MakePod("third", {{"main", kNeuron, 4}},
                   RecordAnnotations({{"main", kNeuron, {4, 5, 6, 7}}}, 300)));
  auto third = service.Allocate(service.options().resources[0], {4, 5, 6, 7});
  ASSERT_FALSE(third.ok());
  EXPECT_THAT(third.error(), HasSubstr("default/next"));
  EXPECT_EQ(pods.fresh_lists, 2);
}

// kubelet admits in creation order, and the container gets kubelet's ids. This test used to be
// OldestPendingPodFirst, which asserted the override issue 18 removed: the oldest
// NEURON_ALLOC_TIME was served first and given its recorded ids whatever kubelet chose.
TEST_F(DevicePluginAllocationTest, CreationOrderFirstAndKubeletsIdsGranted) {
  kube::Pod late_bound = MakePod("late-bound", {{"main", kNeuron, 4}},
                                 RecordAnnotations({{"main", kNeuron, {8, 9, 10, 11}}}, 300));
  late_bound.creation_timestamp = "2026-11-22T09:00:00Z";  // created first, bound last
  pods_.Add(late_bound);
  pods_.Add(MakePod("early-bound", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {4, 5, 6, 7}}}, 100)));
  pods_.Add(MakePod("done", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {0, 1, 2, 3}}}, 50)));
  ASSERT_TRUE(pods_.PatchAnnotations(pods_.Get("done"), {{"NEURON_ALLOCATED", "true"}}).ok());

  // kubelet's own ids match nobody: the pod created first is the one kubelet admits, and the
  // container gets kubelet's ids.
  auto grant = service_.Allocate(devices(), {12, 13, 14, 15});
  ASSERT_TRUE(grant.ok()) << grant.error();
  EXPECT_EQ(grant->pod, "default/late-bound");
  EXPECT_THAT(grant->ids, ElementsAre(12, 13, 14, 15));
  EXPECT_TRUE(grant->by_annotation);
  EXPECT_FALSE(grant->matches_record);
  EXPECT_EQ(pods_.Get("late-bound").annotations.at("NEURON_ALLOCATED"), "true");
  EXPECT_EQ(pods_.Get("late-bound").annotations.at("toposched.io/allocated-containers"),
            "main=aws.amazon.com/neuron");

  grant = service_.Allocate(devices(), {4, 5, 6, 7});
  ASSERT_TRUE(grant.ok()) << grant.error();
  EXPECT_EQ(grant->pod, "default/early-bound");
  EXPECT_TRUE(grant->matches_record);

  grant = service_.Allocate(devices(), {8, 9, 10, 11});
  ASSERT_FALSE(grant.ok());
  EXPECT_THAT(grant.error(), HasSubstr("no pod on node node-a is waiting for 4 "
                                       "aws.amazon.com/neuron"));
  EXPECT_THAT(grant.error(), HasSubstr("default/late-bound container main: already allocated"));
}

TEST_F(DevicePluginAllocationTest, ExactIdsBreakASameSecondTie) {
  pods_.Add(MakePod("a", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {0, 1, 2, 3}}}, 100)));
  pods_.Add(MakePod("b", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {4, 5, 6, 7}}}, 200)));
  auto grant = service_.Allocate(devices(), {4, 5, 6, 7});
  ASSERT_TRUE(grant.ok()) << grant.error();
  EXPECT_EQ(grant->pod, "default/b");
}

TEST_F(DevicePluginAllocationTest, CountMustMatchAndReservedIdsAreRefused) {
  pods_.Add(
      MakePod("two", {{"main", kCore, 2}}, RecordAnnotations({{"main", kCore, {6, 7}}}, 100)));
  pods_.Add(MakePod("eight", {{"main", kCore, 8}},
                    RecordAnnotations({{"main", kCore, {8, 9, 10, 11, 12, 13, 14, 15}}}, 200)));
  // Eight cores: only "eight" asks for that many. kubelet's 0-7 include the cores two reserves.
  auto grant = service_.Allocate(cores(), {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_FALSE(grant.ok());
  EXPECT_THAT(grant.error(), HasSubstr("for pod default/eight container main: default/two "
                                       "container main holds aws.amazon.com/neuroncore 6-7"));
  // Refused pods fail admission; kubelet moves on.
  pods_.Add(MakePod("eight-again", {{"main", kCore, 8}},
                    RecordAnnotations({{"main", kCore, {8, 9, 10, 11, 12, 13, 14, 15}}}, 300)));
  grant = service_.Allocate(cores(), {8, 9, 10, 11, 12, 13, 14, 15});
  ASSERT_TRUE(grant.ok()) << grant.error();
  EXPECT_EQ(grant->pod, "default/eight-again");
}

TEST_F(DevicePluginAllocationTest, EachContainerGetsItsOwnSet) {
  pods_.Add(MakePod("multi",
                    {{"setup", kNeuron, 1, /*init=*/true},
                     {"proxy", kCore, 2, /*init=*/true, /*sidecar=*/true},
                     {"a", kNeuron, 4},
                     {"b", kNeuron, 4}},
                    RecordAnnotations({{"a", kNeuron, {0, 1, 2, 3}},
                                       {"b", kNeuron, {4, 5, 6, 7}},
                                       {"setup", kNeuron, {8}},
                                       {"proxy", kCore, {18, 19}}},
                                      100)));
  // kubelet's order: init containers (the sidecar among them), then app containers. kubelet's
  // own choice for setup (15, not the recorded 8) is what setup gets.
  auto init = service_.Allocate(devices(), {15});
  ASSERT_TRUE(init.ok()) << init.error();
  EXPECT_EQ(init->container, "setup");
  EXPECT_THAT(init->ids, ElementsAre(15));
  auto sidecar = service_.Allocate(cores(), {18, 19});
  ASSERT_TRUE(sidecar.ok()) << sidecar.error();
  EXPECT_EQ(sidecar->container, "proxy");
  EXPECT_EQ(pods_.Get("multi").annotations.at("NEURON_ALLOCATED"), "false");

  auto b = service_.Allocate(devices(), {4, 5, 6, 7});  // exact ids pick container b
  ASSERT_TRUE(b.ok()) << b.error();
  EXPECT_EQ(b->container, "b");
  auto a = service_.Allocate(devices(), {0, 1, 2, 3});
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_EQ(a->container, "a");
  const kube::Pod pod = pods_.Get("multi");
  EXPECT_EQ(pod.annotations.at("NEURON_ALLOCATED"), "true");
  EXPECT_EQ(pod.annotations.at("toposched.io/allocated-containers"),
            "a=aws.amazon.com/neuron,b=aws.amazon.com/neuron,proxy=aws.amazon.com/neuroncore,"
            "setup=aws.amazon.com/neuron");
}

// Found by the fault simulation (test/fault_sim_test.cc, kubelet_order): kubelet books each
// resource on its own, so after it gave app container main device 0 it may offer app container
// side core 0 (its lowest free core, when it takes its own choice over the preference). Core 0 is
// on device 0: two containers that run side by side would share it. Before the fix the plugin
// exempted the whole pod from its overlap check and granted it.
TEST_F(DevicePluginAllocationTest, TwoAppContainersOfOnePodNeverShareAUnit) {
  pods_.Add(MakePod("two", {{"main", kNeuron, 1}, {"side", kCore, 1}},
                    RecordAnnotations({{"main", kNeuron, {0}}, {"side", kCore, {4}}}, 100)));
  auto main = service_.Allocate(devices(), {0});
  ASSERT_TRUE(main.ok()) << main.error();
  EXPECT_EQ(main->container, "main");
  // GetPreferredAllocation steers side to its record; kubelet takes core 0 instead.
  EXPECT_THAT(service_.Prefer(cores(), {0, 1, 2, 3, 4, 5}, {}, 1), ElementsAre(4));
  auto side = service_.Allocate(cores(), {0});
  ASSERT_FALSE(side.ok()) << "core 0 is on device 0, which container main holds";
  EXPECT_THAT(side.error(), HasSubstr("default/two container main holds aws.amazon.com/neuron 0"));
}

// An init container runs to completion before the app containers start: they may reuse its
// units (kubelet itself hands an init container's devices on to the app containers).
TEST_F(DevicePluginAllocationTest, AnInitContainersUnitsPassToTheAppContainers) {
  pods_.Add(MakePod("init", {{"setup", kNeuron, 1, /*init=*/true}, {"main", kNeuron, 1}},
                    RecordAnnotations({{"setup", kNeuron, {2}}, {"main", kNeuron, {2}}}, 100)));
  auto setup = service_.Allocate(devices(), {2});
  ASSERT_TRUE(setup.ok()) << setup.error();
  EXPECT_EQ(setup->container, "setup");
  auto main = service_.Allocate(devices(), {2});
  ASSERT_TRUE(main.ok()) << main.error();
  EXPECT_EQ(main->container, "main");
}

TEST_F(DevicePluginAllocationTest, AwsIdsAloneAreSplitInContainerOrder) {
  pods_.Add(MakePod("aws", {{"a", kNeuron, 1}, {"b", kNeuron, 1}},
                    {{"AWS_NEURON_IDS", "3,9"},
                     {"NEURON_ALLOCATED", "false"},
                     {"NEURON_ALLOC_TIME", "1743574052764891534"}}));
  auto first = service_.Allocate(devices(), {3});
  ASSERT_TRUE(first.ok()) << first.error();
  EXPECT_EQ(first->container, "a");
  EXPECT_TRUE(first->matches_record);
  auto second = service_.Allocate(devices(), {9});
  ASSERT_TRUE(second.ok()) << second.error();
  EXPECT_EQ(second->container, "b");
  EXPECT_TRUE(second->matches_record);
  EXPECT_EQ(pods_.Get("aws").annotations.at("NEURON_ALLOCATED"), "true");
}

TEST_F(DevicePluginAllocationTest, OneOrAllWorkWithoutAnnotation) {
  int kicks = 0;
  std::vector<std::string> kicked;  // the pod each grant is to be recorded for
  service_.set_on_grant_to_record([&](const std::string& pod) {
    ++kicks;
    kicked.push_back(pod);
  });
  pods_.Add(MakePod("plain", {{"main", kNeuron, 1}}));
  auto one = service_.Allocate(devices(), {6});
  ASSERT_TRUE(one.ok()) << one.error();
  EXPECT_FALSE(one->by_annotation);
  EXPECT_EQ(one->pod, "default/plain");
  EXPECT_THAT(one->ids, ElementsAre(6));
  EXPECT_EQ(kicks, 1);
  std::vector<int> all(16);
  for (int i = 0; i < 16; ++i) all[static_cast<size_t>(i)] = i;
  auto taken = service_.Allocate(devices(), all);  // plain still runs on device 6
  ASSERT_FALSE(taken.ok());
  EXPECT_THAT(taken.error(),
              HasSubstr("default/plain container main holds aws.amazon.com/neuron 6"));
  pods_.Remove("plain");
  EXPECT_TRUE(service_.Allocate(devices(), all).ok());
  EXPECT_EQ(kicks, 2);
  // The first for its pod (Get can read it alone); the second matched no pod (a List pass).
  EXPECT_THAT(kicked, ElementsAre("default/plain", ""));
  auto four = service_.Allocate(devices(), {0, 1, 2, 3});
  ASSERT_FALSE(four.ok());
  EXPECT_THAT(four.error(), HasSubstr("toposched extender"));
}

TEST_F(DevicePluginAllocationTest, ListingFailureOnlyBlocksWhatNeedsAPod) {
  pods_.FailListing("connection refused");
  EXPECT_TRUE(service_.Allocate(devices(), {3}).ok());
  auto four = service_.Allocate(devices(), {0, 1, 2, 3});
  ASSERT_FALSE(four.ok());
  EXPECT_THAT(four.error(), HasSubstr("listing pods on node node-a failed: connection refused"));
}

// A pod whose record cannot be served is refused with the record's fault when kubelet reaches
// it (in creation order, then name); kubelet then moves on to the next.
TEST_F(DevicePluginAllocationTest, BrokenRecordsAreRefusedWithTheirReason) {
  pods_.Add(MakePod("broken", {{"main", kNeuron, 4}},
                    {{"toposched.io/allocation", "{not json"}, {"NEURON_ALLOCATED", "false"}}));
  pods_.Add(MakePod("elsewhere", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {0, 1, 2, 3}}}, 100, "node-b")));
  pods_.Add(MakePod("liar", {{"main", kNeuron, 8}},
                    RecordAnnotations({{"main", kNeuron, {0, 1, 2, 3}}}, 100)));
  auto grant = service_.Allocate(devices(), {0, 1, 2, 3});
  ASSERT_FALSE(grant.ok());
  EXPECT_THAT(grant.error(), HasSubstr("pod default/broken container main: annotation "
                                       "toposched.io/allocation"));
  grant = service_.Allocate(devices(), {0, 1, 2, 3});
  ASSERT_FALSE(grant.ok());
  EXPECT_THAT(grant.error(), HasSubstr("records node node-b"));
  grant = service_.Allocate(devices(), {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_FALSE(grant.ok());
  EXPECT_THAT(grant.error(), HasSubstr("container requests 8"));
}

// A gang member's record, as the extender writes it at bind: rank 1 of a 4-node UltraServer.
constexpr char kGangRecord[] =
    R"({"gang":"default/mpijob:train-a","size":4,"groupNodes":4,"rank":1,)"
    R"("nodes":["node-z","node-a","node-b","node-c"],"serverId":"bog79p1y8tetj5uu","nodeId":1,)"
    R"("rank0Host":"train-a-worker-0.train-a.default.svc"})";

TEST_F(DevicePluginAllocationTest, AGangMemberGetsItsRankAndUltraServerEnv) {
  auto notes = RecordAnnotations({{"main", kNeuron, {0, 1, 2, 3}}, {"side", kCore, {16}}}, 100);
  notes["toposched.io/gang-record"] = kGangRecord;
  pods_.Add(MakePod("worker-1", {{"main", kNeuron, 4}, {"side", kCore, 1}}, notes));
  pods_.Add(MakePod("plain", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {4, 5, 6, 7}}}, 200)));

  const std::map<std::string, std::string> gang_env = {
      {"NEURON_RT_ULTRASERVER_MODE", "1"},
      {"NEURON_RT_ULTRASERVER_SERVER_ID", "bog79p1y8tetj5uu"},
      {"NEURON_RT_ULTRASERVER_NODE_ID", "1"},
      {"NEURON_GLOBAL_TOPOID", "1"},
      {"NEURON_GLOBAL_TOPOID0_HOST", "train-a-worker-0.train-a.default.svc"}};
  auto main = service_.Allocate(devices(), {0, 1, 2, 3});
  ASSERT_TRUE(main.ok()) << main.error();
  EXPECT_EQ(main->pod, "default/worker-1");
  EXPECT_EQ(main->envs, gang_env);
  // Every container of the member that gets our units gets the same env.
  auto side = service_.Allocate(cores(), {16});
  ASSERT_TRUE(side.ok()) << side.error();
  EXPECT_EQ(side->container, "side");
  EXPECT_EQ(side->envs, gang_env);

  auto plain = service_.Allocate(devices(), {4, 5, 6, 7});
  ASSERT_TRUE(plain.ok()) << plain.error();
  EXPECT_EQ(plain->pod, "default/plain");
  EXPECT_TRUE(plain->envs.empty());

  // kubelet re-admitting the served container (after its restart) gets the env again.
  auto again = service_.Allocate(devices(), {0, 1, 2, 3});
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(again->pod, "default/worker-1");
  EXPECT_EQ(again->envs, gang_env);
}

TEST_F(DevicePluginAllocationTest, AMalformedGangRecordFailsTheAllocation) {
  auto notes = RecordAnnotations({{"main", kNeuron, {0, 1, 2, 3}}}, 100);
  // Rank 4 in a gang of 4.
  notes["toposched.io/gang-record"] =
      R"({"gang":"default/gang:g","size":4,"groupNodes":1,"rank":4,"nodes":["a","b","c","d"]})";
  pods_.Add(MakePod("member", {{"main", kNeuron, 4}}, notes));
  auto grant = service_.Allocate(devices(), {0, 1, 2, 3});
  ASSERT_FALSE(grant.ok());
  EXPECT_THAT(grant.error(),
              HasSubstr("pod default/member: annotation toposched.io/gang-record: rank 4"));
  EXPECT_THAT(grant.error(), HasSubstr("not allocating"));
  // Nothing was marked served: once the record is fixed, the claim is still pending.
  EXPECT_EQ(pods_.Get("member").annotations.count("toposched.io/allocated-containers"), 0u);
  ASSERT_TRUE(pods_
                  .PatchAnnotations(pods_.Get("member"),
                                    {{"toposched.io/gang-record",
                                      R"({"gang":"default/gang:g","size":4,"groupNodes":1,)"
                                      R"("rank":3,"nodes":["a","b","c","d"]})"}})
                  .ok());
  grant = service_.Allocate(devices(), {0, 1, 2, 3});
  ASSERT_TRUE(grant.ok()) << grant.error();
  EXPECT_EQ(grant->envs.at("NEURON_GLOBAL_TOPOID"), "3");
  EXPECT_EQ(grant->envs.at("NEURON_RT_ULTRASERVER_MODE"), "4");
  EXPECT_EQ(grant->envs.count("NEURON_RT_ULTRASERVER_SERVER_ID"), 0u);

  // Not JSON at all, and the whole node's devices (one-or-all is no way around it).
  pods_.Remove("member");
  notes = RecordAnnotations(
      {{"main", kNeuron, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}}, 50);
  notes["toposched.io/gang-record"] = "{rank:1}";
  pods_.Add(MakePod("whole", {{"main", kNeuron, 16}}, notes));
  std::vector<int> all(16);
  for (int i = 0; i < 16; ++i) all[static_cast<size_t>(i)] = i;
  grant = service_.Allocate(devices(), all);
  ASSERT_FALSE(grant.ok());
  EXPECT_THAT(grant.error(), HasSubstr("pod default/whole: annotation toposched.io/gang-record"));
}

TEST_F(DevicePluginAllocationTest, ReAllocateOfAServedContainerGetsTheSameIds) {
  pods_.Add(MakePod("p", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {4, 5, 6, 7}}}, 100)));
  ASSERT_TRUE(service_.Allocate(devices(), {4, 5, 6, 7}).ok());
  auto again = service_.Allocate(devices(), {4, 5, 6, 7});  // kubelet restarted
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->pod, "default/p");
}

TEST_F(DevicePluginAllocationTest, PreferReturnsThePendingPodsIds) {
  pods_.Add(MakePod("p", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {8, 9, 10, 11}}}, 100)));
  std::vector<int> all(16);
  for (int i = 0; i < 16; ++i) all[static_cast<size_t>(i)] = i;
  EXPECT_THAT(service_.Prefer(devices(), all, {}, 4), ElementsAre(8, 9, 10, 11));
  // Not available to kubelet: fall back to topology, still legal. Both free rows sit in the same
  // free 8-block, so best fit ties and keeps the lowest aligned block.
  EXPECT_THAT(service_.Prefer(devices(), {0, 1, 2, 3, 4, 5, 6, 7}, {}, 4), ElementsAre(0, 1, 2, 3));
  // Prefer does not mark anything served.
  EXPECT_EQ(pods_.Get("p").annotations.at("NEURON_ALLOCATED"), "false");
}

TEST(DevicePluginPreferenceTest, LegalSetsOnTheTorus) {
  const auto shape = Shape("trn1.32xlarge");
  // Rows 0 and 2 are partly used: rows 1 and 3 are free. Neither lies in a larger free aligned
  // block, so best fit ties and keeps the lowest row.
  const std::vector<int> available = {1, 2, 4, 5, 6, 7, 9, 12, 13, 14, 15};
  EXPECT_THAT(PreferredByTopology(shape, Unit::kDevice, available, {}, 4), ElementsAre(4, 5, 6, 7));
  // must_include picks the row.
  EXPECT_THAT(PreferredByTopology(shape, Unit::kDevice, available, {13}, 4),
              ElementsAre(12, 13, 14, 15));
  // No legal set holds the must-include id: must-include plus the lowest available.
  EXPECT_THAT(PreferredByTopology(shape, Unit::kDevice, available, {1}, 4),
              ElementsAre(1, 2, 4, 5));
}

TEST(DevicePluginPreferenceTest, ContiguousOnInf2AndCoresStayInOneBlock) {
  const auto inf2 = Shape("inf2.48xlarge");
  const std::vector<int> available = {0, 1, 3, 4, 5, 7, 8, 9, 10, 11};
  // Best fit: the tightest run of 3 is 3-5.
  EXPECT_THAT(PreferredByTopology(inf2, Unit::kDevice, available, {}, 3), ElementsAre(3, 4, 5));
  // Best fit's 3-5 lacks 9, so the first legal run holding 9, in id order: 7-9.
  EXPECT_THAT(PreferredByTopology(inf2, Unit::kDevice, available, {9}, 3), ElementsAre(7, 8, 9));
  const auto trn1 = Shape("trn1.32xlarge");
  std::vector<int> cores;
  for (int c = 6; c < 32; ++c) cores.push_back(c);
  // 4 cores must stay inside one row of 4 devices (8 cores): 8-11 or later, never 6-9.
  const auto chosen = PreferredByTopology(trn1, Unit::kCore, cores, {}, 4);
  ASSERT_EQ(chosen.size(), 4u);
  EXPECT_EQ(chosen.front() / 8, chosen.back() / 8);
  EXPECT_EQ(chosen.back() - chosen.front(), 3);
}

TEST(DevicePluginPreferenceTest, Trn2AtLnc1) {
  const auto shape = Shape("trn2.48xlarge", 1);
  std::vector<int> all;
  for (int c = 0; c < 128; ++c) all.push_back(c);
  const auto ids = PreferredByTopology(shape, Unit::kCore, all, {64}, 8);
  EXPECT_EQ(ids.front(), 64);
  EXPECT_EQ(ids.size(), 8u);
}

TEST(DevicePluginSetupTest, DeviceAndCoreNumbering) {
  const auto trn1 = Shape("trn1.32xlarge");
  auto setup = nodeagent::BuildContainerSetup(trn1, Unit::kDevice, {4, 5, 6, 7},
                                              nodeagent::CoreNumbering::kHost);
  EXPECT_THAT(setup.device_nodes,
              ElementsAre("/dev/neuron4", "/dev/neuron5", "/dev/neuron6", "/dev/neuron7"));
  EXPECT_EQ(setup.envs.at("NEURON_RT_VISIBLE_CORES"), "8-15");
  EXPECT_EQ(setup.envs.count("NEURON_LOGICAL_NC_CONFIG"), 0u);
  setup = nodeagent::BuildContainerSetup(trn1, Unit::kDevice, {4, 5, 6, 7},
                                         nodeagent::CoreNumbering::kContainer);
  EXPECT_EQ(setup.envs.at("NEURON_RT_VISIBLE_CORES"), "0-7");
  // Cores 5-6 touch devices 2 and 3; inside the container those are devices 0 and 1.
  setup = nodeagent::BuildContainerSetup(trn1, Unit::kCore, {5, 6},
                                         nodeagent::CoreNumbering::kContainer);
  EXPECT_THAT(setup.device_nodes, ElementsAre("/dev/neuron2", "/dev/neuron3"));
  EXPECT_EQ(setup.envs.at("NEURON_RT_VISIBLE_CORES"), "1-2");
  setup = nodeagent::BuildContainerSetup(trn1, Unit::kCore, {5}, nodeagent::CoreNumbering::kHost);
  EXPECT_EQ(setup.envs.at("NEURON_RT_VISIBLE_CORES"), "5");
  const auto trn2 = Shape("trn2.48xlarge", 1);
  setup = nodeagent::BuildContainerSetup(trn2, Unit::kCore, {8, 9, 10},
                                         nodeagent::CoreNumbering::kHost);
  EXPECT_THAT(setup.device_nodes, ElementsAre("/dev/neuron1"));
  EXPECT_EQ(setup.envs.at("NEURON_LOGICAL_NC_CONFIG"), "1");
  EXPECT_EQ(nodeagent::FormatCoreList({1, 3}), "1,3");
}

TEST(DevicePluginIdsTest, ParseAndFormat) {
  EXPECT_EQ(nodeagent::UnitId(Unit::kDevice, 3), "neuron3");
  EXPECT_EQ(nodeagent::UnitId(Unit::kCore, 12), "neuroncore12");
  EXPECT_EQ(*nodeagent::ParseUnitId(Unit::kDevice, "neuron15", 16), 15);
  EXPECT_FALSE(nodeagent::ParseUnitId(Unit::kDevice, "neuron16", 16).ok());
  EXPECT_FALSE(nodeagent::ParseUnitId(Unit::kDevice, "neuroncore1", 16).ok());
  EXPECT_FALSE(nodeagent::ParseUnitId(Unit::kCore, "neuron1", 16).ok());
  EXPECT_FALSE(nodeagent::ParseUnitId(Unit::kDevice, "neuron01", 16).ok());
  EXPECT_FALSE(nodeagent::ParseUnitId(Unit::kDevice, "neuron-1", 16).ok());
  EXPECT_THAT(*nodeagent::ParseUnitIds(Unit::kDevice, {"neuron3", "neuron1"}, 16),
              ElementsAre(1, 3));
  EXPECT_FALSE(nodeagent::ParseUnitIds(Unit::kDevice, {"neuron3", "neuron3"}, 16).ok());
  EXPECT_EQ(SocketName("toposched", "aws.amazon.com/neuroncore"), "toposched-neuroncore.sock");
  EXPECT_EQ(SocketName("p", "Example.com/GPU_x"), "p-gpu-x.sock");
}

TEST(DevicePluginRecordTest, KubeletAssignmentIsRecordedOnUnannotatedPods) {
  const auto shape = Shape("inf2.48xlarge");
  const nodeagent::RecordContext context{"node-a", "inf2.48xlarge", &shape, Resources()};
  std::vector<kube::Pod> pods = {
      MakePod("plain", {{"init", kNeuron, 1, true}, {"main", kNeuron, 1}}),
      MakePod("ours", {{"main", kNeuron, 2}}, RecordAnnotations({{"main", kNeuron, {2, 3}}}, 100)),
      MakePod("aws", {{"main", kCore, 1}}, {{"AWS_NEURON_IDS", "9"}}),
      MakePod("foreign", {{"main", kNeuron, 1}}),
  };
  const std::vector<nodeagent::AssignedDevices> assigned = {
      {"default", "plain", "main", kNeuron, {"neuron7"}},
      {"default", "plain", "init", kNeuron, {"neuron5"}},
      {"default", "ours", "main", kNeuron, {"neuron2", "neuron3"}},
      {"default", "aws", "main", kCore, {"neuroncore9"}},
      {"default", "foreign", "main", kNeuron, {"gpu-0"}},
      {"default", "gone", "main", kNeuron, {"neuron1"}},
  };
  std::vector<std::string> warnings;
  const auto patches = nodeagent::PlanRecordPatches(pods, assigned, context, 42, &warnings);
  ASSERT_EQ(patches.size(), 2u);
  EXPECT_EQ(patches[0].name, "plain");
  const auto& plain = patches[0].changes;
  auto record = claims::ParseAllocationRecord(*plain.at("toposched.io/allocation"));
  ASSERT_TRUE(record.ok());
  ASSERT_EQ(record->containers.size(), 2u);
  EXPECT_EQ(record->containers[0].container, "init");
  EXPECT_THAT(record->containers[0].ids, ElementsAre(5));
  EXPECT_THAT(record->containers[1].ids, ElementsAre(7));
  EXPECT_EQ(record->node, "node-a");
  EXPECT_EQ(*plain.at("AWS_NEURON_IDS"), "5,7");
  EXPECT_EQ(*plain.at("NEURON_ALLOCATED"), "true");
  EXPECT_EQ(*plain.at("NEURON_ALLOC_TIME"), "42");
  // AWS's own ids and time are kept; our record is added.
  EXPECT_EQ(patches[1].name, "aws");
  EXPECT_EQ(patches[1].changes.count("AWS_NEURON_IDS"), 0u);
  EXPECT_EQ(patches[1].changes.count("toposched.io/allocation"), 1u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("gpu-0"));
}

// --- A kubelet model around the real AllocationService (issue 18, row 2). ---
//
// kubelet admits the pods bound to its node in creation order; for each container and each of
// our resources it asks GetPreferredAllocation over what its own books say is free, takes the
// answer when it is a valid set (else the lowest free ids), calls Allocate with those ids and
// books them. What the container really gets is the grant's ids. The model keeps both and says
// when one physical unit is given to two live pods. The "extender" here picks the lowest ids its
// books (every live pod's record, as claims::RecordFromPod reads it) call free.
class KubeletModel : public nodeagent::KubeletView {
 public:
  KubeletModel(FakePodSource& pods, AllocationService& service, const topology::NodeShape& shape)
      : pods_(pods), service_(service), shape_(shape) {}

  struct Held {
    std::string pod;
    std::string container;
    const claims::ResourceSpec* resource = nullptr;
    std::vector<int> booked;  // kubelet's books (checkpoint, PodResources)
    std::vector<int> real;    // what the container was given
  };

  // kubelet learns of the pod (it is bound here) without admitting it yet.
  void See(const std::string& name) { known_.insert(name); }

  // Admits `name`: every container in kubelet's order. `ignore_preference` makes kubelet take the
  // lowest free ids whatever GetPreferredAllocation said. Returns the first Allocate error.
  Status Admit(const std::string& name, bool ignore_preference = false) {
    known_.insert(name);
    const kube::Pod pod = pods_.Get(name);
    for (const auto* list : {&pod.init_containers, &pod.containers}) {
      for (const kube::Container& container : *list) {
        for (const claims::ResourceSpec& resource : service_.options().resources) {
          const int n = static_cast<int>(AsksWithAliases(container, resource));
          if (n == 0) continue;
          std::vector<int> available = FreeFor(resource);
          std::vector<int> ids;
          if (!ignore_preference) ids = service_.Prefer(resource, available, {}, n);
          const bool valid =
              static_cast<int>(ids.size()) == n &&
              std::includes(available.begin(), available.end(), ids.begin(), ids.end());
          if (!valid) ids.assign(available.begin(), available.begin() + n);
          auto grant = service_.Allocate(resource, ids);
          if (!grant.ok()) {
            std::erase_if(held_, [&](const Held& h) { return h.pod == name; });
            known_.erase(name);
            return Error{grant.error()};
          }
          held_.push_back({name, container.name, &resource, ids, grant->ids});
        }
      }
    }
    return OkStatus();
  }

  // The pod ends: kubelet frees its books, the API forgets it.
  void End(const std::string& name) {
    std::erase_if(held_, [&](const Held& h) { return h.pod == name; });
    known_.erase(name);
    pods_.Remove(name);
  }

  // The plugin's pass over PodResources (PlanRecordPatches), applied to the pods.
  void Reconcile() {
    const nodeagent::RecordContext context{"node-a", "trn1.32xlarge", &shape_,
                                           service_.options().resources};
    auto live = pods_.PodsOnNode();
    ASSERT_TRUE(live.ok());
    auto listed = List();
    ASSERT_TRUE(listed.ok());
    for (const nodeagent::RecordPatch& patch :
         nodeagent::PlanRecordPatches(*live, *listed, context, 1, nullptr)) {
      ASSERT_TRUE(pods_.PatchAnnotations(pods_.Get(patch.name), patch.changes).ok());
    }
  }

  // The lowest `n` devices free in the extender's books.
  std::vector<int> ExtenderPick(int n) {
    std::set<int> used;
    auto live = pods_.PodsOnNode();
    for (const kube::Pod& pod : *live) {
      auto record = claims::RecordFromPod(pod, service_.options().resources);
      if (!record.ok()) continue;
      for (const claims::ContainerIds& c : record->containers) {
        for (int id : c.ids) used.insert(c.resource == kCore ? id / shape_.cores_per_device : id);
      }
    }
    std::vector<int> out;
    for (int d = 0; d < shape_.devices && static_cast<int>(out.size()) < n; ++d) {
      if (used.count(d) == 0) out.push_back(d);
    }
    return out;
  }

  // "device D is given to A and B" for every device two live pods really hold; empty when none.
  std::vector<std::string> Overlaps() const {
    std::map<int, std::set<std::string>> holders;  // physical core -> pods
    for (const Held& h : held_) {
      for (int id : h.real) {
        if (h.resource->unit == Unit::kDevice) {
          for (int c = 0; c < shape_.cores_per_device; ++c) {
            holders[id * shape_.cores_per_device + c].insert(h.pod);
          }
        } else {
          holders[id].insert(h.pod);
        }
      }
    }
    std::set<std::string> out;
    for (const auto& [core, pods] : holders) {
      if (pods.size() > 1) {
        out.insert(fmt::format("device {} is given to {}", core / shape_.cores_per_device,
                               fmt::join(pods, " and ")));
      }
    }
    return {out.begin(), out.end()};
  }

  // What `name`'s container really got, and what kubelet booked.
  std::vector<int> Real(const std::string& name, const std::string& container = "main") const {
    for (const Held& h : held_) {
      if (h.pod == name && h.container == container) return h.real;
    }
    return {};
  }

  // kubelet's PodResources: every pod it knows, with the ids it booked.
  Result<std::vector<nodeagent::AssignedDevices>> List() override {
    std::vector<nodeagent::AssignedDevices> out;
    for (const std::string& name : known_) {
      bool any = false;
      for (const Held& h : held_) {
        if (h.pod != name) continue;
        any = true;
        out.push_back({"default", name, h.container, h.resource->name,
                       nodeagent::UnitIds(h.resource->unit, h.booked)});
      }
      if (!any) out.push_back({"default", name, "", "", {}});
    }
    return out;
  }

 private:
  std::vector<int> FreeFor(const claims::ResourceSpec& resource) const {
    const int units = resource.unit == Unit::kDevice ? shape_.devices : shape_.cores;
    std::set<int> taken;
    for (const Held& h : held_) {
      if (h.resource == &resource) taken.insert(h.booked.begin(), h.booked.end());
    }
    std::vector<int> out;
    for (int id = 0; id < units; ++id) {
      if (taken.count(id) == 0) out.push_back(id);
    }
    return out;
  }

  FakePodSource& pods_;
  AllocationService& service_;
  const topology::NodeShape& shape_;
  std::set<std::string> known_;
  std::vector<Held> held_;
};

kube::Pod Created(kube::Pod pod, int second) {
  pod.creation_timestamp = fmt::format("2026-11-22T10:00:{:02}Z", second);
  return pod;
}

// Issue 18 row 2: x is created before y, but the extender bound y first (its NEURON_ALLOC_TIME
// is older). kubelet admits x first. Before the fix the plugin served "the oldest pending claim"
// to whichever container kubelet admitted: x got y's device and y got x's, the extender's books
// had them swapped, and when y ended the extender handed out the device x really uses to z,
// whom the plugin then overrode onto it: "device 0 is given to x and z".
TEST_F(DevicePluginAllocationTest, KubeletModelEachPodGetsItsOwnClaimInCreationOrder) {
  KubeletModel kubelet(pods_, service_, shape_);
  service_.set_kubelet_view(&kubelet);
  pods_.Add(Created(
      MakePod("x", {{"main", kNeuron, 1}}, RecordAnnotations({{"main", kNeuron, {1}}}, 200)), 1));
  pods_.Add(Created(
      MakePod("y", {{"main", kNeuron, 1}}, RecordAnnotations({{"main", kNeuron, {0}}}, 100)), 2));
  kubelet.See("x");
  kubelet.See("y");
  ASSERT_TRUE(kubelet.Admit("x").ok());
  ASSERT_TRUE(kubelet.Admit("y").ok());
  EXPECT_THAT(kubelet.Real("x"), ElementsAre(1)) << "x gets its own claim";
  EXPECT_THAT(kubelet.Real("y"), ElementsAre(0)) << "y gets its own claim";
  kubelet.Reconcile();

  kubelet.End("y");
  pods_.Add(Created(MakePod("z", {{"main", kNeuron, 1}},
                            RecordAnnotations({{"main", kNeuron, kubelet.ExtenderPick(1)}}, 300)),
                    3));
  ASSERT_TRUE(kubelet.Admit("z").ok());
  EXPECT_THAT(kubelet.Overlaps(), ::testing::IsEmpty());
  EXPECT_THAT(kubelet.Real("z"), ElementsAre(0));
}

// A pod the default scheduler placed (no record) is created before a recorded pod and admitted
// first. Before the fix, GetPreferredAllocation steered it onto the recorded pod's device and
// Allocate marked the recorded pod served; the recorded pod then got another device without a
// record, the extender handed that device out again, and the plugin overrode the newcomer onto
// it: "device 0 is given to a and e".
TEST_F(DevicePluginAllocationTest, KubeletModelDefaultSchedulerPodDoesNotTakeARecordedClaim) {
  KubeletModel kubelet(pods_, service_, shape_);
  service_.set_kubelet_view(&kubelet);
  pods_.Add(Created(MakePod("d", {{"main", kNeuron, 1}}), 1));
  pods_.Add(Created(
      MakePod("a", {{"main", kNeuron, 1}}, RecordAnnotations({{"main", kNeuron, {3}}}, 100)), 2));
  kubelet.See("d");
  kubelet.See("a");
  ASSERT_TRUE(kubelet.Admit("d").ok());
  ASSERT_TRUE(kubelet.Admit("a").ok());
  EXPECT_THAT(kubelet.Real("a"), ElementsAre(3)) << "a gets its own claim";
  kubelet.Reconcile();
  pods_.Add(Created(MakePod("e", {{"main", kNeuron, 1}},
                            RecordAnnotations({{"main", kNeuron, kubelet.ExtenderPick(1)}}, 300)),
                    3));
  ASSERT_TRUE(kubelet.Admit("e").ok());
  EXPECT_THAT(kubelet.Overlaps(), ::testing::IsEmpty());
}

// A pod the default scheduler placed (no record) that kubelet gives the ids a recorded pod's
// record reserves is refused, naming both pods, not matched to the recorded pod's claim (before
// the fix it was served as the recorded pod, which then got other ids without a record).
TEST_F(DevicePluginAllocationTest, DefaultSchedulerPodGivenARecordedPodsIdsIsRefused) {
  KubeletModel kubelet(pods_, service_, shape_);
  service_.set_kubelet_view(&kubelet);
  pods_.Add(Created(MakePod("d", {{"main", kNeuron, 1}}), 1));
  pods_.Add(Created(
      MakePod("a", {{"main", kNeuron, 1}}, RecordAnnotations({{"main", kNeuron, {3}}}, 100)), 2));
  kubelet.See("d");
  kubelet.See("a");
  auto grant = service_.Allocate(devices(), {3});  // kubelet admits d (created first) with 3
  ASSERT_FALSE(grant.ok()) << "granted " << grant->pod;
  EXPECT_THAT(grant.error(), HasSubstr("default/d container main"));
  EXPECT_THAT(grant.error(), HasSubstr("default/a container main holds aws.amazon.com/neuron 3"));
  EXPECT_NE(pods_.Get("a").annotations.at("NEURON_ALLOCATED"), "true");
}

// kubelet's PodResources is the truth across resources: a core pod is never given cores of a
// device another pod holds, even when kubelet (which books the two resources apart) offers them.
TEST_F(DevicePluginAllocationTest, CoresOfADeviceAnotherPodHoldsAreRefused) {
  KubeletModel kubelet(pods_, service_, shape_);
  service_.set_kubelet_view(&kubelet);
  pods_.Add(Created(MakePod("dev", {{"main", kNeuron, 1}}), 1));
  pods_.Add(Created(MakePod("core", {{"main", kCore, 1}}), 2));
  ASSERT_TRUE(kubelet.Admit("dev", /*ignore_preference=*/true).ok());  // device 0
  EXPECT_THAT(kubelet.Real("dev"), ElementsAre(0));
  // kubelet's own choice for the core pod: the lowest free core, 0, on device 0.
  auto refused = kubelet.Admit("core", /*ignore_preference=*/true);
  ASSERT_FALSE(refused.ok()) << "core 0 was given: "
                             << fmt::format("{}", fmt::join(kubelet.Overlaps(), "; "));
  EXPECT_THAT(refused.error(),
              HasSubstr("default/dev container main holds aws.amazon.com/neuron 0"));
  // Asked for a preference, the plugin steers kubelet off device 0.
  ASSERT_TRUE(kubelet.Admit("core").ok());
  EXPECT_THAT(kubelet.Overlaps(), ::testing::IsEmpty());
}

// When kubelet books other ids than the record (it did not follow GetPreferredAllocation), the
// container gets kubelet's ids and the plugin writes what it got in toposched.io/granted, which
// every reader of the pod's record (claims::RecordFromPod) then takes.
TEST_F(DevicePluginAllocationTest, KubeletsOtherChoiceIsGrantedAndWrittenBack) {
  KubeletModel kubelet(pods_, service_, shape_);
  service_.set_kubelet_view(&kubelet);
  pods_.Add(Created(MakePod("p", {{"main", kNeuron, 4}},
                            RecordAnnotations({{"main", kNeuron, {4, 5, 6, 7}}}, 100)),
                    1));
  ASSERT_TRUE(kubelet.Admit("p", /*ignore_preference=*/true).ok());
  EXPECT_THAT(kubelet.Real("p"), ElementsAre(0, 1, 2, 3)) << "kubelet's ids, never overridden";
  kubelet.Reconcile();
  const kube::Pod pod = pods_.Get("p");
  ASSERT_EQ(pod.annotations.count("toposched.io/granted"), 1u);
  auto record = claims::RecordFromPod(pod, service_.options().resources);
  ASSERT_TRUE(record.ok()) << record.error();
  ASSERT_EQ(record->containers.size(), 1u);
  EXPECT_THAT(record->containers[0].ids, ElementsAre(0, 1, 2, 3));
  // Written once: the next pass finds the books and the truth agree.
  const size_t patches = pods_.patches().size();
  kubelet.Reconcile();
  EXPECT_EQ(pods_.patches().size(), patches);
}

// Pods created in the same second: creationTimestamp has one-second resolution and kubelet's sort
// is not stable. kubelet's PodResources settles it: kubelet lists a pod from the moment it admits
// it, so the pod it knows and that holds nothing yet is the one being admitted.
TEST_F(DevicePluginAllocationTest, KubeletModelSameSecondTieIsSettledByWhatKubeletKnows) {
  KubeletModel kubelet(pods_, service_, shape_);
  service_.set_kubelet_view(&kubelet);
  pods_.Add(MakePod("a", {{"main", kNeuron, 1}}, RecordAnnotations({{"main", kNeuron, {0}}}, 100)));
  pods_.Add(MakePod("b", {{"main", kNeuron, 1}}, RecordAnnotations({{"main", kNeuron, {1}}}, 200)));
  ASSERT_TRUE(kubelet.Admit("b").ok());
  ASSERT_TRUE(kubelet.Admit("a").ok());
  EXPECT_THAT(kubelet.Real("b"), ElementsAre(1));
  EXPECT_THAT(kubelet.Real("a"), ElementsAre(0));
}

// Without PodResources the same tie is a guess, and here it is wrong (kubelet admits b, the plugin
// steers it to a's record). No id is given twice (the grants are kubelet's ids), and once
// PodResources answers, the truth written back by pod name puts the books right.
TEST_F(DevicePluginAllocationTest, KubeletModelSameSecondTieGuessedWrongStillGivesNoIdTwice) {
  KubeletModel kubelet(pods_, service_, shape_);  // the plugin does not read it
  pods_.Add(MakePod("a", {{"main", kNeuron, 1}}, RecordAnnotations({{"main", kNeuron, {0}}}, 100)));
  pods_.Add(MakePod("b", {{"main", kNeuron, 1}}, RecordAnnotations({{"main", kNeuron, {1}}}, 200)));
  ASSERT_TRUE(kubelet.Admit("b").ok());
  ASSERT_TRUE(kubelet.Admit("a").ok());
  EXPECT_THAT(kubelet.Real("b"), ElementsAre(0)) << "steered to a's record: the wrong guess";
  EXPECT_THAT(kubelet.Overlaps(), ::testing::IsEmpty());
  kubelet.Reconcile();
  EXPECT_EQ(pods_.Get("b").annotations.count("toposched.io/granted"), 1u);
  for (const std::string name : {"a", "b"}) {
    auto record = claims::RecordFromPod(pods_.Get(name), service_.options().resources);
    ASSERT_TRUE(record.ok()) << record.error();
    EXPECT_EQ(record->containers.at(0).ids, kubelet.Real(name)) << name << "'s books";
  }
}

}  // namespace
}  // namespace toposched::deviceplugin
