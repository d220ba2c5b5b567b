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

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "deviceplugin.grpc.pb.h"
#include "deviceplugin/allocation.h"
#include "deviceplugin/endpoint.h"
#include "deviceplugin/health.h"
#include "deviceplugin/manager.h"
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

// Pods that all wait for 4 devices: Allocate always finds one (the service then marks it served
// in memory, so the source forgets nothing and every call scans the same list).
class StaticPods : public deviceplugin::PodSource {
 public:
  explicit StaticPods(int pods) {
    for (int i = 0; i < pods; ++i) {
      kube::Pod pod;
      pod.ns = "default";
      pod.name = "job-" + std::to_string(i);
      pod.uid = pod.name;
      kube::Container container;
      container.name = "main";
      container.limits["aws.amazon.com/neuron"] = 4;
      pod.containers.push_back(container);
      pod.annotations["toposched.io/allocation"] =
          R"({"node":"n","instanceType":"trn1.32xlarge","containers":[{"name":"main","resource":"aws.amazon.com/neuron","ids":[4,5,6,7]}]})";
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
                    {"n", deviceplugin::CoreNumbering::kContainer,
                     deviceplugin::DefaultResources("aws.amazon.com/neuron", "")}) {
    char pattern[] = "/tmp/tsdpb.XXXXXX";
    dir = ::mkdtemp(pattern);
    for (int d = 0; d < 16; ++d) health.Set(d, true);
    endpoint = std::make_unique<deviceplugin::PluginEndpoint>(
        allocations.options().resources[0], dir, "bench.sock",
        deviceplugin::EndpointContext{&shape, &health, &allocations,
                                      deviceplugin::CoreNumbering::kContainer});
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

#endif  // TOPOSCHED_BENCH_DEVICEPLUGIN

}  // namespace

BENCHMARK_MAIN();
