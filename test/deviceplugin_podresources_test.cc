// kubelet's PodResources beyond List, against a fake kubelet PodResources server on a unix socket
// in a temp dir that offers or refuses each call: Get for one pod (and List when kubelet has no
// Get, remembered), GetAllocatableResources and its comparison with the advertised ids, the
// readiness and metrics built on it, and the probe endpoint that serves them.
#include <chrono>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "claims/resources.h"
#include "deviceplugin/allocation.h"
#include "deviceplugin_fixtures.h"
#include "net/http_client.h"
#include "nodeagent/pod_resources.h"
#include "nodeagent/probe.h"
#include "nodeagent/readiness.h"
#include "support/temp_dir.h"
#include "topology/catalog.h"

namespace toposched::deviceplugin {
namespace {

using ::testing::ElementsAre;
using testing::FakePodResources;
using testing::FakePodSource;
using ::testing::HasSubstr;
using testing::MakePod;
using testing::ShortTempDir;
using namespace std::chrono_literals;

constexpr char kNeuron[] = "aws.amazon.com/neuron";
constexpr char kCore[] = "aws.amazon.com/neuroncore";

class PodResourcesTest : public ::testing::Test {
 protected:
  PodResourcesTest() {
    kubelet_.AddContainer("default", "web", "main", kNeuron, {"neuron3", "neuron4"});
    kubelet_.AddContainer("default", "other", "main", kNeuron, {"neuron0"});
  }

  ShortTempDir dir_;
  const std::string socket_ = dir_.path() + "/kubelet.sock";
  FakePodResources kubelet_{socket_};
  nodeagent::PodResourcesClient client_{socket_};
};

TEST_F(PodResourcesTest, GetReadsOnePodWhenOffered) {
  kubelet_.Offer(/*get=*/true, /*allocatable=*/false);
  auto web = client_.Get("default", "web", 5s);
  ASSERT_TRUE(web.ok()) << web.error();
  ASSERT_TRUE(web->has_value());
  ASSERT_EQ((*web)->size(), 1u);
  const nodeagent::AssignedDevices& item = (*web)->front();
  EXPECT_EQ(item.ns, "default");
  EXPECT_EQ(item.pod, "web");
  EXPECT_EQ(item.container, "main");
  EXPECT_EQ(item.resource, kNeuron);
  EXPECT_THAT(item.device_ids, ElementsAre("neuron3", "neuron4"));
  EXPECT_EQ(kubelet_.list_calls(), 0);
  EXPECT_THAT(kubelet_.gets(), ElementsAre("default/web"));
}

// kubelet 1.21+ sends one ContainerDevices per device id (the fake does too): a container's ids
// come back together, from List as from Get.
TEST_F(PodResourcesTest, OneItemPerContainerAndResource) {
  auto listed = client_.List(5s);
  ASSERT_TRUE(listed.ok()) << listed.error();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].pod, "web");
  EXPECT_THAT((*listed)[0].device_ids, ElementsAre("neuron3", "neuron4"));
  EXPECT_THAT((*listed)[1].device_ids, ElementsAre("neuron0"));
}

TEST_F(PodResourcesTest, GetOfAPodKubeletDoesNotKnowIsEmptyNotAnError) {
  kubelet_.Offer(true, false);
  auto gone = client_.Get("default", "gone", 5s);
  ASSERT_TRUE(gone.ok()) << gone.error();
  ASSERT_TRUE(gone->has_value());
  EXPECT_TRUE((*gone)->empty());
}

TEST_F(PodResourcesTest, GetNotOfferedIsRememberedUntilKubeletRestarts) {
  // kubelet 1.20: UNIMPLEMENTED.
  auto first = client_.Get("default", "web", 5s);
  ASSERT_TRUE(first.ok()) << first.error();
  EXPECT_FALSE(first->has_value());
  auto second = client_.Get("default", "web", 5s);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->has_value());
  EXPECT_EQ(kubelet_.get_calls(), 1);  // not asked again
  // An upgraded kubelet may offer it.
  kubelet_.Offer(true, false);
  client_.KubeletRestarted();
  auto third = client_.Get("default", "web", 5s);
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(third->has_value());
  EXPECT_EQ(kubelet_.get_calls(), 2);
}

