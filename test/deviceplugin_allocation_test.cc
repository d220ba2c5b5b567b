// The device plugin's choices without any socket: pod claims from annotations, Allocate by
// annotation (oldest first, exact ids, multi-container, init and sidecar containers, AWS-only
// annotations, one-or-all without annotation, errors, a gang member's env), preferences (topology
// legality, must-include, the pending pod's ids), container setup, and recording kubelet's
// assignment.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "deviceplugin/allocation.h"
#include "deviceplugin/manager.h"
#include "deviceplugin/pod_resources.h"
#include "deviceplugin_fixtures.h"
#include "extender/pod_requests.h"
#include "kube/allocation_record.h"

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

std::vector<ResourceSpec> Resources() { return DefaultResources(kNeuron, kCore); }

class DevicePluginAllocationTest : public ::testing::Test {
 protected:
  explicit DevicePluginAllocationTest(const std::string& type = "trn1.32xlarge")
      : shape_(Shape(type)),
        service_(pods_, shape_, {"node-a", CoreNumbering::kHost, Resources()}) {}

  const ResourceSpec& devices() const { return service_.options().resources[0]; }
  const ResourceSpec& cores() const { return service_.options().resources[1]; }

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
  const deviceplugin::ResourceSpec devices{
      "aws.amazon.com/neuron", topology::Unit::kDevice, {"aws.amazon.com/neurondevice"}};
  auto extender_view = extender::RequestsOf(pod, extender::ResourceNames{});
  ASSERT_TRUE(extender_view.ok()) << extender_view.error();
  ASSERT_EQ(extender_view->spec.containers.size(), 3u);
  for (size_t i = 0; i < pod.containers.size(); ++i) {
    EXPECT_EQ(deviceplugin::ContainerRequest(pod.containers[i], devices),
              extender_view->spec.containers[i].request.count)
        << pod.containers[i].name;
  }
  EXPECT_EQ(deviceplugin::ContainerRequest(both, devices), 4);
}

TEST(DevicePluginCacheTest, AllocateAsksTheApiWhenTheCacheLacksThePod) {
  LaggingPodSource pods;
  const auto shape = Shape("trn1.32xlarge");
  AllocationService service(pods, shape, {"node-a", CoreNumbering::kHost, Resources()});
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

TEST_F(DevicePluginAllocationTest, OldestPendingPodFirst) {
  pods_.Add(MakePod("young", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {8, 9, 10, 11}}}, 300)));
  pods_.Add(MakePod("old", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {4, 5, 6, 7}}}, 100)));
  pods_.Add(MakePod("done", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {0, 1, 2, 3}}}, 50)));
  ASSERT_TRUE(pods_.PatchAnnotations(pods_.Get("done"), {{"NEURON_ALLOCATED", "true"}}).ok());

  // kubelet's own ids match nobody: the oldest unserved pod wins.
  auto grant = service_.Allocate(devices(), {12, 13, 14, 15});
  ASSERT_TRUE(grant.ok()) << grant.error();
  EXPECT_EQ(grant->pod, "default/old");
  EXPECT_THAT(grant->ids, ElementsAre(4, 5, 6, 7));
  EXPECT_EQ(pods_.Get("old").annotations.at("NEURON_ALLOCATED"), "true");
  EXPECT_EQ(pods_.Get("old").annotations.at("toposched.io/allocated-containers"),
            "main=aws.amazon.com/neuron");

  grant = service_.Allocate(devices(), {12, 13, 14, 15});
  ASSERT_TRUE(grant.ok());
  EXPECT_EQ(grant->pod, "default/young");
  EXPECT_THAT(grant->ids, ElementsAre(8, 9, 10, 11));

  grant = service_.Allocate(devices(), {12, 13, 14, 15});
  ASSERT_FALSE(grant.ok());
  EXPECT_THAT(grant.error(), HasSubstr("no pod on node node-a is waiting for 4 "
                                       "aws.amazon.com/neuron"));
  EXPECT_THAT(grant.error(), HasSubstr("default/old container main: already allocated"));
}

TEST_F(DevicePluginAllocationTest, ExactIdsBeatAge) {
  pods_.Add(MakePod("a", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {0, 1, 2, 3}}}, 100)));
  pods_.Add(MakePod("b", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {4, 5, 6, 7}}}, 200)));
  auto grant = service_.Allocate(devices(), {4, 5, 6, 7});
  ASSERT_TRUE(grant.ok());
  EXPECT_EQ(grant->pod, "default/b");
}

