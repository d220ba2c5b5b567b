// Allocate by annotation end to end through the real API client: pods live in the loopback fake
// kube-apiserver, the plugin lists them with fieldSelector spec.nodeName and merge-patches
// NEURON_ALLOCATED, and kubelet's call arrives over the plugin's unix socket.
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/json_escape.h"
#include "deviceplugin/api_pod_source.h"
#include "deviceplugin/endpoint.h"
#include "deviceplugin/manager.h"
#include "deviceplugin_fixtures.h"
#include "kube/client.h"
#include "support/fake_apiserver.h"
#include "support/pods.h"
#include "support/temp_dir.h"
#include "support/wait.h"

namespace toposched::deviceplugin {
namespace {

using ::testing::HasSubstr;

constexpr char kNeuron[] = "aws.amazon.com/neuron";

std::string PodJson(const std::string& name, const std::string& node, int count,
                    const std::string& ids, int64_t alloc_time) {
  const std::string record = fmt::format(
      R"({{"node":"{}","instanceType":"trn1.32xlarge","containers":[{{"name":"main","resource":"{}","ids":[{}]}}]}})",
      node, kNeuron, ids);
  return testing::PodJson(
      testing::PodJsonSpec{.name = name,
                           .resource = kNeuron,
                           .count = count,
                           .node = node,
                           .annotations = {{"toposched.io/allocation", record},
                                           {"AWS_NEURON_IDS", ids},
                                           {"NEURON_ALLOCATED", "false"},
                                           {"NEURON_ALLOC_TIME", std::to_string(alloc_time)},
                                           {"keep", "me"}}});
}

class DevicePluginApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto client =
        kube::ApiClient::FromKubeconfig(api_.WriteKubeconfig(config_dir_.path() + "/kubeconfig"));
    ASSERT_TRUE(client.ok()) << client.error();
    client_ = std::move(client).value();
    source_ = std::make_unique<ApiPodSource>(*client_, "node-a");
    service_ = std::make_unique<AllocationService>(
        *source_, shape_,
        AllocatorOptions{"node-a", nodeagent::CoreNumbering::kContainer, resources_});
  }

  testing::FakeApiServer api_;
  testing::TempDir config_dir_;
  topology::NodeShape shape_ =
      *topology::NodeShape::Make(*topology::Catalog::Embedded().Find("trn1.32xlarge"));
  std::vector<claims::ResourceSpec> resources_ =
      DefaultResources(kNeuron, "aws.amazon.com/neuroncore");
  std::unique_ptr<kube::ApiClient> client_;
  std::unique_ptr<ApiPodSource> source_;
  std::unique_ptr<AllocationService> service_;
};

TEST_F(DevicePluginApiTest, AllocateOverTheSocketPatchesThePod) {
  api_.UpsertPod(PodJson("young", "node-a", 4, "8,9,10,11", 300));
  api_.UpsertPod(PodJson("old", "node-a", 4, "4,5,6,7", 100));
  api_.UpsertPod(PodJson("elsewhere", "node-b", 4, "0,1,2,3", 50));

  testing::ShortTempDir dir;
  HealthBoard health(16);
  PluginEndpoint endpoint(resources_[0], dir.path(), "p.sock",
                          {&shape_, &health, service_.get(), nodeagent::CoreNumbering::kContainer});
  ASSERT_TRUE(endpoint.Start().ok());
  auto stub = v1beta1::DevicePlugin::NewStub(
      grpc::CreateChannel("unix://" + endpoint.socket_path(), grpc::InsecureChannelCredentials()));

  grpc::ClientContext prefer_context;
  v1beta1::PreferredAllocationRequest prefer;
  auto* ask = prefer.add_container_requests();
  for (int d = 0; d < 16; ++d) ask->add_available_deviceids("neuron" + std::to_string(d));
  ask->set_allocation_size(4);
  v1beta1::PreferredAllocationResponse preferred;
  ASSERT_TRUE(stub->GetPreferredAllocation(&prefer_context, prefer, &preferred).ok());
  EXPECT_THAT(preferred.container_responses(0).deviceids(),
              ::testing::ElementsAre("neuron4", "neuron5", "neuron6", "neuron7"));

  grpc::ClientContext context;
  v1beta1::AllocateRequest request;
  auto* container = request.add_container_requests();
  for (int d = 4; d < 8; ++d) container->add_devices_ids("neuron" + std::to_string(d));
  v1beta1::AllocateResponse response;
  const grpc::Status status = stub->Allocate(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.container_responses(0).envs().at("NEURON_RT_VISIBLE_CORES"), "0-7");
  EXPECT_EQ(response.container_responses(0).devices_size(), 4);

  const auto old_json = api_.GetPodJson("default", "old");
  ASSERT_TRUE(old_json.has_value());
  EXPECT_THAT(*old_json, HasSubstr(R"("NEURON_ALLOCATED":"true")"));
  EXPECT_THAT(*old_json, HasSubstr(R"("keep":"me")"));
  EXPECT_THAT(*api_.GetPodJson("default", "young"), HasSubstr(R"("NEURON_ALLOCATED":"false")"));

  const auto lists = api_.RequestsMatching("GET", "/api/v1/pods");
  ASSERT_FALSE(lists.empty());
  EXPECT_THAT(lists.back().query, HasSubstr("fieldSelector=spec.nodeName%3Dnode-a"));
  const auto patches = api_.RequestsMatching("PATCH", "/api/v1/namespaces/default/pods/old");
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].content_type, "application/merge-patch+json");
  endpoint.Stop();
}

