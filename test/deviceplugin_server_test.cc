// The device plugin end to end over unix sockets in a temp dir: a fake kubelet that dials back
// inside Register, ListAndWatch, health transitions, kubelet restarts, GetPreferredAllocation and
// Allocate on the wire, waiting for a missing driver, and PodResources recording. Also prints the
// round-trip latency of GetPreferredAllocation and Allocate (docs/device-plugin.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "claims/gang.h"
#include "claims/keys.h"
#include "deviceplugin/api_pod_source.h"
#include "deviceplugin/manager.h"
#include "deviceplugin_fixtures.h"
#include "extender_fixtures.h"
#include "kube/client.h"
#include "support/fake_apiserver.h"
#include "support/temp_dir.h"
#include "support/wait.h"

namespace toposched::deviceplugin {
namespace {

using ::testing::ElementsAre;
using testing::FakeHost;
using testing::FakeKubelet;
using testing::FakePodResources;
using testing::FakePodSource;
using ::testing::HasSubstr;
using testing::MakePod;
using testing::RecordAnnotations;
using testing::ShortTempDir;
using testing::WaitUntil;
using namespace std::chrono_literals;

constexpr char kNeuron[] = "aws.amazon.com/neuron";
constexpr char kCore[] = "aws.amazon.com/neuroncore";

PluginOptions FastOptions(const FakeHost& host) {
  PluginOptions options;
  options.host.sysfs_root = host.sys();
  options.host.dev_root = host.dev();
  options.host.opt_aws_root = host.opt();
  options.kubelet_dir = host.kubelet();
  options.pod_resources_socket.clear();
  options.node_name = "node-a";
  options.resources = DefaultResources(kNeuron, kCore);
  options.numbering = nodeagent::CoreNumbering::kHost;
  options.health_interval = 100ms;
  options.health_recover = 200ms;  // two passing polls bring a device back
  options.discovery_interval = 100ms;
  options.register_retry = 100ms;
  options.register_timeout = 5s;
  options.reconcile_interval = 0ms;
  options.reconcile_delay = 100ms;
  return options;
}

// The manager on its own thread, stopped and joined on destruction (bounded: ~200 ms).
class RunningPlugin {
 public:
  RunningPlugin(PluginOptions options, nodeagent::PodSource& pods)
      : manager_(std::move(options), topology::Catalog::Embedded(), pods),
        thread_([this] { status_ = manager_.Run(stop_); }) {}
  ~RunningPlugin() {
    stop_ = true;
    thread_.join();
  }
  DevicePluginManager& manager() { return manager_; }

 private:
  std::atomic<bool> stop_{false};
  Status status_ = OkStatus();
  DevicePluginManager manager_;
  std::thread thread_;
};

bool AllHealthy(const FakeKubelet::DeviceView& view, size_t count) {
  return view.health.size() == count &&
         std::all_of(view.health.begin(), view.health.end(),
                     [](const auto& entry) { return entry.second == "Healthy"; });
}

class DevicePluginServerTest : public ::testing::Test {
 protected:
  void Install(const std::string& type, int lnc = 0) {
    host_.Install(type, lnc);
    kubelet_ = std::make_unique<FakeKubelet>(host_.kubelet());
  }