TEST_F(DevicePluginAllocationTest, CountMustMatch) {
  pods_.Add(
      MakePod("two", {{"main", kCore, 2}}, RecordAnnotations({{"main", kCore, {6, 7}}}, 100)));
  pods_.Add(MakePod("eight", {{"main", kCore, 8}},
                    RecordAnnotations({{"main", kCore, {8, 9, 10, 11, 12, 13, 14, 15}}}, 200)));
  auto grant = service_.Allocate(cores(), {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_TRUE(grant.ok());
  EXPECT_EQ(grant->pod, "default/eight");
  EXPECT_THAT(grant->ids, ElementsAre(8, 9, 10, 11, 12, 13, 14, 15));
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
  // kubelet's order: init containers (the sidecar among them), then app containers.
  auto init = service_.Allocate(devices(), {15});
  ASSERT_TRUE(init.ok());
  EXPECT_EQ(init->container, "setup");
  EXPECT_THAT(init->ids, ElementsAre(8));
  auto sidecar = service_.Allocate(cores(), {30, 31});
  ASSERT_TRUE(sidecar.ok());
  EXPECT_EQ(sidecar->container, "proxy");
  EXPECT_THAT(sidecar->ids, ElementsAre(18, 19));
  EXPECT_EQ(pods_.Get("multi").annotations.at("NEURON_ALLOCATED"), "false");

  auto b = service_.Allocate(devices(), {4, 5, 6, 7});  // exact ids pick container b
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->container, "b");
  auto a = service_.Allocate(devices(), {8, 9, 10, 11});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->container, "a");
  EXPECT_THAT(a->ids, ElementsAre(0, 1, 2, 3));
  const kube::Pod pod = pods_.Get("multi");
  EXPECT_EQ(pod.annotations.at("NEURON_ALLOCATED"), "true");
  EXPECT_EQ(pod.annotations.at("toposched.io/allocated-containers"),
            "a=aws.amazon.com/neuron,b=aws.amazon.com/neuron,proxy=aws.amazon.com/neuroncore,"
            "setup=aws.amazon.com/neuron");
}

TEST_F(DevicePluginAllocationTest, AwsIdsAloneAreSplitInContainerOrder) {
  pods_.Add(MakePod("aws", {{"a", kNeuron, 1}, {"b", kNeuron, 1}},
                    {{"AWS_NEURON_IDS", "3,9"},
                     {"NEURON_ALLOCATED", "false"},
                     {"NEURON_ALLOC_TIME", "1743574052764891534"}}));
  auto first = service_.Allocate(devices(), {0});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->container, "a");
  EXPECT_THAT(first->ids, ElementsAre(3));
  auto second = service_.Allocate(devices(), {0});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->container, "b");
  EXPECT_THAT(second->ids, ElementsAre(9));
  EXPECT_EQ(pods_.Get("aws").annotations.at("NEURON_ALLOCATED"), "true");
}

TEST_F(DevicePluginAllocationTest, OneOrAllWorkWithoutAnnotation) {
  int kicks = 0;
  service_.set_on_unannotated_grant([&] { ++kicks; });
  pods_.Add(MakePod("plain", {{"main", kNeuron, 1}}));
  auto one = service_.Allocate(devices(), {6});
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->by_annotation);
  EXPECT_THAT(one->ids, ElementsAre(6));
  std::vector<int> all(16);
  for (int i = 0; i < 16; ++i) all[static_cast<size_t>(i)] = i;
  EXPECT_TRUE(service_.Allocate(devices(), all).ok());
  EXPECT_EQ(kicks, 2);
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

TEST_F(DevicePluginAllocationTest, BrokenRecordsAreExplained) {
  pods_.Add(MakePod("broken", {{"main", kNeuron, 4}},
                    {{"toposched.io/allocation", "{not json"}, {"NEURON_ALLOCATED", "false"}}));
  pods_.Add(MakePod("elsewhere", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {0, 1, 2, 3}}}, 100, "node-b")));
  pods_.Add(MakePod("liar", {{"main", kNeuron, 8}},
                    RecordAnnotations({{"main", kNeuron, {0, 1, 2, 3}}}, 100)));
  auto grant = service_.Allocate(devices(), {0, 1, 2, 3});
  ASSERT_FALSE(grant.ok());
  EXPECT_THAT(grant.error(), HasSubstr("default/broken: annotation toposched.io/allocation"));
  EXPECT_THAT(grant.error(), HasSubstr("records node node-b"));
  EXPECT_THAT(grant.error(), HasSubstr("container requests 8"));
}

// A gang member's record, as the extender writes it at bind: rank 1 of a 4-node UltraServer.
constexpr char kGangRecord[] =
    R"({"gang":"default/mpijob:train-a","size":4,"groupNodes":4,"rank":1,)"
    R"("nodes":["node-z","node-a","node-b","node-c"],"serverId":"bog79p1y8tetj5uu","nodeId":1,)"
    R"("rank0Host":"train-a-worker-0.train-a.default.svc"})";

