// The DRA plugin end to end over unix sockets in a temp dir: a fake kubelet (gRPC clients of the
// registration and DRAPlugin sockets), the fake API server serving ResourceClaims, a fake Neuron
// host tree, and the CDI directory the plugin writes. Prepare, per-claim errors, unprepare, the
// CDI checkpoint across a restart, and registration.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dra.grpc.pb.h"
#include "draplugin/cdi.h"
#include "draplugin/plugin.h"
#include "draplugin_fixtures.h"
#include "node_fixtures.h"
#include "nodeagent/node_topology.h"
#include "nodeagent/sysfs.h"
#include "pluginregistration.grpc.pb.h"
#include "support/fake_apiserver.h"
#include "support/temp_dir.h"
#include "support/wait.h"

namespace toposched::draplugin {
namespace {

namespace dra_v1 = k8s::io::kubelet::pkg::apis::dra::v1;
namespace fs = std::filesystem;
using ::testing::AnyOf;
using ::testing::ElementsAre;
using testing::FakeApiServer;
using testing::FakeHost;
using ::testing::HasSubstr;
using testing::ShortTempDir;
using testing::WaitUntil;
using namespace std::chrono_literals;
using testing::ClaimJson;
using testing::ClaimPath;
using testing::FakePublisher;
constexpr const char* kNode = testing::kDraNode;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class FakeKubelet {
 public:
  FakeKubelet(const std::string& dra_socket, const std::string& registration_socket)
      : dra_(dra_v1::DRAPlugin::NewStub(
            grpc::CreateChannel("unix://" + dra_socket, grpc::InsecureChannelCredentials()))),
        registration_(pluginregistration::Registration::NewStub(grpc::CreateChannel(
            "unix://" + registration_socket, grpc::InsecureChannelCredentials()))) {}

  dra_v1::NodePrepareResourcesResponse Prepare(
      const std::vector<std::pair<std::string, std::string>>& claims) {
    dra_v1::NodePrepareResourcesRequest request;
    for (const auto& [name, uid] : claims) {
      dra_v1::Claim* claim = request.add_claims();
      claim->set_namespace_("default");
      claim->set_name(name);
      claim->set_uid(uid);
    }
    dra_v1::NodePrepareResourcesResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    const grpc::Status status = dra_->NodePrepareResources(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  dra_v1::NodeUnprepareResourcesResponse Unprepare(const std::string& name,
                                                   const std::string& uid) {
    dra_v1::NodeUnprepareResourcesRequest request;
    dra_v1::Claim* claim = request.add_claims();
    claim->set_namespace_("default");
    claim->set_name(name);
    claim->set_uid(uid);
    dra_v1::NodeUnprepareResourcesResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    const grpc::Status status = dra_->NodeUnprepareResources(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  pluginregistration::PluginInfo GetInfo() {
    pluginregistration::PluginInfo info;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    const grpc::Status status =
        registration_->GetInfo(&context, pluginregistration::InfoRequest(), &info);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return info;
  }

  void Notify(bool registered, const std::string& error) {
    pluginregistration::RegistrationStatus request;
    request.set_plugin_registered(registered);
    request.set_error(error);
    pluginregistration::RegistrationStatusResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    const grpc::Status status =
        registration_->NotifyRegistrationStatus(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }

 private:
  std::unique_ptr<dra_v1::DRAPlugin::Stub> dra_;
  std::unique_ptr<pluginregistration::Registration::Stub> registration_;
};

class DraPluginServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ =
        std::move(kube::ApiClient::FromKubeconfig(api_.WriteKubeconfig(files_ / "kubeconfig")))
            .value();
    api_.UpsertNode(testing::DraNodeJson());
  }

  // Installs `type` in the fake host and starts a plugin on it.
  void Start(const std::string& type, int lnc = 0,
             nodeagent::CoreNumbering numbering = nodeagent::CoreNumbering::kHost) {
    if (!installed_) host_.Install(type, lnc);
    installed_ = true;
    nodeagent::HostPaths host;
    ASSERT_NO_FATAL_FAILURE(testing::DiscoverFakeHost(host_, host, topology_));
    DraPluginOptions options;
    options.node_name = kNode;
    options.host = host;
    options.cdi_root = cdi();
    options.plugin_dir = dir_.path() + "/plugins/neuron.aws.com";
    options.registry_dir = dir_.path() + "/plugins_registry";
    options.numbering = numbering;
    options.health_interval = 50ms;
    plugin_ = std::make_unique<DraPlugin>(options, topology_->shape, *client_, publisher_);
    const Status started = plugin_->Start();
    ASSERT_TRUE(started.ok()) << started.error();
    kubelet_ = std::make_unique<FakeKubelet>(plugin_->dra_socket(), plugin_->registration_socket());
  }

  void Restart() {
    kubelet_.reset();
    plugin_.reset();
    Start("");
  }

  std::string cdi() const { return dir_.path() + "/cdi"; }
  std::string SpecPath(const std::string& uid) const { return CdiSpecPath(cdi(), uid); }
  nlohmann::json Spec(const std::string& uid) const {
    return nlohmann::json::parse(ReadText(SpecPath(uid)));
  }

  ShortTempDir dir_;
  testing::TempDir files_;
  FakeHost host_{dir_.path()};
  bool installed_ = false;
  FakeApiServer api_;
  std::unique_ptr<kube::ApiClient> client_;
  FakePublisher publisher_;
  std::unique_ptr<nodeagent::NodeTopology> topology_;
  std::unique_ptr<DraPlugin> plugin_;
  std::unique_ptr<FakeKubelet> kubelet_;
};

TEST_F(DraPluginServerTest, RegistrationAnswersGetInfoAndTurnsReady) {
  Start("inf2.48xlarge");
  EXPECT_TRUE(fs::exists(dir_.path() + "/plugins_registry/neuron.aws.com-reg.sock"));
  EXPECT_TRUE(fs::exists(dir_.path() + "/plugins/neuron.aws.com/dra.sock"));
  const pluginregistration::PluginInfo info = kubelet_->GetInfo();
  EXPECT_EQ(info.type(), "DRAPlugin");
  EXPECT_EQ(info.name(), "neuron.aws.com");
  EXPECT_EQ(info.endpoint(), dir_.path() + "/plugins/neuron.aws.com/dra.sock");
  EXPECT_TRUE(fs::path(info.endpoint()).is_absolute());
  EXPECT_THAT(info.supported_versions(), ElementsAre("v1.DRAPlugin"));
  EXPECT_FALSE(plugin_->readiness().ready());
  EXPECT_GE(publisher_.publishes(), 1);  // the first publish at start

  kubelet_->Notify(false, "no such version");
  EXPECT_FALSE(plugin_->registered());
  EXPECT_THAT(plugin_->readiness().reason(), HasSubstr("waiting for kubelet"));
  const int publishes = publisher_.publishes();
  kubelet_->Notify(true, "");
  EXPECT_TRUE(plugin_->registered());
  EXPECT_TRUE(plugin_->readiness().ready()) << plugin_->readiness().reason();
  // A kubelet that registers us may just have wiped the node's slices: they are read back and
  // published again.
  EXPECT_TRUE(WaitUntil(
      [&] { return publisher_.forgets() >= 1 && publisher_.publishes() > publishes; }, 5s));

  plugin_->Stop();
  EXPECT_FALSE(fs::exists(dir_.path() + "/plugins_registry/neuron.aws.com-reg.sock"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/plugins/neuron.aws.com/dra.sock"));
}

TEST_F(DraPluginServerTest, NotReadyUntilAPublishSucceeds) {
  publisher_.set_fail(true);
  Start("inf2.48xlarge");
  kubelet_->Notify(true, "");
  EXPECT_FALSE(plugin_->readiness().ready());
  EXPECT_THAT(plugin_->readiness().reason(), HasSubstr("not published"));
  const int before = publisher_.publishes();
  // The health loop retries the failed publish.
  ASSERT_TRUE(WaitUntil([&] { return publisher_.publishes() > before; }, 5s));
  publisher_.set_fail(false);
  EXPECT_TRUE(WaitUntil([&] { return plugin_->readiness().ready(); }, 5s));
}

TEST_F(DraPluginServerTest, PreparesADeviceSetOnInf2) {
  Start("inf2.48xlarge");
  api_.ServeJson(ClaimPath("pair"), ClaimJson("pair", "uid-pair", {"neurondevices-2-3"}));
  const auto response = kubelet_->Prepare({{"pair", "uid-pair"}});
  ASSERT_EQ(response.claims().count("uid-pair"), 1u);
  const auto& claim = response.claims().at("uid-pair");
  EXPECT_EQ(claim.error(), "");
  ASSERT_EQ(claim.devices_size(), 1);
  EXPECT_THAT(claim.devices(0).request_names(), ElementsAre("neurons"));
  EXPECT_EQ(claim.devices(0).pool_name(), kNode);
  EXPECT_EQ(claim.devices(0).device_name(), "neurondevices-2-3");
  EXPECT_THAT(claim.devices(0).cdi_device_ids(),
              ElementsAre("neuron.aws.com/device=uid-pair-neurondevices-2-3"));
  EXPECT_FALSE(claim.devices(0).has_share_id());

  const nlohmann::json spec = Spec("uid-pair");
  EXPECT_EQ(spec["kind"], "neuron.aws.com/device");
  EXPECT_EQ(spec["cdiVersion"], "0.6.0");
  ASSERT_EQ(spec["devices"].size(), 1u);
  EXPECT_EQ(spec["devices"][0]["name"], "uid-pair-neurondevices-2-3");
  const auto& nodes = spec["devices"][0]["containerEdits"]["deviceNodes"];
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0]["path"], "/dev/neuron2");
  EXPECT_EQ(nodes[1]["path"], "/dev/neuron3");
  // Host numbering: the node-wide cores of devices 2 and 3 (2 cores each); inf2 has no LNC.
  EXPECT_EQ(spec["containerEdits"]["env"], nlohmann::json({"NEURON_RT_VISIBLE_CORES=4-7"}));
  // No temp file left beside it.
  int files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(cdi())) ++files;
  EXPECT_EQ(files, 1);

  EXPECT_EQ(publisher_.used_cores(), 4);
  ASSERT_EQ(publisher_.requests().size(), 1u);
  EXPECT_EQ(publisher_.requests()[0].unit, topology::Unit::kDevice);
  EXPECT_EQ(publisher_.requests()[0].count, 2);

  // Preparing it again rewrites the same file.
  const std::string before = ReadText(SpecPath("uid-pair"));
  const auto again = kubelet_->Prepare({{"pair", "uid-pair"}});
  EXPECT_EQ(again.claims().at("uid-pair").error(), "");
  EXPECT_EQ(ReadText(SpecPath("uid-pair")), before);
  EXPECT_EQ(plugin_->PreparedClaims().size(), 1u);
}

TEST_F(DraPluginServerTest, PreparesACoreRangeOnTrn2) {
  Start("trn2.48xlarge", 2, nodeagent::CoreNumbering::kContainer);
  ASSERT_EQ(topology_->shape.cores_per_device, 4);
  api_.ServeJson(ClaimPath("cores"), ClaimJson("cores", "uid-cores", {"neuroncores-4-5"}));
  const auto response = kubelet_->Prepare({{"cores", "uid-cores"}});
  const auto& claim = response.claims().at("uid-cores");
  ASSERT_EQ(claim.error(), "");
  EXPECT_THAT(claim.devices(0).cdi_device_ids(),
              ElementsAre("neuron.aws.com/device=uid-cores-neuroncores-4-5"));
  const nlohmann::json spec = Spec("uid-cores");
  const auto& nodes = spec["devices"][0]["containerEdits"]["deviceNodes"];
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0]["path"], "/dev/neuron1");
  // Container numbering: cores 4-5 are the first two of the container's only device.
  EXPECT_EQ(spec["containerEdits"]["env"],
            nlohmann::json({"NEURON_LOGICAL_NC_CONFIG=2", "NEURON_RT_VISIBLE_CORES=0-1"}));
  // What the name was read at and what it holds: logical cores 4-5 at LNC 2 are physical 8-11.
  EXPECT_EQ(spec["annotations"]["toposched.io/instance-type"], "trn2.48xlarge");
  EXPECT_EQ(spec["annotations"]["toposched.io/lnc"], "2");
  EXPECT_EQ(spec["devices"][0]["annotations"]["toposched.io/physical-cores"], "8-11");
  EXPECT_EQ(publisher_.used_cores(), 2);
  ASSERT_EQ(publisher_.requests().size(), 1u);
  EXPECT_EQ(publisher_.requests()[0].unit, topology::Unit::kCore);
  EXPECT_EQ(publisher_.requests()[0].count, 2);
}

TEST_F(DraPluginServerTest, OpaqueConfigSetsTheLncOfWholeDevices) {
  Start("trn2.48xlarge", 2);
  const nlohmann::json lnc1 = nlohmann::json::array({{{"requests", {"neurons"}},
                                                      {"opaque",
                                                       {{"driver", "neuron.aws.com"},
                                                        {"parameters",
                                                         {{"apiVersion", "neuron.aws.com/v1"},
                                                          {"kind", "NeuronConfig"},
                                                          {"logicalNeuronCore", 1}}}}}}});
  api_.ServeJson(ClaimPath("lnc1"), ClaimJson("lnc1", "uid-lnc1", {"neurondevice1"}, kNode, lnc1));
  const nlohmann::json bad = nlohmann::json::array({{{"opaque",
                                                      {{"driver", "neuron.aws.com"},
                                                       {"parameters",
                                                        {{"apiVersion", "neuron.aws.com/v1"},
                                                         {"kind", "NeuronConfig"},
                                                         {"logicalNeuronCore", 3}}}}}}});
  api_.ServeJson(ClaimPath("bad"), ClaimJson("bad", "uid-bad", {"neurondevice2"}, kNode, bad));
  const auto response = kubelet_->Prepare({{"lnc1", "uid-lnc1"}, {"bad", "uid-bad"}});
  ASSERT_EQ(response.claims().at("uid-lnc1").error(), "");
  // Device 1 at LNC 1: its 8 physical cores, host numbering.
  EXPECT_EQ(Spec("uid-lnc1")["containerEdits"]["env"],
            nlohmann::json({"NEURON_LOGICAL_NC_CONFIG=1", "NEURON_RT_VISIBLE_CORES=8-15"}));
  EXPECT_THAT(response.claims().at("uid-bad").error(),
              HasSubstr("logicalNeuronCore: 3 is not allowed"));
  EXPECT_THAT(response.claims().at("uid-bad").error(), HasSubstr("spec.devices.config[0]"));
  EXPECT_FALSE(fs::exists(SpecPath("uid-bad")));
}

// AWS's UltraServerConfig for a multi-node job needs the server and node ids of its neuron_node
// devices; without them the pod would run as if alone, so the claim is refused with the reason.
TEST_F(DraPluginServerTest, MultiNodeUltraServerConfigIsRefusedWithTheWayOut) {
  Start("trn2.48xlarge", 2);
  auto us = [](int mode) {
    return nlohmann::json::array({{{"opaque",
                                    {{"driver", "neuron.aws.com"},
                                     {"parameters",
                                      {{"apiVersion", "neuron.aws.com/v1"},
                                       {"kind", "UltraServerConfig"},
                                       {"ultraserverMode", mode}}}}}}});
  };
  api_.ServeJson(ClaimPath("us2"), ClaimJson("us2", "uid-us2", {"neurondevice0"}, kNode, us(2)));
  api_.ServeJson(ClaimPath("us1"), ClaimJson("us1", "uid-us1", {"neurondevice1"}, kNode, us(1)));
  const auto response = kubelet_->Prepare({{"us2", "uid-us2"}, {"us1", "uid-us1"}});
  EXPECT_THAT(response.claims().at("uid-us2").error(), HasSubstr("neuron_node"));
  EXPECT_THAT(response.claims().at("uid-us2").error(), HasSubstr("extender"));
  EXPECT_FALSE(fs::exists(SpecPath("uid-us2")));
  EXPECT_EQ(response.claims().at("uid-us1").error(), "");
}

TEST_F(DraPluginServerTest, PerClaimErrors) {
  Start("trn1.32xlarge");
  api_.ServeJson(ClaimPath("reborn"), ClaimJson("reborn", "uid-new", {"neurondevice0"}));
  api_.ServeJson(ClaimPath("odd"), ClaimJson("odd", "uid-odd", {"neurondevices-0-2"}));
  api_.ServeJson(ClaimPath("elsewhere"),
                 ClaimJson("elsewhere", "uid-else", {"neurondevice0"}, "node-b"));
  api_.ServeJson(ClaimPath("good"), ClaimJson("good", "uid-good", {"neurondevice4"}));
  const auto response = kubelet_->Prepare({{"reborn", "uid-old"},
                                           {"odd", "uid-odd"},
                                           {"elsewhere", "uid-else"},
                                           {"missing", "uid-missing"},
                                           {"good", "uid-good"}});
  ASSERT_EQ(response.claims_size(), 5);
  EXPECT_THAT(response.claims().at("uid-old").error(),
              HasSubstr("has uid uid-new, kubelet asked for uid-old"));
  EXPECT_THAT(response.claims().at("uid-odd").error(), HasSubstr("neurondevices-0-2"));
  EXPECT_THAT(response.claims().at("uid-odd").error(), HasSubstr("not a legal choice"));
  EXPECT_THAT(response.claims().at("uid-else").error(), HasSubstr("none on this node"));
  EXPECT_THAT(response.claims().at("uid-missing").error(), HasSubstr("not found"));
  EXPECT_EQ(response.claims().at("uid-good").error(), "");
  EXPECT_EQ(response.claims().at("uid-old").devices_size(), 0);
  EXPECT_FALSE(fs::exists(SpecPath("uid-old")));
  EXPECT_FALSE(fs::exists(SpecPath("uid-new")));
  EXPECT_FALSE(fs::exists(SpecPath("uid-odd")));
  EXPECT_TRUE(fs::exists(SpecPath("uid-good")));
  EXPECT_EQ(plugin_->PreparedClaims().size(), 1u);
}

TEST_F(DraPluginServerTest, UnprepareRemovesTheSpec) {
  Start("inf2.48xlarge");
  api_.ServeJson(ClaimPath("one"), ClaimJson("one", "uid-one", {"neurondevice0"}));
  ASSERT_EQ(kubelet_->Prepare({{"one", "uid-one"}}).claims().at("uid-one").error(), "");
  ASSERT_TRUE(fs::exists(SpecPath("uid-one")));
  EXPECT_EQ(publisher_.used_cores(), 2);
  auto response = kubelet_->Unprepare("one", "uid-one");
  ASSERT_EQ(response.claims().count("uid-one"), 1u);
  EXPECT_EQ(response.claims().at("uid-one").error(), "");
  EXPECT_FALSE(fs::exists(SpecPath("uid-one")));
  EXPECT_TRUE(plugin_->PreparedClaims().empty());
  EXPECT_EQ(publisher_.used_cores(), 0);
  // Absent already: still success.
  response = kubelet_->Unprepare("one", "uid-one");
  EXPECT_EQ(response.claims().at("uid-one").error(), "");
  // A uid that cannot be a file name is refused for that claim.
  response = kubelet_->Unprepare("one", "../etc");
  EXPECT_THAT(response.claims().at("../etc").error(), HasSubstr("claim uid"));
}

TEST_F(DraPluginServerTest, RestartReadsTheCheckpointAndRemovesTempFiles) {
  Start("inf2.48xlarge");
  api_.ServeJson(ClaimPath("kept"), ClaimJson("kept", "uid-kept", {"neurondevices-4-5"}));
  ASSERT_EQ(kubelet_->Prepare({{"kept", "uid-kept"}}).claims().at("uid-kept").error(), "");
  const std::vector<PreparedClaim> before = plugin_->PreparedClaims();
  ASSERT_EQ(before.size(), 1u);
  plugin_->Stop();
  // What a kill in the middle of a spec write leaves.
  const std::string temp = SpecPath("uid-half") + ".tmp.abc123";
  std::ofstream(temp) << R"({"cdiVersion":"0.6.0","kind":"neuron.aws.com/dev)";

