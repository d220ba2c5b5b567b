// The device plugin's hot paths, measured with Google Benchmark.
// Run from a release build:  ./build/bench/deviceplugin_bench --benchmark_repetitions=3
//
// Always built: the topology question inside GetPreferredAllocation (every legal placement of a
// request among kubelet's available ids that holds the must-include ids). When the bench is
// linked with toposched_deviceplugin (bench/CMakeLists.txt links only sim, tracker and topology
// today), it also measures GetPreferredAllocation and Allocate round trips over a unix socket.
#include <algorithm>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "topology/allocator.h"
#include "topology/catalog.h"

#if __has_include("deviceplugin.grpc.pb.h")
#define TOPOSCHED_BENCH_DEVICEPLUGIN 1
#include <stdlib.h>

#include <filesystem>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "base/json_escape.h"
#include "deviceplugin.grpc.pb.h"
#include "deviceplugin/allocation.h"
#include "deviceplugin/api_pod_source.h"
#include "deviceplugin/endpoint.h"
#include "deviceplugin/health.h"
#include "deviceplugin/manager.h"
#include "kube/client.h"
#include "support/fake_apiserver.h"
#endif

namespace {

using namespace toposched;
using topology::NodeShape;
using topology::NodeUsage;
using topology::Unit;

NodeShape ShapeOf(const std::string& type, int lnc = 0) {
  return *NodeShape::Make(*topology::Catalog::Embedded().Find(type), lnc);
}

// kubelet offers every other unit of the first half plus the whole second half; the container
// must include one unit of the second half.
void BM_PreferenceTopology(benchmark::State& state, const std::string& type, Unit unit, int lnc,
                           int size) {
  const NodeShape shape = ShapeOf(type, lnc);
  const int units = unit == Unit::kDevice ? shape.devices : shape.cores;
  NodeUsage usage;
  for (int id = 0; id < units / 2; id += 2) usage.Take(shape, unit, {id});
  const int must = units / 2 + size / 2;
  for (auto _ : state) {
    const auto placements = topology::LegalPlacements(shape, usage, {unit, size});
    const auto it = std::find_if(placements.begin(), placements.end(), [&](const auto& p) {
      return std::binary_search(p.ids.begin(), p.ids.end(), must);
    });
    benchmark::DoNotOptimize(it);
  }
}
BENCHMARK_CAPTURE(BM_PreferenceTopology, inf2_devices_3, "inf2.48xlarge", Unit::kDevice, 0, 3);
BENCHMARK_CAPTURE(BM_PreferenceTopology, trn1_devices_4, "trn1.32xlarge", Unit::kDevice, 0, 4);
BENCHMARK_CAPTURE(BM_PreferenceTopology, trn1_cores_6, "trn1.32xlarge", Unit::kCore, 0, 6);
BENCHMARK_CAPTURE(BM_PreferenceTopology, trn2_lnc1_cores_16, "trn2.48xlarge", Unit::kCore, 1, 16);

#ifdef TOPOSCHED_BENCH_DEVICEPLUGIN

// One pod waiting for devices 4-7 and `pods - 1` waiting for one core of device 0 (the plugin
// refuses ids another pod holds or reserves, so they cannot all record 4-7). Allocate of 4-7 finds
// job-0 and then, once it is served in memory, answers by the re-Allocate path: the same ids, and
// every call reads every pod's record.
class StaticPods : public nodeagent::PodSource {
 public:
  explicit StaticPods(int pods) {
    for (int i = 0; i < pods; ++i) {
      kube::Pod pod;
      pod.ns = "default";
      pod.name = "job-" + std::to_string(i);
      pod.uid = pod.name;
      kube::Container container;
      container.name = "main";
      if (i == 0) {
        container.limits["aws.amazon.com/neuron"] = 4;
        pod.annotations["toposched.io/allocation"] =
            R"({"node":"n","instanceType":"trn1.32xlarge","containers":[{"name":"main","resource":"aws.amazon.com/neuron","ids":[4,5,6,7]}]})";
      } else {
        container.limits["aws.amazon.com/neuroncore"] = 1;
        pod.annotations["toposched.io/allocation"] =
            R"({"node":"n","instanceType":"trn1.32xlarge","containers":[{"name":"main","resource":"aws.amazon.com/neuroncore","ids":[0]}]})";
      }
      pod.containers.push_back(container);
      pod.annotations["NEURON_ALLOCATED"] = "false";
      pod.annotations["NEURON_ALLOC_TIME"] = std::to_string(1000 + i);
      pods_.push_back(std::move(pod));
    }
  }
  Result<std::vector<kube::Pod>> PodsOnNode() override { return pods_; }
  Status PatchAnnotations(const kube::Pod&,
                          const std::map<std::string, std::optional<std::string>>&) override {
    return OkStatus();
  }