TEST_F(DevicePluginAllocationTest, AGangMemberGetsItsRankAndUltraServerEnv) {
  auto notes = RecordAnnotations({{"main", kNeuron, {0, 1, 2, 3}}, {"side", kCore, {8}}}, 100);
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
  auto side = service_.Allocate(cores(), {8});
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
  auto setup = BuildContainerSetup(trn1, Unit::kDevice, {4, 5, 6, 7}, CoreNumbering::kHost);
  EXPECT_THAT(setup.device_nodes,
              ElementsAre("/dev/neuron4", "/dev/neuron5", "/dev/neuron6", "/dev/neuron7"));
  EXPECT_EQ(setup.envs.at("NEURON_RT_VISIBLE_CORES"), "8-15");
  EXPECT_EQ(setup.envs.count("NEURON_LOGICAL_NC_CONFIG"), 0u);
  setup = BuildContainerSetup(trn1, Unit::kDevice, {4, 5, 6, 7}, CoreNumbering::kContainer);
  EXPECT_EQ(setup.envs.at("NEURON_RT_VISIBLE_CORES"), "0-7");
  // Cores 5-6 touch devices 2 and 3; inside the container those are devices 0 and 1.
  setup = BuildContainerSetup(trn1, Unit::kCore, {5, 6}, CoreNumbering::kContainer);
  EXPECT_THAT(setup.device_nodes, ElementsAre("/dev/neuron2", "/dev/neuron3"));
  EXPECT_EQ(setup.envs.at("NEURON_RT_VISIBLE_CORES"), "1-2");
  setup = BuildContainerSetup(trn1, Unit::kCore, {5}, CoreNumbering::kHost);
  EXPECT_EQ(setup.envs.at("NEURON_RT_VISIBLE_CORES"), "5");
  const auto trn2 = Shape("trn2.48xlarge", 1);
  setup = BuildContainerSetup(trn2, Unit::kCore, {8, 9, 10}, CoreNumbering::kHost);
  EXPECT_THAT(setup.device_nodes, ElementsAre("/dev/neuron1"));
  EXPECT_EQ(setup.envs.at("NEURON_LOGICAL_NC_CONFIG"), "1");
  EXPECT_EQ(FormatCoreList({1, 3}), "1,3");
}

TEST(DevicePluginIdsTest, ParseAndFormat) {
  EXPECT_EQ(UnitId(Unit::kDevice, 3), "neuron3");
  EXPECT_EQ(UnitId(Unit::kCore, 12), "neuroncore12");
  EXPECT_EQ(*ParseUnitId(Unit::kDevice, "neuron15", 16), 15);
  EXPECT_FALSE(ParseUnitId(Unit::kDevice, "neuron16", 16).ok());
  EXPECT_FALSE(ParseUnitId(Unit::kDevice, "neuroncore1", 16).ok());
  EXPECT_FALSE(ParseUnitId(Unit::kCore, "neuron1", 16).ok());
  EXPECT_FALSE(ParseUnitId(Unit::kDevice, "neuron01", 16).ok());
  EXPECT_FALSE(ParseUnitId(Unit::kDevice, "neuron-1", 16).ok());
  EXPECT_THAT(*ParseUnitIds(Unit::kDevice, {"neuron3", "neuron1"}, 16), ElementsAre(1, 3));
  EXPECT_FALSE(ParseUnitIds(Unit::kDevice, {"neuron3", "neuron3"}, 16).ok());
  EXPECT_EQ(SocketName("toposched", "aws.amazon.com/neuroncore"), "toposched-neuroncore.sock");
  EXPECT_EQ(SocketName("p", "Example.com/GPU_x"), "p-gpu-x.sock");
}

TEST(DevicePluginRecordTest, KubeletAssignmentIsRecordedOnUnannotatedPods) {
  const auto shape = Shape("inf2.48xlarge");
  const RecordContext context{"node-a", "inf2.48xlarge", &shape, Resources()};
  std::vector<kube::Pod> pods = {
      MakePod("plain", {{"init", kNeuron, 1, true}, {"main", kNeuron, 1}}),
      MakePod("ours", {{"main", kNeuron, 2}}, RecordAnnotations({{"main", kNeuron, {2, 3}}}, 100)),
      MakePod("aws", {{"main", kCore, 1}}, {{"AWS_NEURON_IDS", "9"}}),
      MakePod("foreign", {{"main", kNeuron, 1}}),
  };
  const std::vector<AssignedDevices> assigned = {
      {"default", "plain", "main", kNeuron, {"neuron7"}},
      {"default", "plain", "init", kNeuron, {"neuron5"}},
      {"default", "ours", "main", kNeuron, {"neuron2", "neuron3"}},
      {"default", "aws", "main", kCore, {"neuroncore9"}},
      {"default", "foreign", "main", kNeuron, {"gpu-0"}},
      {"default", "gone", "main", kNeuron, {"neuron1"}},
  };
  std::vector<std::string> warnings;
  const auto patches = PlanRecordPatches(pods, assigned, context, 42, &warnings);
  ASSERT_EQ(patches.size(), 2u);
  EXPECT_EQ(patches[0].name, "plain");
  const auto& plain = patches[0].changes;
  auto record = kube::ParseAllocationRecord(*plain.at("toposched.io/allocation"));
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

}  // namespace
}  // namespace toposched::deviceplugin