TEST_F(PodResourcesTest, GetWithTheFeatureGateOffIsNotOffered) {
  kubelet_.RefuseGetAsGateOff();  // kubelet 1.27-1.33 by default
  auto web = client_.Get("default", "web", 5s);
  ASSERT_TRUE(web.ok()) << web.error();
  EXPECT_FALSE(web->has_value());
}

TEST_F(PodResourcesTest, GetAnsweringForAnotherPodIsAnError) {
  kubelet_.Offer(true, false);
  kubelet_.AnswerGetWith("default", "other");
  auto web = client_.Get("default", "web", 5s);
  ASSERT_FALSE(web.ok());
  EXPECT_THAT(web.error(), HasSubstr("Get default/web"));
  EXPECT_THAT(web.error(), HasSubstr("answered for pod 'default/other'"));
  // A bad answer is not "not offered": the next call asks again.
  EXPECT_FALSE(client_.Get("default", "web", 5s).ok());
  EXPECT_EQ(kubelet_.get_calls(), 2);
}

TEST_F(PodResourcesTest, AllocatableWhenOfferedAndNotWhenRefused) {
  auto refused = client_.Allocatable(5s);
  ASSERT_TRUE(refused.ok()) << refused.error();
  EXPECT_FALSE(refused->has_value());
  EXPECT_FALSE(client_.Allocatable(5s)->has_value());
  EXPECT_EQ(kubelet_.allocatable_calls(), 1);

  kubelet_.Offer(false, true);
  kubelet_.SetAllocatable({{kNeuron, {"neuron1", "neuron0"}}, {"example.com/gpu", {"g0"}}});
  client_.KubeletRestarted();
  auto held = client_.Allocatable(5s);
  ASSERT_TRUE(held.ok()) << held.error();
  ASSERT_TRUE(held->has_value());
  EXPECT_THAT((*held)->at(kNeuron), ElementsAre("neuron0", "neuron1"));
  EXPECT_THAT((*held)->at("example.com/gpu"), ElementsAre("g0"));
}

TEST_F(PodResourcesTest, AllocatableEntryWithoutAResourceIsAnError) {
  kubelet_.Offer(false, true);
  kubelet_.SetAllocatable({{"", {"neuron0"}}});
  auto held = client_.Allocatable(5s);
  ASSERT_FALSE(held.ok());
  EXPECT_THAT(held.error(), HasSubstr("an entry without a resource name (ids neuron0)"));
}

TEST_F(PodResourcesTest, RecordsOnePodWithGet) {
  kubelet_.Offer(true, false);
  FakePodSource pods;
  pods.Add(MakePod("web", {{"main", kNeuron, 2}}));
  pods.Add(MakePod("other", {{"main", kNeuron, 1}}));
  const topology::InstanceType* type = topology::Catalog::Embedded().Find("inf2.48xlarge");
  ASSERT_NE(type, nullptr);
  const topology::NodeShape shape = *topology::NodeShape::Make(*type);
  const nodeagent::RecordContext context{"node-a", "inf2.48xlarge", &shape,
                                         claims::DefaultResources(kNeuron, kCore)};
  auto patched = nodeagent::RecordKubeletAssignment(client_, pods, context, "default/web");
  ASSERT_TRUE(patched.ok()) << patched.error();
  ASSERT_TRUE(patched->has_value());
  EXPECT_EQ(**patched, 1);
  EXPECT_EQ(pods.Get("web").annotations.at("AWS_NEURON_IDS"), "3,4");
  // Only the pod asked for: "other" waits for the List pass.
  EXPECT_EQ(pods.Get("other").annotations.count("AWS_NEURON_IDS"), 0u);
  EXPECT_EQ(kubelet_.list_calls(), 0);

  kubelet_.Offer(false, false);
  client_.KubeletRestarted();
  auto fallback = nodeagent::RecordKubeletAssignment(client_, pods, context, "default/other");
  ASSERT_TRUE(fallback.ok()) << fallback.error();
  EXPECT_FALSE(fallback->has_value());  // the caller does the List pass
  auto listed = nodeagent::RecordKubeletAssignments(client_, pods, context);
  ASSERT_TRUE(listed.ok()) << listed.error();
  EXPECT_EQ(*listed, 1);
  EXPECT_EQ(pods.Get("other").annotations.at("AWS_NEURON_IDS"), "0");
}