  ShortTempDir dir_;
  FakeHost host_{dir_.path()};
  std::unique_ptr<FakeKubelet> kubelet_;
  FakePodSource pods_;
};

TEST_F(DevicePluginServerTest, RegistersBothResourcesAndStreamsDevices) {
  Install("inf2.48xlarge");
  RunningPlugin plugin(FastOptions(host_), pods_);
  ASSERT_TRUE(WaitUntil([&] { return kubelet_->registrations().size() == 2; }, 5s));
  for (const auto& registration : kubelet_->registrations()) {
    EXPECT_TRUE(registration.options_called_inside_register);
    EXPECT_TRUE(registration.preferred_available);
  }
  EXPECT_TRUE(kubelet_->WaitForDevices(
      kNeuron, [](const auto& v) { return AllHealthy(v, 12); }, 5s));
  EXPECT_TRUE(kubelet_->WaitForDevices(
      kCore, [](const auto& v) { return AllHealthy(v, 24); }, 5s));
  const auto devices = kubelet_->Devices(kNeuron).health;
  EXPECT_EQ(devices.count("neuron0"), 1u);
  EXPECT_EQ(devices.count("neuron11"), 1u);
  EXPECT_EQ(kubelet_->Devices(kCore).health.count("neuroncore23"), 1u);
  EXPECT_TRUE(std::filesystem::exists(host_.kubelet() + "/toposched-neuron.sock"));
  EXPECT_TRUE(std::filesystem::exists(host_.kubelet() + "/toposched-neuroncore.sock"));
}

TEST_F(DevicePluginServerTest, Trn2CoreCountFollowsLnc) {
  for (int lnc : {1, 2}) {
    ShortTempDir dir;
    FakeHost host{dir.path()};
    host.Install("trn2.48xlarge", lnc);
    FakeKubelet kubelet(host.kubelet());
    RunningPlugin plugin(FastOptions(host), pods_);
    const size_t cores = static_cast<size_t>(16 * 8 / lnc);
    EXPECT_TRUE(kubelet.WaitForDevices(
        kCore, [&](const auto& v) { return AllHealthy(v, cores); }, 5s))
        << "LNC " << lnc;
    EXPECT_TRUE(kubelet.WaitForDevices(
        kNeuron, [](const auto& v) { return AllHealthy(v, 16); }, 5s));
    // The extender's positive evidence of the node's LNC (issue 18), set before serving.
    EXPECT_EQ(pods_.NodeLabel("toposched.io/neuron-lnc"), std::to_string(lnc));
  }
}

TEST_F(DevicePluginServerTest, DeviceTurnsUnhealthyAndRecovers) {
  Install("trn1.32xlarge");
  RunningPlugin plugin(FastOptions(host_), pods_);
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kNeuron, [](const auto& v) { return AllHealthy(v, 16); }, 5s));
  // Both lists first: a predicate below reading a core the kubelet has not been sent yet would
  // throw (map::at), as it did when the core stream opened a moment after the device stream.
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kCore, [](const auto& v) { return AllHealthy(v, 32); }, 5s));
  // Bounded waits, not timing assertions: the latency is printed (and measured in bench/).
  const std::string node = host_.dev() + "/neuron3";
  std::filesystem::remove(node);
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kNeuron, [](const auto& v) { return v.health.at("neuron3") == "Unhealthy"; }, 10s));
  const auto down = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(kubelet_->WaitForDevices(
      kCore,
      [](const auto& v) {
        return v.health.at("neuroncore6") == "Unhealthy" &&
               v.health.at("neuroncore7") == "Unhealthy" && v.health.at("neuroncore5") == "Healthy";
      },
      10s));
  EXPECT_EQ(kubelet_->Devices(kNeuron).health.at("neuron2"), "Healthy");

  testing::WriteFile(node, "");
  start = std::chrono::steady_clock::now();
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kNeuron, [](const auto& v) { return AllHealthy(v, 16); }, 10s));
  const auto up = std::chrono::steady_clock::now() - start;
  std::printf(
      "[ latency  ] health: unhealthy after %lld ms, healthy again after %lld ms\n",
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(down).count()),
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(up).count()));
}

TEST_F(DevicePluginServerTest, ReRegistersAfterKubeletRestart) {
  Install("inf2.48xlarge");
  RunningPlugin plugin(FastOptions(host_), pods_);
  ASSERT_TRUE(WaitUntil([&] { return kubelet_->registrations().size() == 2; }, 5s));
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kNeuron, [](const auto& v) { return AllHealthy(v, 12); }, 5s));
  std::filesystem::remove(host_.dev() + "/neuron5");  // state the plugin must keep
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kNeuron, [](const auto& v) { return v.health.at("neuron5") == "Unhealthy"; }, 5s));

  for (int restart = 1; restart <= 2; ++restart) {
    kubelet_->Restart();
    EXPECT_FALSE(std::filesystem::exists(host_.kubelet() + "/toposched-neuron.sock"));
    ASSERT_TRUE(WaitUntil(
        [&] {
          return kubelet_->RegistrationCount(kNeuron) == restart + 1 &&
                 kubelet_->RegistrationCount(kCore) == restart + 1;
        },
        5s))
        << "restart " << restart;
    const int updates = kubelet_->Devices(kNeuron).updates;
    // The new stream starts with the full list, health included.
    EXPECT_TRUE(kubelet_->WaitForDevices(
        kNeuron,
        [&](const auto& v) {
          return v.updates > updates - 1 && v.health.size() == 12 &&
                 v.health.at("neuron5") == "Unhealthy";
        },
        5s));
  }
  EXPECT_TRUE(std::filesystem::exists(host_.kubelet() + "/toposched-neuron.sock"));
  // The plugin counts a registration when kubelet's reply arrives, which can
  // be a moment after the fake kubelet has counted the request.
  EXPECT_TRUE(WaitUntil([&] { return plugin.manager().registrations() == 6; }, 5s))
      << plugin.manager().registrations();
}

