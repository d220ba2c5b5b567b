// Fakes of the node both agents' tests share: a fake Neuron sysfs/dev tree, an in-memory pod
// source and a fake PodResources server (kubelet's books). Everything lives in a temp dir and uses
// unix sockets only.
#ifndef TOPOSCHED_TEST_NODE_FIXTURES_H_
#define TOPOSCHED_TEST_NODE_FIXTURES_H_

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include "kube/objects.h"
#include "nodeagent/pod_source.h"
#include "podresources.grpc.pb.h"
#include "support/pods.h"
#include "topology/catalog.h"

namespace toposched::testing {

inline void WriteFile(const std::string& path, const std::string& content) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

// A host tree under `root`: root/sys, root/dev, root/opt/aws, root/kubelet.
struct FakeHost {
  std::string root;
  std::string sys() const { return root + "/sys"; }
  std::string dev() const { return root + "/dev"; }
  std::string opt() const { return root + "/opt/aws"; }
  std::string kubelet() const { return root + "/kubelet"; }

  // Writes what the driver shows for `instance_type` from the embedded catalog: core_count
  // without a trailing newline (physical cores), connected_devices as "a, b, c\n", DMI name,
  // /dev/neuronN, and the LNC file when `lnc` is set.
  void Install(const std::string& instance_type, int lnc = 0) const {
    const topology::InstanceType* type = topology::Catalog::Embedded().Find(instance_type);
    if (type == nullptr) throw std::runtime_error("unknown type " + instance_type);
    const int physical = type->physical_cores_per_device();
    std::vector<std::vector<int>> adjacency = type->adjacency;
    adjacency.resize(static_cast<size_t>(type->devices));
    InstallDevices(instance_type, type->devices, physical, adjacency);
    if (lnc != 0)
      WriteFile(opt() + "/neuron/logical_nc_config",
                fmt::format("NEURON_LOGICAL_NC_CONFIG={}\n", lnc));
  }

  void InstallDevices(const std::string& product_name, int devices, int physical_cores,
                      const std::vector<std::vector<int>>& adjacency) const {
    for (int d = 0; d < devices; ++d) {
      const std::string dir = fmt::format("{}/class/neuron_device/neuron{}", sys(), d);
      WriteFile(dir + "/core_count", std::to_string(physical_cores));
      const auto& links = adjacency[static_cast<size_t>(d)];
      WriteFile(dir + "/connected_devices",
                links.empty() ? "\n" : fmt::format("{}\n", fmt::join(links, ", ")));
      WriteFile(fmt::format("{}/neuron{}", dev(), d), "");
    }
    WriteFile(sys() + "/devices/virtual/dmi/id/product_name", product_name + "\n");
    std::filesystem::create_directories(kubelet());
  }
};

// Pods in memory; patches apply to the stored pods and are recorded.
class FakePodSource : public nodeagent::PodSource {
 public:
  void Add(kube::Pod pod) {
    std::lock_guard lock(mutex_);
    pods_.push_back(std::move(pod));
  }
  void Remove(const std::string& name) {
    std::lock_guard lock(mutex_);
    std::erase_if(pods_, [&](const kube::Pod& pod) { return pod.name == name; });
  }
  void FailListing(std::string reason) {
    std::lock_guard lock(mutex_);
    list_error_ = std::move(reason);
  }
  Result<std::vector<kube::Pod>> PodsOnNode() override {
    std::lock_guard lock(mutex_);
    ++lists_;
    if (!list_error_.empty()) return Error{list_error_};
    return pods_;
  }
  Status PatchAnnotations(
      const kube::Pod& pod,
      const std::map<std::string, std::optional<std::string>>& changes) override {
    std::lock_guard lock(mutex_);
    patches_.push_back({pod.ns + "/" + pod.name, changes});
    for (kube::Pod& stored : pods_) {
      if (stored.ns != pod.ns || stored.name != pod.name) continue;
      for (const auto& [key, value] : changes) {
        if (value) {
          stored.annotations[key] = *value;
        } else {
          stored.annotations.erase(key);
        }
      }
      return OkStatus();
    }
    return Error{"pod not found"};
  }
  Status PatchNodeLabel(std::string_view key, const std::optional<std::string>& value) override {
    std::lock_guard lock(mutex_);
    if (value) {
      node_labels_[std::string(key)] = *value;
    } else {
      node_labels_.erase(std::string(key));
    }
    return OkStatus();
  }
  Result<std::optional<std::string>> ReadNodeLabel(std::string_view key) override {
    return NodeLabel(std::string(key));
  }
  std::optional<std::string> NodeLabel(const std::string& key) {
    std::lock_guard lock(mutex_);
    auto it = node_labels_.find(key);
    if (it == node_labels_.end()) return std::nullopt;
    return it->second;
  }
  kube::Pod Get(const std::string& name) {
    std::lock_guard lock(mutex_);
    for (const kube::Pod& pod : pods_) {
      if (pod.name == name) return pod;
    }
    return {};
  }
  std::vector<std::pair<std::string, std::map<std::string, std::optional<std::string>>>> patches() {
    std::lock_guard lock(mutex_);
    return patches_;
  }