  Restart();
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_EQ(plugin_->PreparedClaims(), before);
  EXPECT_EQ(plugin_->Usage().used_core_count(), 4);
  EXPECT_EQ(publisher_.used_cores(), 4);  // the first publish counts the prepared claim
  // Still unpreparable after the restart.
  EXPECT_EQ(kubelet_->Unprepare("kept", "uid-kept").claims().at("uid-kept").error(), "");
  EXPECT_FALSE(fs::exists(SpecPath("uid-kept")));
}

// A claim allocated `device` with adminAccess (monitoring: it holds nothing).
std::string AdminClaimJson(const std::string& name, const std::string& uid,
                           const std::string& device) {
  nlohmann::json claim = nlohmann::json::parse(ClaimJson(name, uid, {device}));
  claim["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = true;
  return claim.dump();
}

// Prepare is the last line of defence: whatever the scheduler or a hand-edited slice allocated,
// two claims never get the same physical cores. Names differ (a whole device, a set, a core
// range); what is compared is what they hold.
// Issue 29: the node carries toposched.io/dra-claims-held from before the first claim holds a
// device until the last is unprepared (removed by the health loop), so a node switched back to
// the device plugin is not offered before the device plugin has read kubelet's claims. A label
// that cannot be written refuses the prepare.
TEST_F(DraPluginServerTest, PreparedClaimsMarkTheNodeFromBeforeTheFirstUntilTheLast) {
  Start("inf2.48xlarge");
  const auto label = [&]() -> std::optional<std::string> {
    const auto node = nlohmann::json::parse(api_.GetNodeJson(kNode).value());
    const auto& labels = node["metadata"]["labels"];
    if (!labels.contains("toposched.io/dra-claims-held")) return std::nullopt;
    return labels["toposched.io/dra-claims-held"].get<std::string>();
  };
  EXPECT_EQ(label(), std::nullopt);
  api_.ServeJson(ClaimPath("one"), ClaimJson("one", "uid-one", {"neurondevice0"}));
  api_.ServeJson(ClaimPath("pair"), ClaimJson("pair", "uid-pair", {"neurondevices-2-3"}));
  api_.ServeJson(ClaimPath("monitor"), AdminClaimJson("monitor", "uid-monitor", "neurondevice5"));

  // Admin access holds nothing: no label.
  ASSERT_EQ(kubelet_->Prepare({{"monitor", "uid-monitor"}}).claims().at("uid-monitor").error(), "");
  EXPECT_EQ(label(), std::nullopt);

  // The label cannot be written: the claim is not prepared, nothing is written for it.
  api_.InjectFailure({.method = "PATCH", .path_prefix = "/api/v1/nodes/", .status = 500});
  const std::string refused =
      kubelet_->Prepare({{"one", "uid-one"}}).claims().at("uid-one").error();
  EXPECT_THAT(refused, HasSubstr("not prepared"));
  EXPECT_THAT(refused, HasSubstr("toposched.io/dra-claims-held"));
  EXPECT_FALSE(fs::exists(SpecPath("uid-one")));
  EXPECT_EQ(label(), std::nullopt);

  // kubelet retries: the label is there when the claim is prepared.
  ASSERT_EQ(kubelet_->Prepare({{"one", "uid-one"}}).claims().at("uid-one").error(), "");
  EXPECT_EQ(label(), "1");
  ASSERT_EQ(kubelet_->Prepare({{"pair", "uid-pair"}}).claims().at("uid-pair").error(), "");
  EXPECT_TRUE(label().has_value());
  // A restart with claims prepared writes the current count.
  Restart();
  EXPECT_EQ(label(), "3");
  ASSERT_EQ(kubelet_->Unprepare("one", "uid-one").claims().at("uid-one").error(), "");
  EXPECT_TRUE(label().has_value());  // the pair still holds devices 2 and 3
  ASSERT_EQ(kubelet_->Unprepare("pair", "uid-pair").claims().at("uid-pair").error(), "");
  // The health loop removes it once no claim is prepared.
  EXPECT_TRUE(WaitUntil([&] { return !label().has_value(); }, 5s));
  // A failed removal is retried at the next health check.
  ASSERT_EQ(kubelet_->Prepare({{"one", "uid-one"}}).claims().at("uid-one").error(), "");
  EXPECT_EQ(label(), "1");
  api_.InjectFailure({.method = "PATCH", .path_prefix = "/api/v1/nodes/", .status = 500});
  ASSERT_EQ(kubelet_->Unprepare("one", "uid-one").claims().at("uid-one").error(), "");
  EXPECT_TRUE(WaitUntil([&] { return !label().has_value(); }, 5s));
}

TEST_F(DraPluginServerTest, PrepareRefusesAClaimOverlappingAPreparedOne) {
  Start("trn2.48xlarge", 2);  // 4 logical cores per device, 8 physical
  api_.ServeJson(ClaimPath("whole"), ClaimJson("whole", "uid-whole", {"neurondevice2"}));
  api_.ServeJson(ClaimPath("set"), ClaimJson("set", "uid-set", {"neurondevices-0-3"}));
  api_.ServeJson(ClaimPath("cores"), ClaimJson("cores", "uid-cores", {"neuroncores-8-9"}));
  api_.ServeJson(ClaimPath("monitor"), AdminClaimJson("monitor", "uid-monitor", "neurondevice2"));
  ASSERT_EQ(kubelet_->Prepare({{"whole", "uid-whole"}}).claims().at("uid-whole").error(), "");
  const auto response =
      kubelet_->Prepare({{"set", "uid-set"}, {"cores", "uid-cores"}, {"monitor", "uid-monitor"}});
  for (const char* uid : {"uid-set", "uid-cores"}) {
    const std::string& error = response.claims().at(uid).error();
    EXPECT_THAT(error, HasSubstr("default/whole")) << uid;
    EXPECT_THAT(error, HasSubstr("uid-whole")) << uid;
    EXPECT_THAT(error, HasSubstr("/dev/neuron2")) << uid;
    EXPECT_EQ(response.claims().at(uid).devices_size(), 0) << uid;
    EXPECT_FALSE(fs::exists(SpecPath(uid))) << uid;
  }
  // Admin access holds nothing, so it meets nothing.
  EXPECT_EQ(response.claims().at("uid-monitor").error(), "");
  // Preparing the same claim again is not an overlap with itself.
  EXPECT_EQ(kubelet_->Prepare({{"whole", "uid-whole"}}).claims().at("uid-whole").error(), "");
  EXPECT_EQ(plugin_->PreparedClaims().size(), 2u);
  EXPECT_EQ(plugin_->Usage().used_core_count(), 4);  // device 2's 4 logical cores

  // Two core ranges of one device share its device node but no core: both are prepared; a range
  // over both is refused and names the first it meets.
  api_.ServeJson(ClaimPath("low"), ClaimJson("low", "uid-low", {"neuroncores-12-13"}));
  api_.ServeJson(ClaimPath("high"), ClaimJson("high", "uid-high", {"neuroncores-14-15"}));
  api_.ServeJson(ClaimPath("both"), ClaimJson("both", "uid-both", {"neuroncores-12-15"}));
  const auto ranges = kubelet_->Prepare({{"low", "uid-low"}, {"high", "uid-high"}});
  EXPECT_EQ(ranges.claims().at("uid-low").error(), "");
  EXPECT_EQ(ranges.claims().at("uid-high").error(), "");
  const std::string both =
      kubelet_->Prepare({{"both", "uid-both"}}).claims().at("uid-both").error();
  EXPECT_THAT(both, AnyOf(HasSubstr("default/low"), HasSubstr("default/high")));
  EXPECT_THAT(both, HasSubstr("/dev/neuron3"));
  // Once the holder is unprepared, the claim goes through.
  EXPECT_EQ(kubelet_->Unprepare("whole", "uid-whole").claims().at("uid-whole").error(), "");
  EXPECT_EQ(kubelet_->Prepare({{"cores", "uid-cores"}}).claims().at("uid-cores").error(), "");
}

// kube-scheduler's allocator takes any devices a request allows: a KEP-5004 claim for
// `aws.amazon.com/neuron: 4`, or 4 whole devices without AWS's matchAttribute, can be devices the
// Neuron runtime cannot use together (issue 30 saw 1,2,3,8 on inf2 and 1,2,3,4 on trn2). Such a
// claim is never prepared; one legal set of whole devices is.
TEST_F(DraPluginServerTest, PrepareRefusesAClaimWhoseDevicesAreNotOneLegalSet) {
  Start("trn2.48xlarge", 2);
  const std::vector<std::string> unaligned = {"neurondevice1", "neurondevice2", "neurondevice3",
                                              "neurondevice4"};
  const std::vector<std::string> row = {"neurondevice4", "neurondevice5", "neurondevice6",
                                        "neurondevice7"};
  api_.ServeJson(ClaimPath("unaligned"), ClaimJson("unaligned", "uid-unaligned", unaligned));
  api_.ServeJson(ClaimPath("two-sets"), ClaimJson("two-sets", "uid-two-sets",
                                                  {"neurondevices-0-3", "neurondevices-8-11"}));
  api_.ServeJson(ClaimPath("cores"),
                 ClaimJson("cores", "uid-cores", {"neuroncores-0-0", "neuroncores-5-5"}));
  api_.ServeJson(ClaimPath("row"), ClaimJson("row", "uid-row", row));
  const auto response = kubelet_->Prepare(
      {{"unaligned", "uid-unaligned"}, {"two-sets", "uid-two-sets"}, {"cores", "uid-cores"}});
  for (const char* uid : {"uid-unaligned", "uid-two-sets", "uid-cores"}) {
    const std::string& error = response.claims().at(uid).error();
    EXPECT_THAT(error, HasSubstr("not one legal set")) << uid;
    EXPECT_EQ(response.claims().at(uid).devices_size(), 0) << uid;
    EXPECT_FALSE(fs::exists(SpecPath(uid))) << uid;
  }
  EXPECT_THAT(response.claims().at("uid-unaligned").error(),
              HasSubstr("neurondevice1,neurondevice2,neurondevice3,neurondevice4"));
  EXPECT_THAT(response.claims().at("uid-unaligned").error(), HasSubstr("devices 1,2,3,4"));
  EXPECT_TRUE(plugin_->PreparedClaims().empty());
  EXPECT_EQ(plugin_->Usage().used_core_count(), 0);
  // An aligned row of four whole devices is AWS's own legal form: prepared.
  EXPECT_EQ(kubelet_->Prepare({{"row", "uid-row"}}).claims().at("uid-row").error(), "");
}

TEST_F(DraPluginServerTest, PrepareRefusesWholeDevicesThatAreNoContiguousRunOfTheRing) {
  Start("inf2.48xlarge", 0);
  api_.ServeJson(ClaimPath("gap"),
                 ClaimJson("gap", "uid-gap",
                           {"neurondevice1", "neurondevice2", "neurondevice3", "neurondevice8"}));
  api_.ServeJson(ClaimPath("run"),
                 ClaimJson("run", "uid-run",
                           {"neurondevice1", "neurondevice2", "neurondevice3", "neurondevice4"}));
  EXPECT_THAT(kubelet_->Prepare({{"gap", "uid-gap"}}).claims().at("uid-gap").error(),
              HasSubstr("devices 1,2,3,8 are not one legal set of 4"));
  EXPECT_EQ(kubelet_->Prepare({{"run", "uid-run"}}).claims().at("uid-run").error(), "");
}

// Core range names mean other cores at another LNC: neuroncores-4-5 is device 1 at LNC 2 and
// device 0 at LNC 1. A claim prepared at LNC 2 keeps its physical cores after a restart at LNC 1.
TEST_F(DraPluginServerTest, CheckpointKeepsTheLncItWasPreparedAt) {
  Start("trn2.48xlarge", 2);
  api_.ServeJson(ClaimPath("old"), ClaimJson("old", "uid-old", {"neuroncores-4-5"}));
  ASSERT_EQ(kubelet_->Prepare({{"old", "uid-old"}}).claims().at("uid-old").error(), "");
  kubelet_.reset();
  plugin_.reset();
  host_.Install("trn2.48xlarge", 1);  // the operator switched the node to LNC 1
  Start("");
  ASSERT_EQ(topology_->shape.lnc, 1);
  ASSERT_EQ(plugin_->PreparedClaims().size(), 1u);
  // Physical cores 8-11 (device 1's first four) are logical cores 8-11 at LNC 1.
  const topology::NodeUsage usage = plugin_->Usage();
  EXPECT_EQ(usage.used_core_count(), 4);
  EXPECT_EQ(usage.busy_devices(), topology::DeviceMask{1} << 1);
  EXPECT_EQ(publisher_.used_cores(), 4);

  api_.ServeJson(ClaimPath("same"), ClaimJson("same", "uid-same", {"neuroncores-8-11"}));
  api_.ServeJson(ClaimPath("dev1"), ClaimJson("dev1", "uid-dev1", {"neurondevice1"}));
  api_.ServeJson(ClaimPath("free"), ClaimJson("free", "uid-free", {"neuroncores-12-15"}));
  api_.ServeJson(ClaimPath("dev0"), ClaimJson("dev0", "uid-dev0", {"neuroncores-4-5"}));
  const auto response = kubelet_->Prepare(
      {{"same", "uid-same"}, {"dev1", "uid-dev1"}, {"free", "uid-free"}, {"dev0", "uid-dev0"}});
  EXPECT_THAT(response.claims().at("uid-same").error(), HasSubstr("default/old"));
  EXPECT_THAT(response.claims().at("uid-dev1").error(), HasSubstr("default/old"));
  EXPECT_EQ(response.claims().at("uid-free").error(), "");  // device 1's other physical cores
  EXPECT_EQ(response.claims().at("uid-dev0").error(), "");  // the same name, now on device 0
  EXPECT_EQ(publisher_.used_cores(), 10);

  // Unpreparing the old claim frees its physical cores.
  EXPECT_EQ(kubelet_->Unprepare("old", "uid-old").claims().at("uid-old").error(), "");
  EXPECT_FALSE(fs::exists(SpecPath("uid-old")));
  EXPECT_EQ(publisher_.used_cores(), 6);
  EXPECT_EQ(kubelet_->Prepare({{"same", "uid-same"}}).claims().at("uid-same").error(), "");
}

// A spec the plugin cannot read fails closed: the devices it names stay held until kubelet
// unprepares its claim (or someone removes it), and the plugin says so.
TEST_F(DraPluginServerTest, UnreadableSpecStillHoldsItsDevices) {
  Start("trn2.48xlarge", 2);
  api_.ServeJson(ClaimPath("cut"), ClaimJson("cut", "uid-cut", {"neurondevice1"}));
  api_.ServeJson(ClaimPath("legacy"), ClaimJson("legacy", "uid-legacy", {"neuroncores-8-9"}));
  ASSERT_EQ(kubelet_->Prepare({{"cut", "uid-cut"}, {"legacy", "uid-legacy"}})
                .claims()
                .at("uid-cut")
                .error(),
            "");
  ASSERT_TRUE(fs::exists(SpecPath("uid-legacy")));
  kubelet_.reset();
  plugin_.reset();
  // A spec cut short (a full disk, an editor): no longer JSON, but it still names /dev/neuron1.
  const std::string text = ReadText(SpecPath("uid-cut"));
  std::ofstream(SpecPath("uid-cut"), std::ios::trunc) << text.substr(0, text.size() - 8);
  // A core range spec as an older plugin wrote it, with no toposched.io annotations beyond the
  // claim's: its name cannot be trusted at the current LNC, so its device node is held whole.
  nlohmann::json legacy = Spec("uid-legacy");
  legacy["annotations"] = {{"toposched.io/claim", "default/legacy"},
                           {"toposched.io/claim-uid", "uid-legacy"}};
  for (auto& device : legacy["devices"]) {
    const std::string name = device["annotations"]["toposched.io/device"];
    device["annotations"] = {{"toposched.io/device", name},
                             {"toposched.io/pool", kNode},
                             {"toposched.io/requests", "neurons"}};
  }
  std::ofstream(SpecPath("uid-legacy"), std::ios::trunc) << legacy.dump();
  Start("");

  // Device 1 (cut) and device 2 (legacy core range, held whole): 8 logical cores.
  EXPECT_EQ(plugin_->Usage().busy_devices(), (topology::DeviceMask{1} << 1) | (1u << 2));
  EXPECT_EQ(publisher_.used_cores(), 8);
  api_.ServeJson(ClaimPath("new1"), ClaimJson("new1", "uid-new1", {"neuroncores-4-5"}));
  api_.ServeJson(ClaimPath("new2"), ClaimJson("new2", "uid-new2", {"neuroncores-10-11"}));
  const auto response = kubelet_->Prepare({{"new1", "uid-new1"}, {"new2", "uid-new2"}});
  EXPECT_THAT(response.claims().at("uid-new1").error(), HasSubstr("uid-cut"));
  EXPECT_THAT(response.claims().at("uid-new1").error(), HasSubstr("/dev/neuron1"));
  EXPECT_THAT(response.claims().at("uid-new2").error(), HasSubstr("default/legacy"));
  kubelet_->Notify(true, "");
  EXPECT_THAT(plugin_->readiness().reason(), HasSubstr("could not be read"));

  // Kubelet unprepares the claim by its uid: the spec goes and its devices are free.
  EXPECT_EQ(kubelet_->Unprepare("cut", "uid-cut").claims().at("uid-cut").error(), "");
  EXPECT_FALSE(fs::exists(SpecPath("uid-cut")));
  EXPECT_EQ(kubelet_->Prepare({{"new1", "uid-new1"}}).claims().at("uid-new1").error(), "");

  // A spec with nothing in it names no device: the whole node is held until it goes.
  kubelet_.reset();
  plugin_.reset();
  std::ofstream(SpecPath("uid-empty")) << "";
  Start("");
  EXPECT_EQ(plugin_->Usage().busy_devices(), topology_->shape.AllDevices());
  api_.ServeJson(ClaimPath("dev9"), ClaimJson("dev9", "uid-dev9", {"neurondevice9"}));
  EXPECT_THAT(kubelet_->Prepare({{"dev9", "uid-dev9"}}).claims().at("uid-dev9").error(),
              HasSubstr("uid-empty"));
  EXPECT_EQ(kubelet_->Unprepare("x", "uid-empty").claims().at("uid-empty").error(), "");
  EXPECT_EQ(kubelet_->Prepare({{"dev9", "uid-dev9"}}).claims().at("uid-dev9").error(), "");
}

// A spec whose names and recorded units disagree, or that was written on another instance type,
// cannot be read by name: each device holds its device node whole.
TEST_F(DraPluginServerTest, HandEditedSpecHoldsItsDeviceNodes) {
  Start("trn2.48xlarge", 2);
  api_.ServeJson(ClaimPath("edited"), ClaimJson("edited", "uid-edited", {"neuroncores-4-5"}));
  api_.ServeJson(ClaimPath("moved"), ClaimJson("moved", "uid-moved", {"neuroncores-12-13"}));
  api_.ServeJson(ClaimPath("old"), ClaimJson("old", "uid-old", {"neurondevice6"}));
  const auto prepared =
      kubelet_->Prepare({{"edited", "uid-edited"}, {"moved", "uid-moved"}, {"old", "uid-old"}});
  ASSERT_EQ(prepared.claims().at("uid-edited").error(), "");
  ASSERT_EQ(prepared.claims().at("uid-moved").error(), "");
  ASSERT_EQ(prepared.claims().at("uid-old").error(), "");
  EXPECT_EQ(plugin_->Usage().used_core_count(), 8);
  kubelet_.reset();
  plugin_.reset();
  nlohmann::json edited = Spec("uid-edited");
  edited["devices"][0]["annotations"]["toposched.io/physical-cores"] = "0-3";
  std::ofstream(SpecPath("uid-edited"), std::ios::trunc) << edited.dump();
  nlohmann::json moved = Spec("uid-moved");
  moved["annotations"]["toposched.io/instance-type"] = "trn1.32xlarge";
  std::ofstream(SpecPath("uid-moved"), std::ios::trunc) << moved.dump();
  // Another type and no LNC: not read by name either (found by cdi_spec_fuzz: it was read as a
  // spec of an older plugin).
  nlohmann::json old = Spec("uid-old");
  old["annotations"]["toposched.io/instance-type"] = "trn1.32xlarge";
  old["annotations"].erase("toposched.io/lnc");
  std::ofstream(SpecPath("uid-old"), std::ios::trunc) << old.dump();
  Start("");

  // Devices 1, 3 and 6, whole: 4 logical cores each at LNC 2.
  const topology::NodeUsage usage = plugin_->Usage();
  EXPECT_EQ(usage.busy_devices(), (topology::DeviceMask{1} << 1) | (topology::DeviceMask{1} << 3) |
                                      (topology::DeviceMask{1} << 6));
  EXPECT_EQ(usage.used_core_count(), 12);
  for (const PreparedClaim& claim : plugin_->PreparedClaims()) {
    EXPECT_THAT(claim.held_because,
                HasSubstr(claim.uid == "uid-edited" ? "records physical cores" : "trn1.32xlarge"))
        << claim.uid;
  }
  api_.ServeJson(ClaimPath("next"), ClaimJson("next", "uid-next", {"neuroncores-6-7"}));
  EXPECT_THAT(kubelet_->Prepare({{"next", "uid-next"}}).claims().at("uid-next").error(),
              HasSubstr("default/edited"));
}

TEST_F(DraPluginServerTest, HealthChangeRepublishes) {
  Start("inf2.48xlarge");
  EXPECT_EQ(publisher_.unhealthy(), 0u);
  fs::remove(host_.dev() + "/neuron3");
  ASSERT_TRUE(
      WaitUntil([&] { return publisher_.unhealthy() == (topology::DeviceMask{1} << 3); }, 5s));
  EXPECT_EQ(plugin_->unhealthy(), topology::DeviceMask{1} << 3);
  // Reported as a fault, for the publisher's taint: why and since when.
  const dra::DeviceFaults faults = publisher_.faults();
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults.at(3).reason, "device-node-missing");
  EXPECT_THAT(faults.at(3).time_added,
              ::testing::MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"));
  // Back: no fault left.
  testing::WriteFile(host_.dev() + "/neuron3", "");
  ASSERT_TRUE(WaitUntil([&] { return publisher_.unhealthy() == 0; }, 5s));
  EXPECT_TRUE(publisher_.faults().empty());
  EXPECT_EQ(plugin_->unhealthy(), 0u);
}

// The pod whose claim holds a device that fails hears it (an event and a False condition, once),
// a failed write is retried at the next health check, and the condition turns True when the
// device is back; a claim on healthy devices is left alone.
TEST_F(DraPluginServerTest, PodsOfAClaimOnAFailedDeviceAreToldAndToldWhenItIsBack) {
  Start("inf2.48xlarge");
  for (const auto& [claim, uid, device, pod] :
       {std::tuple{"on3", "uid-on3", "neurondevice3", "p3"},
        std::tuple{"on5", "uid-on5", "neurondevice5", "p5"}}) {
    nlohmann::json json = nlohmann::json::parse(ClaimJson(claim, uid, {device}));
    json["status"]["reservedFor"] = {
        {{"resource", "pods"}, {"name", pod}, {"uid", std::string("pod-") + uid}}};
    api_.ServeJson(ClaimPath(claim), json.dump());
    api_.UpsertPod(
        nlohmann::json(
            {{"metadata",
              {{"namespace", "default"}, {"name", pod}, {"uid", std::string("pod-") + uid}}},
             {"spec", {{"nodeName", kNode}}}})
            .dump());
    ASSERT_EQ(kubelet_->Prepare({{claim, uid}}).claims().at(uid).error(), "");
  }
  const auto events = [&] {
    return api_.RequestsMatching("POST", "/api/v1/namespaces/default/events");
  };
  const auto conditions = [&](const std::string& pod) {
    return api_.RequestsMatching("PATCH", "/api/v1/namespaces/default/pods/" + pod + "/status");
  };
  // The first event write fails: it is retried at the next check.
  api_.InjectFailure({.method = "POST", .path_prefix = "/api/v1/namespaces/default/events"});
  fs::remove(host_.dev() + "/neuron3");
  ASSERT_TRUE(WaitUntil([&] { return events().size() >= 2 && conditions("p3").size() >= 2; }, 10s));
  const std::string event = events().back().body;
  EXPECT_THAT(event, HasSubstr(R"("reason":"NeuronDeviceFailed")"));
  EXPECT_THAT(event, HasSubstr(R"("name":"p3","uid":"pod-uid-on3")"));
  EXPECT_THAT(event, HasSubstr("neuron3: device-node-missing"));
  EXPECT_THAT(event, HasSubstr("ResourceClaim on3"));
  const std::string failed = conditions("p3").back().body;
  EXPECT_THAT(
      failed,
      HasSubstr(
          R"("type":"toposched.io/NeuronDevicesHealthy","status":"False","reason":"DeviceFailed")"));
  EXPECT_THAT(failed, HasSubstr(R"("uid":"pod-uid-on3")"));

  // Back: the condition turns True; no further event, and p5 never heard a thing.
  testing::WriteFile(host_.dev() + "/neuron3", "");
  ASSERT_TRUE(WaitUntil(
      [&] {
        const auto all = conditions("p3");
        return !all.empty() && all.back().body.find(R"("status":"True")") != std::string::npos;
      },
      10s));
  EXPECT_THAT(conditions("p3").back().body, HasSubstr("DevicesInService"));
  EXPECT_EQ(events().size(), 2u) << "one failed POST and its retry, nothing on recovery";
  EXPECT_TRUE(conditions("p5").empty());
}

}  // namespace
}  // namespace toposched::draplugin