TEST_F(DevicePluginServerTest, RegistersOnceKubeletAppears) {
  host_.Install("inf2.xlarge");
  RunningPlugin plugin(FastOptions(host_), pods_);
  ASSERT_TRUE(WaitUntil([&] { return plugin.manager().kubelet_missing_checks() >= 2; }, 5s));
  EXPECT_EQ(plugin.manager().registrations(), 0);
  FakeKubelet kubelet(host_.kubelet());
  EXPECT_TRUE(WaitUntil([&] { return kubelet.registrations().size() == 2; }, 5s));
}

TEST_F(DevicePluginServerTest, WaitsForTheDriverWithoutCrashing) {
  std::filesystem::create_directories(host_.kubelet());
  kubelet_ = std::make_unique<FakeKubelet>(host_.kubelet());
  RunningPlugin plugin(FastOptions(host_), pods_);
  ASSERT_TRUE(WaitUntil([&] { return plugin.manager().discovery_scans() >= 3; }, 5s));
  EXPECT_FALSE(plugin.manager().discovered());
  EXPECT_TRUE(kubelet_->registrations().empty());
  host_.Install("inf2.24xlarge");  // the driver loads
  ASSERT_TRUE(WaitUntil([&] { return kubelet_->registrations().size() == 2; }, 5s));
  EXPECT_TRUE(plugin.manager().discovered());
  EXPECT_TRUE(kubelet_->WaitForDevices(
      kNeuron, [](const auto& v) { return AllHealthy(v, 6); }, 5s));
}

class DevicePluginWireTest : public DevicePluginServerTest {
 protected:
  void SetUp() override {
    Install("trn1.32xlarge");
    plugin_ = std::make_unique<RunningPlugin>(FastOptions(host_), pods_);
    ASSERT_TRUE(WaitUntil([&] { return kubelet_->registrations().size() == 2; }, 5s));
    devices_ = kubelet_->PluginStub(kNeuron);
    cores_ = kubelet_->PluginStub(kCore);
  }
  void TearDown() override { plugin_.reset(); }

  static v1beta1::PreferredAllocationRequest PreferRequest(const std::string& prefix, int units,
                                                           std::vector<std::string> must,
                                                           int size) {
    v1beta1::PreferredAllocationRequest request;
    auto* container = request.add_container_requests();
    for (int i = 0; i < units; ++i) container->add_available_deviceids(prefix + std::to_string(i));
    for (const std::string& id : must) container->add_must_include_deviceids(id);
    container->set_allocation_size(size);
    return request;
  }
  static v1beta1::AllocateRequest AllocateRequest(const std::vector<std::string>& ids) {
    v1beta1::AllocateRequest request;
    auto* container = request.add_container_requests();
    for (const std::string& id : ids) container->add_devices_ids(id);
    return request;
  }

  std::unique_ptr<RunningPlugin> plugin_;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> devices_;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> cores_;
};

TEST_F(DevicePluginWireTest, PreferredThenAllocateByAnnotation) {
  pods_.Add(MakePod("train", {{"main", kNeuron, 4}},
                    RecordAnnotations({{"main", kNeuron, {8, 9, 10, 11}}}, 100)));
  grpc::ClientContext prefer_context;
  v1beta1::PreferredAllocationResponse preferred;
  ASSERT_TRUE(
      devices_
          ->GetPreferredAllocation(&prefer_context, PreferRequest("neuron", 16, {}, 4), &preferred)
          .ok());
  ASSERT_EQ(preferred.container_responses_size(), 1);
  EXPECT_THAT(preferred.container_responses(0).deviceids(),
              ::testing::ElementsAre("neuron8", "neuron9", "neuron10", "neuron11"));

  grpc::ClientContext allocate_context;
  v1beta1::AllocateResponse response;
  const auto status = devices_->Allocate(
      &allocate_context, AllocateRequest({"neuron8", "neuron9", "neuron10", "neuron11"}),
      &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.container_responses_size(), 1);
  const auto& container = response.container_responses(0);
  ASSERT_EQ(container.devices_size(), 4);
  EXPECT_EQ(container.devices(0).host_path(), "/dev/neuron8");
  EXPECT_EQ(container.devices(0).container_path(), "/dev/neuron8");
  EXPECT_EQ(container.devices(0).permissions(), "rw");
  EXPECT_EQ(container.envs().at("NEURON_RT_VISIBLE_CORES"), "16-23");
  EXPECT_EQ(pods_.Get("train").annotations.at("NEURON_ALLOCATED"), "true");
}