 private:
  std::mutex mutex_;
  std::vector<kube::Pod> pods_;
  std::string list_error_;
  int lists_ = 0;
  std::vector<std::pair<std::string, std::map<std::string, std::optional<std::string>>>> patches_;
  std::map<std::string, std::string> node_labels_;
};

// Annotations as the extender writes them: one entry per container.
inline std::map<std::string, std::string, std::less<>> RecordAnnotations(
    const std::vector<std::tuple<std::string, std::string, std::vector<int>>>& entries,
    int64_t alloc_time, const std::string& node = "node-a") {
  std::string containers;
  std::string ids;
  for (const auto& [container, resource, list] : entries) {
    if (!containers.empty()) containers += ',';
    containers += fmt::format(R"({{"name":"{}","resource":"{}","ids":[{}]}})", container, resource,
                              fmt::join(list, ","));
    for (int id : list) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  }
  return {
      {"toposched.io/allocation",
       fmt::format(R"({{"node":"{}","instanceType":"t","containers":[{}]}})", node, containers)},
      {"AWS_NEURON_IDS", ids},
      {"NEURON_ALLOCATED", "false"},
      {"NEURON_ALLOC_TIME", std::to_string(alloc_time)},
  };
}

// kubelet's PodResources v1: List and Get answer from a fixed list of pods, GetAllocatableResources
// from `allocatable` (or a provider, e.g. what a FakeKubelet received in ListAndWatch). Like
// kubelet 1.20 it offers List only until told otherwise: Get and GetAllocatableResources answer
// UNIMPLEMENTED (or, with RefuseGetAsGateOff, as kubelet 1.27-1.35 with KubeletPodResourcesGet
// off). Counts every call.
class FakePodResources final : public v1::PodResourcesLister::Service {
 public:
  using Allocatable = std::map<std::string, std::vector<std::string>>;