// Issue 29 row 2: the node ran toposched's DRA driver, its label was removed while a DRA claim
// still held neurondevice0, and the device plugin came back. kubelet (1.34+) lists the claim's
// device in dynamic_resources; before the fix the plugin read only `devices`, so it granted
// device 0 (and its cores) to a new pod and steered kubelet's preference onto it.
TEST(DraClaimsTest, ADraClaimsDeviceIsNeverGrantedNorPreferred) {
  ShortTempDir dir;
  FakePodResources kubelet(dir.path() + "/kubelet.sock");
  nodeagent::PodResourcesClient client(dir.path() + "/kubelet.sock");
  kubelet.AddClaim("default", "dra-pod", "main", "c0", "neuron.aws.com", "node-a", "neurondevice0");
  // Not ours: another driver, and our driver's device in another node's pool.
  kubelet.AddClaim("default", "gpu-pod", "main", "g1", "gpu.example.com", "node-a",
                   "neurondevice1");
  kubelet.AddClaim("default", "far-pod", "main", "c2", "neuron.aws.com", "node-b", "neurondevice2");
  const topology::NodeShape shape =
      *topology::NodeShape::Make(*topology::Catalog::Embedded().Find("inf2.48xlarge"));
  FakePodSource pods;
  pods.Add(MakePod("new", {{"main", kNeuron, 1}}));
  AllocationService service(
      pods, shape,
      {"node-a", nodeagent::CoreNumbering::kHost, claims::DefaultResources(kNeuron, kCore)});
  service.set_kubelet_view(&client);
  const claims::ResourceSpec& devices = service.options().resources[0];
  const claims::ResourceSpec& cores = service.options().resources[1];
  auto refused = service.Allocate(devices, {0});
  ASSERT_FALSE(refused.ok()) << "device 0 was granted to default/new while DRA claim c0 holds it";
  EXPECT_THAT(refused.error(), HasSubstr("default/dra-pod container main holds DRA device "
                                         "neurondevice0 of claim default/c0"));
  EXPECT_FALSE(service.Allocate(cores, {1}).ok()) << "core 1 is on device 0";

  std::vector<int> all;
  for (int id = 0; id < shape.devices; ++id) all.push_back(id);
  const std::vector<int> preferred = service.Prefer(devices, all, {}, 1);
  ASSERT_EQ(preferred.size(), 1u);
  EXPECT_NE(preferred[0], 0) << "the free-id fallback steered kubelet onto the DRA claim's device";
  EXPECT_TRUE(service.Allocate(devices, preferred).ok());
}

// Which listed DRA devices hold units here: our driver's, in this node's pool, as offers.
TEST(DraClaimsTest, DraHoldsAreOurDriversDevicesInThisPool) {
  ShortTempDir dir;
  FakePodResources kubelet(dir.path() + "/kubelet.sock");
  nodeagent::PodResourcesClient client(dir.path() + "/kubelet.sock");
  kubelet.AddClaim("default", "dra-pod", "main", "c0", "neuron.aws.com", "node-a",
                   "neurondevices-4-5");
  kubelet.AddClaim("default", "gpu-pod", "main", "g1", "gpu.example.com", "node-a",
                   "neurondevice1");
  kubelet.AddClaim("default", "far-pod", "main", "c2", "neuron.aws.com", "node-b", "neurondevice2");
  kubelet.AddClaim("default", "bad-pod", "main", "c3", "neuron.aws.com", "node-a",
                   "neurondevice99");
  auto listed = client.List(5s);
  ASSERT_TRUE(listed.ok()) << listed.error();
  const topology::NodeShape shape =
      *topology::NodeShape::Make(*topology::Catalog::Embedded().Find("inf2.48xlarge"));
  std::vector<std::string> warnings;
  const std::vector<nodeagent::DraHold> holds =
      nodeagent::DraHolds(*listed, shape, "node-a", &warnings);
  ASSERT_EQ(holds.size(), 1u);
  EXPECT_EQ(holds[0].pod, "default/dra-pod");
  EXPECT_EQ(holds[0].container, "main");
  EXPECT_EQ(holds[0].claim, "default/c0");
  EXPECT_THAT(holds[0].offer.placement.ids, ElementsAre(4, 5));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("DRA claim default/c3 holds node-a/neurondevice99"));
}