TEST_F(DevicePluginWireTest, AGangMembersAllocateResponseCarriesItsRankAndUltraServerEnv) {
  auto annotations = RecordAnnotations({{"main", kNeuron, {0, 1, 2, 3}}}, 100);
  claims::GangRecord record;
  record.gang = "default/mpijob:train";
  record.size = 2;
  record.group_nodes = 2;
  record.rank = 1;
  record.nodes = {"node-b", "node-a"};
  record.server_id = "u5wy80u0o2saugxy";
  record.node_id = 1;
  record.rank0_host = "train-worker-0.train.default.svc";
  annotations[std::string(claims::kAnnotationGangRecord)] = claims::EncodeGangRecord(record);
  pods_.Add(MakePod("train-worker-1", {{"main", kNeuron, 4}}, annotations));
  grpc::ClientContext context;
  v1beta1::AllocateResponse response;
  const auto status = devices_->Allocate(
      &context, AllocateRequest({"neuron0", "neuron1", "neuron2", "neuron3"}), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const auto& envs = response.container_responses(0).envs();
  EXPECT_EQ(envs.at("NEURON_GLOBAL_TOPOID"), "1");
  EXPECT_EQ(envs.at("NEURON_GLOBAL_TOPOID0_HOST"), "train-worker-0.train.default.svc");
  EXPECT_EQ(envs.at("NEURON_RT_ULTRASERVER_MODE"), "3");
  EXPECT_EQ(envs.at("NEURON_RT_ULTRASERVER_SERVER_ID"), "u5wy80u0o2saugxy");
  EXPECT_EQ(envs.at("NEURON_RT_ULTRASERVER_NODE_ID"), "1");
  EXPECT_EQ(envs.at("NEURON_RT_VISIBLE_CORES"), "0-7");
}

TEST_F(DevicePluginWireTest, PreferredIsLegalAndHonoursMustInclude) {
  grpc::ClientContext context;
  v1beta1::PreferredAllocationResponse preferred;
  ASSERT_TRUE(devices_
                  ->GetPreferredAllocation(&context, PreferRequest("neuron", 16, {"neuron9"}, 4),
                                           &preferred)
                  .ok());
  EXPECT_THAT(preferred.container_responses(0).deviceids(),
              ::testing::ElementsAre("neuron8", "neuron9", "neuron10", "neuron11"));
  grpc::ClientContext core_context;
  ASSERT_TRUE(cores_
                  ->GetPreferredAllocation(&core_context, PreferRequest("neuroncore", 32, {}, 3),
                                           &preferred)
                  .ok());
  EXPECT_EQ(preferred.container_responses(0).deviceids_size(), 3);
}

TEST_F(DevicePluginWireTest, NoMatchingPodIsAClearError) {
  grpc::ClientContext context;
  v1beta1::AllocateResponse response;
  const auto status = devices_->Allocate(
      &context, AllocateRequest({"neuron0", "neuron1", "neuron2", "neuron3"}), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(),
              HasSubstr("no pod on node node-a is waiting for 4 aws.amazon.com/neuron"));
  grpc::ClientContext bad_context;
  const auto bad = devices_->Allocate(&bad_context, AllocateRequest({"gpu0"}), &response);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("'gpu0' is not a device id"));
}

TEST_F(DevicePluginWireTest, OneCoreWithoutAnnotation) {
  grpc::ClientContext context;
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(cores_->Allocate(&context, AllocateRequest({"neuroncore5"}), &response).ok());
  EXPECT_EQ(response.container_responses(0).envs().at("NEURON_RT_VISIBLE_CORES"), "5");
  EXPECT_EQ(response.container_responses(0).devices(0).host_path(), "/dev/neuron2");
}