  explicit FakePodResources(const std::string& socket_path) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket_path, grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakePodResources() override {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
  }
  void AddContainer(const std::string& ns, const std::string& pod, const std::string& container,
                    const std::string& resource, const std::vector<std::string>& ids) {
    std::lock_guard lock(mutex_);
    v1::PodResources* entry = nullptr;
    for (auto& existing : *response_.mutable_pod_resources()) {
      if (existing.namespace_() == ns && existing.name() == pod) entry = &existing;
    }
    if (entry == nullptr) {
      entry = response_.add_pod_resources();
      entry->set_name(pod);
      entry->set_namespace_(ns);
    }
    auto* c = entry->add_containers();
    c->set_name(container);
    // As kubelet 1.21+ answers (containerDevicesFromResourceDeviceInstances): one entry per id.
    for (const std::string& id : ids) {
      auto* devices = c->add_devices();
      devices->set_resource_name(resource);
      devices->add_device_ids(id);
    }
  }
  // A DRA claim's device prepared for a container, as kubelet 1.34+ lists it in
  // dynamic_resources.
  void AddClaim(const std::string& ns, const std::string& pod, const std::string& container,
                const std::string& claim, const std::string& driver, const std::string& pool,
                const std::string& device) {
    std::lock_guard lock(mutex_);
    v1::PodResources* entry = response_.add_pod_resources();
    entry->set_name(pod);
    entry->set_namespace_(ns);
    auto* c = entry->add_containers();
    c->set_name(container);
    auto* dynamic = c->add_dynamic_resources();
    dynamic->set_claim_name(claim);
    dynamic->set_claim_namespace(ns);
    auto* resource = dynamic->add_claim_resources();
    resource->set_driver_name(driver);
    resource->set_pool_name(pool);
    resource->set_device_name(device);
    resource->add_cdi_devices()->set_name("neuron.aws.com/device=" + claim);
  }
  void Offer(bool get, bool allocatable) {
    std::lock_guard lock(mutex_);
    offer_get_ = get;
    offer_allocatable_ = allocatable;
  }
  void RefuseGetAsGateOff() {
    std::lock_guard lock(mutex_);
    offer_get_ = false;
    gate_off_ = true;
  }
  // Get answers with this pod instead of the one asked for (a broken kubelet).
  void AnswerGetWith(const std::string& ns, const std::string& name) {
    std::lock_guard lock(mutex_);
    wrong_pod_ = {ns, name};
  }
  void SetAllocatable(Allocatable devices) {
    std::lock_guard lock(mutex_);
    allocatable_ = std::move(devices);
    provider_ = nullptr;
  }
  void SetAllocatableProvider(std::function<Allocatable()> provider) {
    std::lock_guard lock(mutex_);
    provider_ = std::move(provider);
  }
  int list_calls() const { return list_calls_; }
  int get_calls() const { return get_calls_; }
  int allocatable_calls() const { return allocatable_calls_; }
  std::vector<std::string> gets() {
    std::lock_guard lock(mutex_);
    return gets_;
  }

  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* response) override {
    ++list_calls_;
    std::lock_guard lock(mutex_);
    *response = response_;
    return grpc::Status::OK;
  }
  grpc::Status Get(grpc::ServerContext*, const v1::GetPodResourcesRequest* request,
                   v1::GetPodResourcesResponse* response) override {
    ++get_calls_;
    std::lock_guard lock(mutex_);
    gets_.push_back(request->pod_namespace() + "/" + request->pod_name());
    if (gate_off_)
      return grpc::Status(grpc::StatusCode::UNKNOWN, "PodResources API Get method disabled");
    if (!offer_get_) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "unknown method Get");
    if (wrong_pod_) {
      response->mutable_pod_resources()->set_namespace_(wrong_pod_->first);
      response->mutable_pod_resources()->set_name(wrong_pod_->second);
      return grpc::Status::OK;
    }
    for (const v1::PodResources& pod : response_.pod_resources()) {
      if (pod.namespace_() == request->pod_namespace() && pod.name() == request->pod_name()) {
        *response->mutable_pod_resources() = pod;
        return grpc::Status::OK;
      }
    }
    // kubelet's own answer (server_v1.go): a plain error, code UNKNOWN.
    return grpc::Status(grpc::StatusCode::UNKNOWN, "pod " + request->pod_name() + " in namespace " +
                                                       request->pod_namespace() + " not found");
  }
  grpc::Status GetAllocatableResources(grpc::ServerContext*, const v1::AllocatableResourcesRequest*,
                                       v1::AllocatableResourcesResponse* response) override {
    ++allocatable_calls_;
    std::function<Allocatable()> provider;
    Allocatable devices;
    {
      std::lock_guard lock(mutex_);
      if (!offer_allocatable_) {
        return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                            "unknown method GetAllocatableResources");
      }
      provider = provider_;
      devices = allocatable_;
    }
    if (provider) devices = provider();
    // As kubelet answers: one entry per device.
    for (const auto& [resource, ids] : devices) {
      for (const std::string& id : ids) {
        auto* entry = response->add_devices();
        entry->set_resource_name(resource);
        entry->add_device_ids(id);
      }
    }
    return grpc::Status::OK;
  }

 private:
  std::mutex mutex_;
  v1::ListPodResourcesResponse response_;
  bool offer_get_ = false;
  bool offer_allocatable_ = false;
  bool gate_off_ = false;
  std::optional<std::pair<std::string, std::string>> wrong_pod_;
  Allocatable allocatable_;
  std::function<Allocatable()> provider_;
  std::vector<std::string> gets_;
  std::atomic<int> list_calls_{0};
  std::atomic<int> get_calls_{0};
  std::atomic<int> allocatable_calls_{0};
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_NODE_FIXTURES_H_