 private:
  std::vector<kube::Pod> pods_;
};

struct Server {
  explicit Server(int pods)
      : shape(ShapeOf("trn1.32xlarge")),
        source(pods),
        health(16),
        allocations(source, shape,
                    {"n", nodeagent::CoreNumbering::kContainer,
                     deviceplugin::DefaultResources("aws.amazon.com/neuron", "")}) {
    char pattern[] = "/tmp/tsdpb.XXXXXX";
    dir = ::mkdtemp(pattern);
    for (int d = 0; d < 16; ++d) health.Set(d, true);
    endpoint = std::make_unique<deviceplugin::PluginEndpoint>(
        allocations.options().resources[0], dir, "bench.sock",
        deviceplugin::EndpointContext{&shape, &health, &allocations,
                                      nodeagent::CoreNumbering::kContainer});
    (void)endpoint->Start();
    stub = v1beta1::DevicePlugin::NewStub(
        grpc::CreateChannel("unix://" + dir + "/bench.sock", grpc::InsecureChannelCredentials()));
  }
  ~Server() {
    endpoint.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  NodeShape shape;
  StaticPods source;
  deviceplugin::HealthBoard health;
  deviceplugin::AllocationService allocations;
  std::string dir;
  std::unique_ptr<deviceplugin::PluginEndpoint> endpoint;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
};

void BM_GetPreferredAllocationRoundTrip(benchmark::State& state) {
  spdlog::set_level(spdlog::level::warn);
  Server server(static_cast<int>(state.range(0)));
  v1beta1::PreferredAllocationRequest request;
  auto* container = request.add_container_requests();
  for (int d = 0; d < 16; ++d) container->add_available_deviceids("neuron" + std::to_string(d));
  container->set_allocation_size(4);
  for (auto _ : state) {
    grpc::ClientContext context;
    v1beta1::PreferredAllocationResponse response;
    if (!server.stub->GetPreferredAllocation(&context, request, &response).ok()) {
      state.SkipWithError("GetPreferredAllocation failed");
      break;
    }
  }
}
BENCHMARK(BM_GetPreferredAllocationRoundTrip)->Arg(1)->Arg(50)->UseRealTime();

void BM_AllocateRoundTrip(benchmark::State& state) {
  spdlog::set_level(spdlog::level::warn);
  Server server(static_cast<int>(state.range(0)));
  v1beta1::AllocateRequest request;
  auto* container = request.add_container_requests();
  for (int d = 4; d < 8; ++d) container->add_devices_ids("neuron" + std::to_string(d));
  for (auto _ : state) {
    grpc::ClientContext context;
    v1beta1::AllocateResponse response;
    // Once every pod is served, the re-Allocate path answers: same ids, same work.
    if (!server.stub->Allocate(&context, request, &response).ok()) {
      state.SkipWithError("Allocate failed");
      break;
    }
  }
}
BENCHMARK(BM_AllocateRoundTrip)->Arg(1)->Arg(50)->UseRealTime();

// Serves `resource` of `allocations` on a unix socket in `dir` and dials it, as kubelet would.
struct SocketServer {
  std::unique_ptr<deviceplugin::PluginEndpoint> endpoint;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
};
Result<SocketServer> ServeOnSocket(const claims::ResourceSpec& resource,
                                   deviceplugin::AllocationService& allocations,
                                   const NodeShape& shape, deviceplugin::HealthBoard& health,
                                   const std::string& dir, const std::string& socket) {
  SocketServer out;
  out.endpoint = std::make_unique<deviceplugin::PluginEndpoint>(
      resource, dir, socket,
      deviceplugin::EndpointContext{&shape, &health, &allocations,
                                    nodeagent::CoreNumbering::kContainer});
  if (auto started = out.endpoint->Start(); !started.ok()) return Error{started.error()};
  out.stub = v1beta1::DevicePlugin::NewStub(
      grpc::CreateChannel("unix://" + dir + "/" + socket, grpc::InsecureChannelCredentials()));
  return out;
}

// A pod of the node as the API serves it. `ids` empty: a pod without Neuron devices.
std::string ApiPodJson(const std::string& name, const std::string& ids, int count, bool allocated,
                       int64_t alloc_time) {
  if (ids.empty()) {
    return fmt::format(
        R"({{"metadata":{{"name":"{0}","namespace":"default","uid":"{0}-uid","creationTimestamp":"2026-11-22T10:00:00Z","labels":{{"app":"web"}}}},"spec":{{"nodeName":"n","containers":[{{"name":"main","image":"web:v1","resources":{{"requests":{{"cpu":"500m","memory":"1Gi"}}}}}}]}},"status":{{"phase":"Running"}}}})",
        name);
  }
  const std::string record = fmt::format(
      R"({{"node":"n","instanceType":"trn1.32xlarge","containers":[{{"name":"main","resource":"aws.amazon.com/neuron","ids":[{}]}}]}})",
      ids);
  return fmt::format(
      R"({{"metadata":{{"name":"{0}","namespace":"default","uid":"{0}-uid","creationTimestamp":"2026-11-22T10:00:00Z","annotations":{{"toposched.io/allocation":{1},"AWS_NEURON_IDS":"{2}","NEURON_ALLOCATED":"{3}","NEURON_ALLOC_TIME":"{4}"}}}},"spec":{{"nodeName":"n","containers":[{{"name":"main","image":"model:v1","resources":{{"limits":{{"aws.amazon.com/neuron":"{5}"}},"requests":{{"aws.amazon.com/neuron":"{5}"}}}}}}]}},"status":{{"phase":"{6}"}}}})",
      name, toposched::JsonQuote(record), ids, allocated ? "true" : "false", alloc_time, count,
      allocated ? "Running" : "Pending");
}

// Allocate as kubelet calls it, including the plugin's API look-up, with 100 pods on the node in
// the loopback API server (TLS, token): the plugin finds the pending pod by its annotation and
// merge-patches NEURON_ALLOCATED. Target: p99 <= 5 ms. Each iteration adds a fresh pending pod
// (untimed) and removes it after. Arg 0: every call lists the node's pods (ApiPodSource); arg 1:
// the plugin's default, a watch of the node's pods (WatchedPodSource), with the pod already seen.
void BM_AllocateThroughApi100Pods(benchmark::State& state) {
  spdlog::set_level(spdlog::level::warn);
  testing::FakeApiServer api;
  char pattern[] = "/tmp/tsdpb.XXXXXX";
  const std::string dir = ::mkdtemp(pattern);
  auto client = kube::ApiClient::FromKubeconfig(api.WriteKubeconfig(dir + "/kubeconfig"));
  if (!client.ok()) {
    state.SkipWithError(client.error().c_str());
    return;
  }
  // 99 pods already there: 90 without Neuron devices, 9 served ones on devices 8-15 and 3.
  for (int i = 0; i < 90; ++i)
    api.UpsertPod(ApiPodJson("web-" + std::to_string(i), "", 0, true, 0));
  for (int d = 8; d < 16; ++d) {
    api.UpsertPod(ApiPodJson("served-" + std::to_string(d), std::to_string(d), 1, true, d));
  }
  api.UpsertPod(ApiPodJson("served-3", "3", 1, true, 3));
  std::unique_ptr<nodeagent::PodSource> owned;
  deviceplugin::WatchedPodSource* watched = nullptr;
  if (state.range(0) == 0) {
    owned = std::make_unique<deviceplugin::ApiPodSource>(**client, "n");
  } else {
    auto w = std::make_unique<deviceplugin::WatchedPodSource>(**client, "n");
    w->WaitForSync(std::chrono::seconds(5));
    watched = w.get();
    owned = std::move(w);
  }
  nodeagent::PodSource& source = *owned;
  const NodeShape shape = ShapeOf("trn1.32xlarge");
  deviceplugin::HealthBoard health(16);
  for (int d = 0; d < 16; ++d) health.Set(d, true);
  deviceplugin::AllocationService allocations(
      source, shape,
      {"n", nodeagent::CoreNumbering::kContainer,
       deviceplugin::DefaultResources("aws.amazon.com/neuron", "aws.amazon.com/neuroncore")});
  auto served =
      ServeOnSocket(allocations.options().resources[0], allocations, shape, health, dir, "a.sock");
  if (!served.ok()) {
    state.SkipWithError(served.error().c_str());
    return;
  }
  deviceplugin::PluginEndpoint& endpoint = *served->endpoint;
  auto& stub = served->stub;
  v1beta1::AllocateRequest request;
  auto* container = request.add_container_requests();
  for (int d = 4; d < 8; ++d) container->add_devices_ids("neuron" + std::to_string(d));

  std::vector<double> us;
  int n = 0;
  for (auto _ : state) {
    const std::string name = "job-" + std::to_string(n++);
    api.UpsertPod(ApiPodJson(name, "4,5,6,7", 4, false, 1000 + n));
    if (watched != nullptr) {
      // Wait (untimed) until the watch delivered it: kubelet admits a pod after its own watch
      // saw the binding, which is when ours does too.
      for (int spin = 0; spin < 1000; ++spin) {
        auto cached = watched->PodsOnNode();
        if (cached.ok() && cached->size() == 100) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    grpc::ClientContext context;
    v1beta1::AllocateResponse response;
    const auto t0 = std::chrono::steady_clock::now();
    const grpc::Status status = stub->Allocate(&context, request, &response);
    const auto t1 = std::chrono::steady_clock::now();
    if (!status.ok()) {
      state.SkipWithError(status.error_message().c_str());
      break;
    }
    const double elapsed = std::chrono::duration<double>(t1 - t0).count();
    state.SetIterationTime(elapsed);
    us.push_back(elapsed * 1e6);
    api.DeletePod("default", name);
    if (watched != nullptr) {
      for (int spin = 0; spin < 1000; ++spin) {
        auto cached = watched->PodsOnNode();
        if (cached.ok() && cached->size() == 99) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }
  if (!us.empty()) {
    std::sort(us.begin(), us.end());
    state.counters["p50_us"] = us[us.size() / 2];
    state.counters["p99_us"] = us[us.size() * 99 / 100];
  }
  if (watched != nullptr) {
    // What one read of the cache costs (GetPreferredAllocation makes one per call).
    constexpr int kReads = 200;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReads; ++i) benchmark::DoNotOptimize(watched->PodsOnNode());
    state.counters["cache_read_us"] =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        kReads;
  }
  endpoint.Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}
BENCHMARK(BM_AllocateThroughApi100Pods)->Arg(0)->Arg(1)->UseManualTime()->Iterations(500);

// GetPreferredAllocation for 128 cores (trn2.48xlarge at LNC 1: 128 physical cores), measured
// in the server's handler and over the socket. Target: <= 100 us.
void BM_PreferredAllocation128Cores(benchmark::State& state) {
  spdlog::set_level(spdlog::level::warn);
  const NodeShape shape = ShapeOf("trn2.48xlarge", 1);
  StaticPods source(0);
  deviceplugin::HealthBoard health(shape.devices);
  for (int d = 0; d < shape.devices; ++d) health.Set(d, true);
  deviceplugin::AllocationService allocations(
      source, shape,
      {"n", nodeagent::CoreNumbering::kContainer,
       deviceplugin::DefaultResources("aws.amazon.com/neuron", "aws.amazon.com/neuroncore")});
  char pattern[] = "/tmp/tsdpb.XXXXXX";
  const std::string dir = ::mkdtemp(pattern);
  auto served = ServeOnSocket(allocations.options().resources[1], allocations, shape, health, dir,
                              "cores.sock");
  if (!served.ok()) {
    state.SkipWithError(served.error().c_str());
    return;
  }
  deviceplugin::PluginEndpoint& endpoint = *served->endpoint;
  auto& stub = served->stub;
  // kubelet offers all 128 cores but every other one of the first half; ask for 16 including one.
  v1beta1::PreferredAllocationRequest request;
  auto* ask = request.add_container_requests();
  for (int c = 0; c < shape.cores; ++c) {
    if (c < shape.cores / 2 && c % 2 == 1) continue;
    ask->add_available_deviceids("neuroncore" + std::to_string(c));
  }
  ask->add_must_include_deviceids("neuroncore" + std::to_string(shape.cores / 2 + 8));
  ask->set_allocation_size(static_cast<int32_t>(state.range(0)));
  if (state.range(1) == 1) {
    // The floor of any call on this socket: GetDevicePluginOptions does no work at all.
    for (auto _ : state) {
      grpc::ClientContext context;
      v1beta1::DevicePluginOptions options;
      if (!stub->GetDevicePluginOptions(&context, v1beta1::Empty(), &options).ok()) {
        state.SkipWithError("GetDevicePluginOptions failed");
        break;
      }
    }
    endpoint.Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    return;
  }
  if (state.range(1) == 2) {
    // The handler alone, without gRPC: what the plugin itself adds to a call.
    std::vector<int> available;
    for (const auto& id : request.container_requests(0).available_deviceids()) {
      available.push_back(std::stoi(id.substr(std::string("neuroncore").size())));
    }
    const std::vector<int> must = {shape.cores / 2 + 8};
    for (auto _ : state) {
      auto ids = allocations.Prefer(allocations.options().resources[1], available, must,
                                    static_cast<int>(state.range(0)));
      benchmark::DoNotOptimize(ids);
    }
    endpoint.Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    return;
  }
  std::vector<double> us;
  for (auto _ : state) {
    grpc::ClientContext context;
    v1beta1::PreferredAllocationResponse response;
    const auto t0 = std::chrono::steady_clock::now();
    const grpc::Status status = stub->GetPreferredAllocation(&context, request, &response);
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (!status.ok() || response.container_responses(0).deviceids_size() != state.range(0)) {
      state.SkipWithError("GetPreferredAllocation failed or answered the wrong size");
      break;
    }
  }
  if (!us.empty()) {
    std::sort(us.begin(), us.end());
    state.counters["p50_us"] = us[us.size() / 2];
    state.counters["p99_us"] = us[us.size() * 99 / 100];
  }
  endpoint.Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}
// Args: cores asked; 0 = GetPreferredAllocation over the socket, 1 = GetDevicePluginOptions over
// the socket (gRPC's own floor), 2 = the handler in process.
BENCHMARK(BM_PreferredAllocation128Cores)
    ->Args({16, 0})
    ->Args({64, 0})
    ->Args({16, 1})
    ->Args({16, 2})
    ->Args({64, 2})
    ->Iterations(2000)
    ->UseRealTime();

#endif  // TOPOSCHED_BENCH_DEVICEPLUGIN

}  // namespace

BENCHMARK_MAIN();