// Round trips over the unix socket, as kubelet makes them (pods from an in-memory source).
TEST_F(DevicePluginWireTest, LatencyOfPreferredAndAllocate) {
  for (int i = 0; i < 30; ++i) {
    pods_.Add(MakePod("web-" + std::to_string(i), {{"main", "cpu-only/none", 0}}));
  }
  constexpr int kRounds = 300;
  std::vector<double> prefer_us;
  std::vector<double> allocate_us;
  for (int i = 0; i < kRounds; ++i) {
    const std::string name = "job-" + std::to_string(i);
    pods_.Add(MakePod(name, {{"main", kNeuron, 4}},
                      RecordAnnotations({{"main", kNeuron, {4, 5, 6, 7}}}, 100 + i)));
    auto t0 = std::chrono::steady_clock::now();
    grpc::ClientContext prefer_context;
    v1beta1::PreferredAllocationResponse preferred;
    ASSERT_TRUE(devices_
                    ->GetPreferredAllocation(&prefer_context, PreferRequest("neuron", 16, {}, 4),
                                             &preferred)
                    .ok());
    auto t1 = std::chrono::steady_clock::now();
    grpc::ClientContext allocate_context;
    v1beta1::AllocateResponse response;
    std::vector<std::string> ids(preferred.container_responses(0).deviceids().begin(),
                                 preferred.container_responses(0).deviceids().end());
    ASSERT_TRUE(devices_->Allocate(&allocate_context, AllocateRequest(ids), &response).ok());
    auto t2 = std::chrono::steady_clock::now();
    prefer_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    allocate_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    pods_.Remove(name);
  }
  auto report = [](const char* what, std::vector<double> us) {
    std::sort(us.begin(), us.end());
    std::printf(
        "[ latency  ] %s over the unix socket: p50 %.0f us, p90 %.0f us, p99 %.0f us "
        "(%zu calls)\n",
        what, us[us.size() / 2], us[us.size() * 9 / 10], us[us.size() * 99 / 100], us.size());
  };
  report("GetPreferredAllocation", prefer_us);
  report("Allocate", allocate_us);
}

