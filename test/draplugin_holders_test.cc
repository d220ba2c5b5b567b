// A node moved to DRA while device-plugin pods still run on it: the DRA plugin reads kubelet's
// PodResources (a fake kubelet PodResources server on a unix socket) and neither offers nor
// prepares the devices those containers hold, until they are gone. Without an answer from
// kubelet it offers nothing, prepares nothing and says why it is not ready.
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dra/offers.h"
#include "draplugin/plugin.h"
#include "draplugin_fixtures.h"
#include "node_fixtures.h"
#include "nodeagent/node_topology.h"
#include "nodeagent/sysfs.h"
#include "support/fake_apiserver.h"
#include "support/temp_dir.h"
#include "support/wait.h"

namespace toposched::draplugin {
namespace {

using testing::FakeApiServer;
using testing::FakeHost;
using testing::FakePodResources;
using ::testing::HasSubstr;
using testing::ShortTempDir;
using testing::WaitUntil;
using namespace std::chrono_literals;
using testing::ClaimJson;
using testing::FakePublisher;
constexpr const char* kNode = testing::kDraNode;

class DraHoldersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ =
        std::move(kube::ApiClient::FromKubeconfig(api_.WriteKubeconfig(files_ / "kubeconfig")))
            .value();
    api_.UpsertNode(testing::DraNodeJson());
  }

  void Start(const std::string& type, int lnc = 0) {
    host_.Install(type, lnc);
    nodeagent::HostPaths host;
    ASSERT_NO_FATAL_FAILURE(testing::DiscoverFakeHost(host_, host, topology_));
    DraPluginOptions options;
    options.node_name = kNode;
    options.host = host;
    options.cdi_root = dir_.path() + "/cdi";
    options.plugin_dir = dir_.path() + "/plugins/neuron.aws.com";
    options.registry_dir = dir_.path() + "/plugins_registry";
    options.health_interval = 50ms;
    options.pod_resources_socket = socket_;
    plugin_ = std::make_unique<DraPlugin>(options, topology_->shape, *client_, publisher_);
    const Status started = plugin_->Start();
    ASSERT_TRUE(started.ok()) << started.error();
  }

  // Prepares claim `name` allocated `device`; its error, empty when prepared.
  std::string Prepare(const std::string& name, const std::string& device) {
    const std::string uid = "uid-" + name;
    api_.ServeJson("/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/" + name,
                   ClaimJson(name, uid, {device}));
    auto outcomes = plugin_->Prepare({{"default", uid, name}});
    return outcomes.at(uid).error;
  }

  // The offers (partitionable, so sets and core ranges too) the last publish made.
  std::vector<dra::Offer> Offered() const {
    return dra::LegalOffers(topology_->shape, dra::OfferScope::kDeviceSetsAndCores,
                            publisher_.unhealthy());
  }

  ShortTempDir dir_;
  testing::TempDir files_;
  FakeHost host_{dir_.path()};
  std::string socket_ = dir_.path() + "/pod-resources.sock";
  FakeApiServer api_;
  std::unique_ptr<kube::ApiClient> client_;
  FakePublisher publisher_;
  std::unique_ptr<nodeagent::NodeTopology> topology_;
  std::unique_ptr<FakePodResources> kubelet_;
  std::unique_ptr<DraPlugin> plugin_;
};

constexpr topology::DeviceMask kDevices0To3 = 0xf;

bool Touches(const std::vector<dra::Offer>& offers, topology::DeviceMask devices) {
  for (const dra::Offer& offer : offers) {
    if ((offer.placement.devices & devices) != 0) return true;
  }
  return false;
}

// The node: a device-plugin pod holds neuron0-3 of an inf2.48xlarge labelled for DRA.
TEST_F(DraHoldersTest, DevicesADevicePluginPodHoldsAreNeitherOfferedNorPreparedUntilItGoes) {
  kubelet_ = std::make_unique<FakePodResources>(socket_);
  kubelet_->AddContainer("ml", "dp-pod", "trainer", "aws.amazon.com/neuron",
                         {"neuron0", "neuron1", "neuron2", "neuron3"});
  Start("inf2.48xlarge");

  EXPECT_EQ(publisher_.unhealthy() & kDevices0To3, kDevices0To3);
  EXPECT_FALSE(Touches(Offered(), kDevices0To3));
  EXPECT_TRUE(Touches(Offered(), topology::DeviceMask{1} << 4));

  const std::string refused = Prepare("first", "neurondevice0");
  EXPECT_THAT(refused, HasSubstr("ml/dp-pod"));
  EXPECT_THAT(refused, HasSubstr("trainer"));
  EXPECT_THAT(refused, HasSubstr("neurondevice0"));
  EXPECT_TRUE(plugin_->PreparedClaims().empty());
  // A device nobody holds is prepared as ever.
  EXPECT_EQ(Prepare("other", "neurondevice4"), "");

  // The pod ends: kubelet lists nothing, and the next publish offers the devices again.
  kubelet_.reset();
  kubelet_ = std::make_unique<FakePodResources>(socket_);
  EXPECT_TRUE(WaitUntil([&] { return publisher_.unhealthy() == 0; }, 10s))
      << "still withheld: " << publisher_.unhealthy();
  EXPECT_TRUE(Touches(Offered(), kDevices0To3));
  EXPECT_EQ(Prepare("first", "neurondevice0"), "");
}