TEST_F(DevicePluginApiTest, ApiErrorsReachTheOperator) {
  api_.InjectFailure({"GET", "/api/v1/pods", 403, std::chrono::milliseconds(0), -1});
  auto grant = service_->Allocate(resources_[0], {0, 1, 2, 3});
  ASSERT_FALSE(grant.ok());
  EXPECT_THAT(grant.error(), HasSubstr("listing pods on node node-a failed"));
  EXPECT_THAT(grant.error(), HasSubstr("403"));
  // One device needs no pod.
  EXPECT_TRUE(service_->Allocate(resources_[0], {3}).ok());
}

TEST_F(DevicePluginApiTest, WatchedSourceServesFromItsCacheAndAsksTheApiOnAMiss) {
  api_.UpsertPod(PodJson("old", "node-a", 4, "4,5,6,7", 100));
  api_.UpsertPod(PodJson("elsewhere", "node-b", 4, "0,1,2,3", 50));
  WatchedPodSource watched(*client_, "node-a");
  ASSERT_TRUE(watched.WaitForSync(std::chrono::seconds(5)));
  AllocationService service(
      watched, shape_,
      AllocatorOptions{"node-a", nodeagent::CoreNumbering::kContainer, resources_});

  const size_t lists_before = api_.RequestsMatching("GET", "/api/v1/pods").size();
  EXPECT_EQ(service.Prefer(resources_[0], {0, 1, 2, 3, 4, 5, 6, 7}, {}, 4),
            (std::vector<int>{4, 5, 6, 7}));
  auto first = service.Allocate(resources_[0], {4, 5, 6, 7});
  ASSERT_TRUE(first.ok()) << first.error();
  EXPECT_EQ(first->pod, "default/old");
  // Answered from the watch's cache: no list went to the API (only the watch is open).
  for (const auto& request : api_.RequestsMatching("GET", "/api/v1/pods")) {
    if (request.query.find("watch=") == std::string::npos) continue;
    EXPECT_THAT(request.query, HasSubstr("fieldSelector=spec.nodeName%3Dnode-a"));
  }
  size_t plain_lists = 0;
  for (const auto& request : api_.RequestsMatching("GET", "/api/v1/pods")) {
    if (request.query.find("watch=") == std::string::npos) ++plain_lists;
  }
  EXPECT_EQ(plain_lists, 1u) << "only the informer's first list (had " << lists_before << ")";

  // A pod bound later reaches the cache through the watch.
  api_.UpsertPod(PodJson("new", "node-a", 4, "8,9,10,11", 200));
  testing::WaitUntil(
      [&] {
        auto cached = watched.PodsOnNode();
        return cached.ok() && cached->size() == 2;
      },
      std::chrono::seconds(2));
  auto second = service.Allocate(resources_[0], {8, 9, 10, 11});
  ASSERT_TRUE(second.ok()) << second.error();
  EXPECT_EQ(second->pod, "default/new");
}

// Issue 18: why an Allocate was refused reaches the pod as a Warning event, and the node's LNC
// label is a merge-patch of the node. (The fake API server keeps no nodes to patch: the request
// is what is checked, and the error names what failed.)
TEST_F(DevicePluginApiTest, RefusalEventsAndTheLncLabelGoToTheApi) {
  kube::Pod pod;
  pod.ns = "default";
  pod.name = "p";
  pod.uid = "p-uid";
  ASSERT_TRUE(source_->PostWarning(pod, "NeuronAllocationRefused", "refusing neuron 3").ok());
  const auto events = api_.RequestsMatching("POST", "/api/v1/namespaces/default/events");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_THAT(events[0].body, HasSubstr(R"("reason":"NeuronAllocationRefused")"));
  EXPECT_THAT(events[0].body, HasSubstr(R"("type":"Warning")"));
  EXPECT_THAT(events[0].body, HasSubstr("toposched-device-plugin"));

  const Status labelled = source_->PatchNodeLabel("toposched.io/neuron-lnc", "1");
  const auto patches = api_.RequestsMatching("PATCH", "/api/v1/nodes/node-a");
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].body, R"({"metadata":{"labels":{"toposched.io/neuron-lnc":"1"}}})");
  EXPECT_EQ(patches[0].content_type, "application/merge-patch+json");
  ASSERT_FALSE(labelled.ok());
  EXPECT_THAT(labelled.error(),
              HasSubstr("labelling node node-a toposched.io/neuron-lnc: not found (HTTP 404)"));
}

}  // namespace
}  // namespace toposched::deviceplugin