// The price of reading kubelet's books (issue 18): the round trips of
// LatencyOfPreferredAndAllocate with a PodResources server listing 40 pods (8 holding a device),
// which both calls now ask before answering.
TEST_F(DevicePluginServerTest, LatencyWithKubeletsPodResources) {
  Install("trn1.32xlarge");
  const std::string socket = host_.root + "/pod-resources.sock";
  FakePodResources pod_resources(socket);
  for (int i = 0; i < 40; ++i) {
    const std::string name = "web-" + std::to_string(i);
    if (i < 8) {
      pod_resources.AddContainer("default", name, "main", kNeuron,
                                 {"neuron" + std::to_string(8 + i)});
    } else {
      pod_resources.AddContainer("default", name, "main", "example.com/other", {});
    }
  }
  PluginOptions options = FastOptions(host_);
  options.pod_resources_socket = socket;
  RunningPlugin plugin(options, pods_);
  ASSERT_TRUE(WaitUntil([&] { return kubelet_->registrations().size() == 2; }, 5s));
  auto devices = kubelet_->PluginStub(kNeuron);
  constexpr int kRounds = 300;
  std::vector<double> prefer_us;
  std::vector<double> allocate_us;
  for (int i = 0; i < kRounds; ++i) {
    const std::string name = "job-" + std::to_string(i);
    pods_.Add(MakePod(name, {{"main", kNeuron, 4}},
                      RecordAnnotations({{"main", kNeuron, {4, 5, 6, 7}}}, 100 + i)));
    auto t0 = std::chrono::steady_clock::now();
    grpc::ClientContext prefer_context;
    v1beta1::PreferredAllocationRequest prefer;
    auto* ask = prefer.add_container_requests();
    for (int d = 0; d < 8; ++d) ask->add_available_deviceids("neuron" + std::to_string(d));
    ask->set_allocation_size(4);
    v1beta1::PreferredAllocationResponse preferred;
    ASSERT_TRUE(devices->GetPreferredAllocation(&prefer_context, prefer, &preferred).ok());
    auto t1 = std::chrono::steady_clock::now();
    grpc::ClientContext allocate_context;
    v1beta1::AllocateRequest request;
    auto* container = request.add_container_requests();
    for (const std::string& id : preferred.container_responses(0).deviceids()) {
      container->add_devices_ids(id);
    }
    v1beta1::AllocateResponse response;
    const grpc::Status status = devices->Allocate(&allocate_context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    auto t2 = std::chrono::steady_clock::now();
    prefer_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    allocate_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    pods_.Remove(name);
  }
  auto report = [](const char* what, std::vector<double> us) {
    std::sort(us.begin(), us.end());
    std::printf(
        "[ latency  ] %s with PodResources (40 pods): p50 %.0f us, p90 %.0f us, p99 %.0f us "
        "(%zu calls)\n",
        what, us[us.size() / 2], us[us.size() * 9 / 10], us[us.size() * 99 / 100], us.size());
  };
  report("GetPreferredAllocation", prefer_us);
  report("Allocate", allocate_us);
}

TEST_F(DevicePluginServerTest, RecordsKubeletsAssignmentForUnannotatedPods) {
  Install("inf2.48xlarge");
  const std::string socket = host_.root + "/pod-resources.sock";
  FakePodResources pod_resources(socket);
  pod_resources.AddContainer("default", "plain", "main", kNeuron, {"neuron7"});
  pods_.Add(MakePod("plain", {{"main", kNeuron, 1}}));
  PluginOptions options = FastOptions(host_);
  options.pod_resources_socket = socket;
  RunningPlugin plugin(options, pods_);
  ASSERT_TRUE(WaitUntil([&] { return kubelet_->registrations().size() == 2; }, 5s));
  auto stub = kubelet_->PluginStub(kNeuron);
  grpc::ClientContext context;
  v1beta1::AllocateRequest request;
  request.add_container_requests()->add_devices_ids("neuron7");
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(stub->Allocate(&context, request, &response).ok());
  ASSERT_TRUE(WaitUntil(
      [&] { return pods_.Get("plain").annotations.count("toposched.io/allocation") > 0; }, 3s));
  const kube::Pod pod = pods_.Get("plain");
  EXPECT_THAT(pod.annotations.at("toposched.io/allocation"),
              HasSubstr(R"("resource":"aws.amazon.com/neuron","ids":[7])"));
  EXPECT_EQ(pod.annotations.at("AWS_NEURON_IDS"), "7");
  EXPECT_EQ(pod.annotations.at("NEURON_ALLOCATED"), "true");
}

// What kubelet holds as allocatable: the ids FakeKubelet last received healthy in ListAndWatch
// (kubelet's GetAllocatableDevices is its devices filtered by health), as long as `holds`.
FakePodResources::Allocatable HeldByKubelet(FakeKubelet& kubelet, const std::atomic<bool>& holds,
                                            const std::string& drop = "") {
  FakePodResources::Allocatable out;
  if (!holds) return out;
  for (const char* resource : {kNeuron, kCore}) {
    std::vector<std::string>& ids = out[resource];
    for (const auto& [id, health] : kubelet.Devices(resource).health) {
      if (health == "Healthy" && id != drop) ids.push_back(id);
    }
  }
  return out;
}

TEST_F(DevicePluginServerTest, ReadyOnlyOnceKubeletHoldsTheAdvertisedDevices) {
  Install("inf2.48xlarge");
  const std::string socket = host_.root + "/pod-resources.sock";
  FakePodResources pod_resources(socket);
  pod_resources.Offer(false, true);
  std::atomic<bool> holds{false};
  std::atomic<bool> drop_neuron5{true};
  pod_resources.SetAllocatableProvider(
      [&] { return HeldByKubelet(*kubelet_, holds, drop_neuron5 ? "neuron5" : ""); });
  PluginOptions options = FastOptions(host_);
  options.pod_resources_socket = socket;
  options.allocatable_retry = 20ms;
  RunningPlugin plugin(options, pods_);
  const nodeagent::Readiness& readiness = plugin.manager().readiness();
  // Registered, but kubelet has not taken our list yet: not ready.
  ASSERT_TRUE(WaitUntil([&] { return kubelet_->registrations().size() == 2; }, 5s));
  ASSERT_TRUE(WaitUntil(
      [&] {
        return readiness.reason().find("waiting for kubelet to hold the advertised devices") !=
               std::string::npos;
      },
      5s))
      << readiness.reason();
  EXPECT_FALSE(readiness.ready());
  EXPECT_THAT(readiness.reason(), HasSubstr("kubelet lacks 12 of the 12 advertised healthy"));
  // kubelet holds all but neuron5: still not ready, and the metric names the gap.
  holds = true;
  ASSERT_TRUE(WaitUntil(
      [&] { return readiness.reason().find("lacks 1 of the 12") != std::string::npos; }, 5s))
      << readiness.reason();
  EXPECT_FALSE(readiness.ready());
  EXPECT_THAT(readiness.reason(), HasSubstr("(neuron5)"));
  EXPECT_THAT(readiness.Metrics(),
              HasSubstr("toposched_device_plugin_allocatable_mismatch_ids{resource=\"aws.amazon."
                        "com/neuron\",side=\"missing\"} 1"));
  drop_neuron5 = false;
  ASSERT_TRUE(WaitUntil([&] { return readiness.ready(); }, 5s)) << readiness.reason();
  EXPECT_THAT(readiness.reason(), HasSubstr("kubelet holds every advertised healthy id ("
                                            "aws.amazon.com/neuron 12 ids, "
                                            "aws.amazon.com/neuroncore 24 ids)"));
  EXPECT_THAT(readiness.Metrics(),
              HasSubstr("toposched_device_plugin_allocatable_mismatch_ids{resource=\"aws.amazon."
                        "com/neuron\",side=\"missing\"} 0"));
  EXPECT_THAT(readiness.Metrics(), HasSubstr("toposched_device_plugin_ready 1"));

  // kubelet restarts: the plugin registers again and asks again before it counts as ready.
  const int asked = pod_resources.allocatable_calls();
  kubelet_->Restart();
  ASSERT_TRUE(WaitUntil([&] { return kubelet_->registrations().size() == 4; }, 10s));
  ASSERT_TRUE(WaitUntil(
      [&] { return pod_resources.allocatable_calls() > asked && readiness.ready(); }, 10s))
      << readiness.reason();
}

TEST_F(DevicePluginServerTest, ReadyOnceRegisteredWhenKubeletHasNoAllocatable) {
  Install("inf2.48xlarge");
  const std::string socket = host_.root + "/pod-resources.sock";
  FakePodResources pod_resources(socket);  // kubelet 1.20: List only
  PluginOptions options = FastOptions(host_);
  options.pod_resources_socket = socket;
  RunningPlugin plugin(options, pods_);
  const nodeagent::Readiness& readiness = plugin.manager().readiness();
  ASSERT_TRUE(WaitUntil([&] { return readiness.ready(); }, 5s)) << readiness.reason();
  EXPECT_THAT(readiness.reason(), HasSubstr("does not offer PodResources GetAllocatableResources"));
  EXPECT_EQ(kubelet_->registrations().size(), 2u);
  EXPECT_EQ(pod_resources.allocatable_calls(), 1);  // not asked again
  EXPECT_THAT(
      readiness.Metrics(),
      HasSubstr("toposched_device_plugin_allocatable_checks_total{result=\"not_offered\"} 1"));
}

// A grant without a record is recorded from PodResources: with Get for that pod where kubelet
// offers it, with List where it does not (asked once, then remembered).
TEST_F(DevicePluginServerTest, RecordsAGrantWithGetOrElseList) {
  for (const bool offer_get : {true, false}) {
    SCOPED_TRACE(offer_get ? "Get offered" : "Get not offered");
    ShortTempDir dir;
    FakeHost host{dir.path()};
    host.Install("inf2.48xlarge");
    FakeKubelet kubelet(host.kubelet());
    FakePodSource pods;
    const std::string socket = host.root + "/pod-resources.sock";
    FakePodResources pod_resources(socket);
    pod_resources.Offer(offer_get, false);
    PluginOptions options = FastOptions(host);
    options.pod_resources_socket = socket;
    RunningPlugin plugin(options, pods);
    ASSERT_TRUE(WaitUntil([&] { return kubelet.registrations().size() == 2; }, 5s));
    auto stub = kubelet.PluginStub(kNeuron);
    for (const auto& [name, id] : {std::pair{"plain-a", "neuron7"}, {"plain-b", "neuron9"}}) {
      pod_resources.AddContainer("default", name, "main", kNeuron, {id});
      pods.Add(MakePod(name, {{"main", kNeuron, 1}}));
      grpc::ClientContext context;
      v1beta1::AllocateRequest request;
      request.add_container_requests()->add_devices_ids(id);
      v1beta1::AllocateResponse response;
      ASSERT_TRUE(stub->Allocate(&context, request, &response).ok());
      ASSERT_TRUE(WaitUntil(
          [&] { return pods.Get(name).annotations.count("toposched.io/allocation") > 0; }, 5s));
      EXPECT_EQ(pods.Get(name).annotations.at("AWS_NEURON_IDS"), std::string(id).substr(6));
    }
    if (offer_get) {
      EXPECT_THAT(pod_resources.gets(), ElementsAre("default/plain-a", "default/plain-b"));
    } else {
      EXPECT_EQ(pod_resources.get_calls(), 1);  // refused once, then List only
    }
  }
}

// kubelet refuses to register an endpoint it already holds ("device plugin already connected",
// as 1.37 answered a second restart signal for the same kubelet in e2e): that is registered, not a
// failure to retry for ever (the plugin would never be ready).
TEST_F(DevicePluginServerTest, AnEndpointKubeletAlreadyHoldsCountsAsRegistered) {
  Install("inf2.48xlarge");
  kubelet_->AnswerAlreadyConnected();
  RunningPlugin plugin(FastOptions(host_), pods_);
  const nodeagent::Readiness& readiness = plugin.manager().readiness();
  ASSERT_TRUE(WaitUntil([&] { return readiness.ready(); }, 5s)) << readiness.reason();
  EXPECT_EQ(plugin.manager().registrations(), 2);
}

// Issue 29, row 5: a Node object deleted and re-created (kubelet re-registering) has lost the
// plugin's LNC label, the extender's positive evidence of a Trn2 node's LNC. Before the fix the
// plugin set it once per process: the re-created node stayed unlabelled. Driven through the fake
// API server: the plugin reads its node back and merge-patches the label when it is missing or
// different, and only then.
class DevicePluginLabelTest : public DevicePluginServerTest {
 protected:
  void SetUp() override {
    Install("trn2.48xlarge", 1);
    api_.UpsertNode(testing::EksNodeJson("node-a", "trn2.48xlarge", 16, 128));
    auto client = kube::ApiClient::FromKubeconfig(api_.WriteKubeconfig(dir_.path() + "/kc"));
    ASSERT_TRUE(client.ok()) << client.error();
    client_ = std::move(client).value();
    source_ = std::make_unique<ApiPodSource>(*client_, "node-a");
  }

  // The node re-created as kubelet registers it, with `labels` (JSON members) of its own.
  void RecreateNode(const std::string& labels = "") {
    api_.DeleteNode("node-a");
    std::string json = testing::EksNodeJson("node-a", "trn2.48xlarge", 16, 128);
    if (!labels.empty())
      json.replace(json.find(R"("labels":{)"), 10, R"("labels":{)" + labels + ",");
    api_.UpsertNode(json);
  }
  // The label's patches (the plugin also patches the node's annotations on failed devices).
  size_t Patches() const {
    size_t n = 0;
    for (const auto& r : api_.RequestsMatching("PATCH", "/api/v1/nodes/node-a")) {
      n += r.body.find("\"labels\"") != std::string::npos ? 1 : 0;
    }
    return n;
  }
  size_t Reads() const { return api_.RequestsMatching("GET", "/api/v1/nodes/node-a").size(); }
  bool Labelled(const std::string& lnc) const {
    const auto node = api_.GetNodeJson("node-a");
    return node && node->find(R"("toposched.io/neuron-lnc":")" + lnc + R"(")") != std::string::npos;
  }

  testing::FakeApiServer api_;
  std::unique_ptr<kube::ApiClient> client_;
  std::unique_ptr<ApiPodSource> source_;
};

TEST_F(DevicePluginLabelTest, ARecreatedNodeGetsItsLncLabelBackOnThePeriodicCheck) {
  PluginOptions options = FastOptions(host_);
  options.label_interval = 50ms;
  RunningPlugin plugin(options, *source_);
  ASSERT_TRUE(WaitUntil([&] { return Patches() == 1 && Labelled("1"); }, 5s));

  RecreateNode();
  ASSERT_FALSE(Labelled("1"));
  EXPECT_TRUE(WaitUntil([&] { return Patches() == 2 && Labelled("1"); }, 5s))
      << "the re-created node was not labelled again; PATCHes: " << Patches();

  RecreateNode(R"("toposched.io/neuron-lnc":"2")");  // someone else's, wrong value
  EXPECT_TRUE(WaitUntil([&] { return Patches() == 3 && Labelled("1"); }, 5s))
      << "PATCHes: " << Patches();

  // Bounded: a label that is right is read, not written again.
  const size_t reads = Reads();
  ASSERT_TRUE(WaitUntil([&] { return Reads() >= reads + 3; }, 5s));
  EXPECT_EQ(Patches(), 3u);
}

TEST_F(DevicePluginLabelTest, ARecreatedNodeGetsItsLncLabelBackWhenKubeletReRegisters) {
  PluginOptions options = FastOptions(host_);
  options.label_interval = std::chrono::hours(1);  // only the re-registration checks
  RunningPlugin plugin(options, *source_);
  ASSERT_TRUE(WaitUntil([&] { return kubelet_->RegistrationCount(kCore) == 1; }, 5s));
  ASSERT_TRUE(WaitUntil([&] { return Patches() == 1 && Labelled("1"); }, 5s));

  RecreateNode();
  kubelet_->Restart();
  EXPECT_TRUE(WaitUntil([&] { return Patches() == 2 && Labelled("1"); }, 5s))
      << "the re-created node was not labelled again; PATCHes: " << Patches();
}

}  // namespace
}  // namespace toposched::deviceplugin