// A core holder (aws.amazon.com/neuroncore) holds the device of its cores: inf2 has 2 cores a
// device, so neuroncore2 is on neuron1.
TEST_F(DraHoldersTest, ACoreHolderKeepsItsDeviceOutOfDra) {
  kubelet_ = std::make_unique<FakePodResources>(socket_);
  kubelet_->AddContainer("ml", "core-pod", "infer", "aws.amazon.com/neuroncore", {"neuroncore2"});
  Start("inf2.48xlarge");
  EXPECT_EQ(publisher_.unhealthy(), topology::DeviceMask{1} << 1);
  EXPECT_THAT(Prepare("pair", "neurondevices-0-1"), HasSubstr("ml/core-pod"));
  EXPECT_EQ(Prepare("zero", "neurondevice0"), "");
}

// The retired alias aws.amazon.com/neurondevice is the same resource.
TEST_F(DraHoldersTest, TheNeurondeviceAliasCounts) {
  kubelet_ = std::make_unique<FakePodResources>(socket_);
  kubelet_->AddContainer("ml", "old-pod", "app", "aws.amazon.com/neurondevice", {"neuron5"});
  kubelet_->AddContainer("ml", "gpu-pod", "app", "nvidia.com/gpu", {"GPU-1234"});
  Start("inf2.48xlarge");
  EXPECT_EQ(publisher_.unhealthy(), topology::DeviceMask{1} << 5);
  EXPECT_THAT(Prepare("five", "neurondevice5"), HasSubstr("ml/old-pod"));
}

// Core ids are logical cores at the node's LNC, as the device plugin numbers them: trn2 at LNC 2
// has 4 cores a device, so neuroncore5 is on neuron1.
TEST_F(DraHoldersTest, CoreIdsMapToDevicesAtTheNodesLnc) {
  kubelet_ = std::make_unique<FakePodResources>(socket_);
  kubelet_->AddContainer("ml", "core-pod", "infer", "aws.amazon.com/neuroncore", {"neuroncore5"});
  Start("trn2.48xlarge", 2);
  EXPECT_EQ(publisher_.unhealthy(), topology::DeviceMask{1} << 1);
  EXPECT_THAT(Prepare("one", "neurondevice1"), HasSubstr("ml/core-pod"));
  EXPECT_EQ(Prepare("zero", "neurondevice0"), "");
}

// An id that names no device of this node: which device it holds cannot be told, so nothing is
// prepared and the plugin says why.
TEST_F(DraHoldersTest, AnIdOfNoDeviceHereFailsClosed) {
  kubelet_ = std::make_unique<FakePodResources>(socket_);
  kubelet_->AddContainer("ml", "odd-pod", "app", "aws.amazon.com/neuron", {"neuron99"});
  Start("inf2.48xlarge");
  EXPECT_EQ(publisher_.unhealthy(), topology_->shape.AllDevices());
  EXPECT_THAT(Prepare("first", "neurondevice0"), HasSubstr("neuron99"));
  EXPECT_FALSE(plugin_->readiness().ready());
  EXPECT_THAT(plugin_->readiness().reason(), HasSubstr("ml/odd-pod"));
}

// A Trainium node restarted from --set-offers on to the default (whole devices only, no counters)
// while a claim prepared on a set still runs: the scheduler counts that claim against a device
// name the slices no longer carry, so the set's devices are withheld from the slices until the
// claim goes; a claim on a whole device (a name still published) withholds nothing.
TEST_F(DraHoldersTest, DevicesOfAClaimOnAnOfferNoLongerPublishedAreWithheld) {
  kubelet_ = std::make_unique<FakePodResources>(socket_);
  Start("trn2.48xlarge");
  ASSERT_EQ(Prepare("row", "neurondevices-4-7"), "");
  EXPECT_EQ(publisher_.unhealthy(), 0u);  // sets published: their counters keep 4-7 busy
  publisher_.set_sets_offered(false);
  ASSERT_EQ(Prepare("one", "neurondevice0"), "");
  EXPECT_EQ(publisher_.unhealthy(), topology::DeviceMask{0xf0});
  EXPECT_EQ(plugin_->Unprepare({{"default", "uid-row", "row"}}).at("uid-row"), "");
  EXPECT_EQ(publisher_.unhealthy(), 0u);
}

// No kubelet on the PodResources socket: nothing is offered, nothing prepared, not ready, and
// each says why.
TEST_F(DraHoldersTest, WithoutKubeletsAnswerNothingIsOfferedOrPrepared) {
  Start("inf2.48xlarge");
  EXPECT_EQ(publisher_.unhealthy(), topology_->shape.AllDevices());
  EXPECT_THAT(Prepare("first", "neurondevice0"), HasSubstr("PodResources"));
  EXPECT_TRUE(plugin_->PreparedClaims().empty());
  EXPECT_FALSE(plugin_->readiness().ready());
  EXPECT_THAT(plugin_->readiness().reason(), HasSubstr("PodResources"));

  // kubelet comes: an empty list is a node free of holders.
  kubelet_ = std::make_unique<FakePodResources>(socket_);
  EXPECT_TRUE(WaitUntil([&] { return publisher_.unhealthy() == 0; }, 10s));
  EXPECT_EQ(Prepare("first", "neurondevice0"), "");
  EXPECT_THAT(plugin_->readiness().reason(), ::testing::Not(HasSubstr("PodResources")));
}

}  // namespace
}  // namespace toposched::draplugin