TEST(CompareAllocatableTest, MissingAndExtraPerServedResource) {
  const std::map<std::string, std::set<std::string>> advertised{
      {kNeuron, {"neuron0", "neuron1", "neuron2"}}, {kCore, {"neuroncore0", "neuroncore1"}}};
  const std::map<std::string, std::set<std::string>> kubelet{
      {kNeuron, {"neuron0", "neuron2", "neuron7"}},
      {kCore, {"neuroncore0", "neuroncore1"}},
      {"example.com/gpu", {"g0"}}};  // another plugin's: not ours to judge
  const auto diffs = nodeagent::CompareAllocatable(advertised, kubelet);
  ASSERT_EQ(diffs.size(), 2u);
  EXPECT_EQ(diffs[0].resource, kNeuron);
  EXPECT_EQ(diffs[0].advertised, 3u);
  EXPECT_THAT(diffs[0].missing, ElementsAre("neuron1"));
  EXPECT_THAT(diffs[0].extra, ElementsAre("neuron7"));
  EXPECT_TRUE(diffs[1].matches());
  EXPECT_EQ(nodeagent::DescribeMismatch(diffs),
            "aws.amazon.com/neuron: kubelet lacks 1 of the 3 advertised healthy (neuron1); "
            "kubelet holds 1 not advertised healthy (neuron7)");
  // kubelet without the resource at all (not read our list yet): every id is missing.
  const auto none = nodeagent::CompareAllocatable(advertised, {});
  EXPECT_EQ(none[0].missing.size(), 3u);
  EXPECT_EQ(none[1].missing.size(), 2u);
}

TEST(ReadinessTest, MetricsAndProbeEndpoint) {
  nodeagent::Readiness readiness;
  auto server = nodeagent::StartProbeServer("127.0.0.1", 0, readiness);
  ASSERT_TRUE(server.ok()) << server.error();
  net::HttpClient http{net::HttpClientOptions{}};
  auto get = [&](const std::string& path) {
    net::HttpClientRequest request;
    request.url = "http://127.0.0.1:" + std::to_string((*server)->port()) + path;
    request.timeout = 10s;
    return http.Send(request);
  };
  readiness.Set(false, "registering aws.amazon.com/neuron with kubelet");
  auto not_ready = get("/readyz");
  ASSERT_TRUE(not_ready.ok()) << not_ready.error();
  EXPECT_EQ(not_ready->status, 503);
  EXPECT_EQ(not_ready->body, "registering aws.amazon.com/neuron with kubelet\n");
  EXPECT_EQ(get("/healthz")->status, 200);
  EXPECT_EQ(get("/nothing")->status, 404);

  readiness.Record(nodeagent::Readiness::Check::kMismatch,
                   nodeagent::CompareAllocatable({{kNeuron, {"neuron0", "neuron1"}}}, {}));
  readiness.Set(true, "registered; kubelet holds every advertised healthy id");
  auto ready = get("/readyz");
  EXPECT_EQ(ready->status, 200);
  EXPECT_THAT(ready->body, HasSubstr("kubelet holds"));
  auto metrics = get("/metrics");
  ASSERT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->body, HasSubstr("toposched_device_plugin_ready 1"));
  EXPECT_THAT(metrics->body,
              HasSubstr("toposched_device_plugin_allocatable_mismatch_ids{resource=\"aws.amazon."
                        "com/neuron\",side=\"missing\"} 2"));
  EXPECT_THAT(metrics->body,
              HasSubstr("toposched_device_plugin_allocatable_checks_total{result=\"mismatch\"} 1"));
}

}  // namespace
}  // namespace toposched::deviceplugin
