// Fakes for the device plugin's tests: a fake Neuron sysfs/dev tree, an in-memory
// pod source, a fake kubelet (Registration server that dials back inside Register, as the real
// one does, then keeps ListAndWatch open) and a fake PodResources server. Everything lives in a
// temp dir and uses unix sockets only.
#ifndef TOPOSCHED_TEST_DEVICEPLUGIN_FIXTURES_H_
#define TOPOSCHED_TEST_DEVICEPLUGIN_FIXTURES_H_

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

#include "deviceplugin.grpc.pb.h"
#include "deviceplugin/pod_source.h"
#include "kube/objects.h"
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
class FakePodSource : public deviceplugin::PodSource {
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

// kubelet's side of the device-plugin API, faithful where it matters: Register validates the
// request, dials the plugin's socket and calls GetDevicePluginOptions before answering, then a
// ListAndWatch stream is kept open per registration.
class FakeKubelet {
 public:
  struct Registration {
    std::string resource;
    std::string endpoint;
    bool options_called_inside_register = false;
    bool preferred_available = false;
  };
  struct DeviceView {
    int updates = 0;
    std::map<std::string, std::string> health;  // id -> Healthy/Unhealthy
  };

  explicit FakeKubelet(std::string directory) : directory_(std::move(directory)) { Start(); }
  ~FakeKubelet() { Stop(); }

  std::string socket() const { return directory_ + "/kubelet.sock"; }

  // A kubelet restart: streams end, every socket in the directory is removed, and a new
  // kubelet.sock appears.
  void Restart() {
    Stop();
    for (const auto& entry : std::filesystem::directory_iterator(directory_)) {
      struct stat st {};
      if (::lstat(entry.path().c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
        std::filesystem::remove(entry.path());
      }
    }
    Start();
  }

  // Answers every Register as kubelet does for an endpoint it already holds.
  void AnswerAlreadyConnected() { already_connected_ = true; }

  std::vector<Registration> registrations() {
    std::lock_guard lock(mutex_);
    return registrations_;
  }
  int RegistrationCount(const std::string& resource) {
    std::lock_guard lock(mutex_);
    int n = 0;
    for (const Registration& r : registrations_) n += r.resource == resource ? 1 : 0;
    return n;
  }
  DeviceView Devices(const std::string& resource) {
    std::lock_guard lock(mutex_);
    return devices_[resource];
  }
  bool WaitForDevices(const std::string& resource,
                      const std::function<bool(const DeviceView&)>& pred,
                      std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return pred(devices_[resource]); });
  }
  // A client for the plugin that registered `resource`, as kubelet would dial it.
  std::unique_ptr<v1beta1::DevicePlugin::Stub> PluginStub(const std::string& resource) {
    std::lock_guard lock(mutex_);
    for (auto it = registrations_.rbegin(); it != registrations_.rend(); ++it) {
      if (it->resource == resource) {
        return v1beta1::DevicePlugin::NewStub(grpc::CreateChannel(
            "unix://" + directory_ + "/" + it->endpoint, grpc::InsecureChannelCredentials()));
      }
    }
    return nullptr;
  }

 private:
  class Service final : public v1beta1::Registration::Service {
   public:
    explicit Service(FakeKubelet& kubelet) : kubelet_(kubelet) {}
    grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request,
                          v1beta1::Empty*) override {
      return kubelet_.OnRegister(*request);
    }

   private:
    FakeKubelet& kubelet_;
  };

  struct Stream {
    std::unique_ptr<grpc::ClientContext> context;
    std::thread thread;
  };

  void Start() {
    service_ = std::make_unique<Service>(*this);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket(), grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
  }

  void Stop() {
    std::vector<Stream> streams;
    {
      std::lock_guard lock(mutex_);
      streams.swap(streams_);
    }
    for (Stream& stream : streams) stream.context->TryCancel();
    for (Stream& stream : streams) stream.thread.join();
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      server_->Wait();
      server_.reset();
    }
  }

  grpc::Status OnRegister(const v1beta1::RegisterRequest& request) {
    if (already_connected_) {
      // kubelet 1.2x+ refusing an endpoint it holds (manager.go PluginConnected).
      return grpc::Status(grpc::StatusCode::UNKNOWN, "device plugin already connected: " +
                                                         directory_ + "/" + request.endpoint());
    }
    if (request.version() != "v1beta1") {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unsupported version");
    }
    if (request.resource_name().find('/') == std::string::npos) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not an extended resource");
    }
    auto channel = grpc::CreateChannel("unix://" + directory_ + "/" + request.endpoint(),
                                       grpc::InsecureChannelCredentials());
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "cannot dial the plugin");
    }
    auto stub = v1beta1::DevicePlugin::NewStub(channel);
    v1beta1::DevicePluginOptions options;
    {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      const grpc::Status status =
          stub->GetDevicePluginOptions(&context, v1beta1::Empty(), &options);
      if (!status.ok()) {
        return grpc::Status(grpc::StatusCode::UNKNOWN,
                            "GetDevicePluginOptions failed: " + status.error_message());
      }
    }
    Stream stream;
    stream.context = std::make_unique<grpc::ClientContext>();
    grpc::ClientContext* context = stream.context.get();
    const std::string resource = request.resource_name();
    stream.thread = std::thread([this, context, resource, stub = std::move(stub)]() {
      auto reader = stub->ListAndWatch(context, v1beta1::Empty());
      v1beta1::ListAndWatchResponse response;
      while (reader->Read(&response)) {
        std::lock_guard lock(mutex_);
        DeviceView& view = devices_[resource];
        ++view.updates;
        view.health.clear();
        for (const auto& device : response.devices()) view.health[device.id()] = device.health();
        changed_.notify_all();
      }
      reader->Finish();
    });
    std::lock_guard lock(mutex_);
    registrations_.push_back(
        {resource, request.endpoint(), true, options.get_preferred_allocation_available()});
    streams_.push_back(std::move(stream));
    changed_.notify_all();
    return grpc::Status::OK;
  }

  const std::string directory_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Registration> registrations_;
  std::vector<Stream> streams_;
  std::map<std::string, DeviceView> devices_;
  std::atomic<bool> already_connected_{false};
};

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

#endif  // TOPOSCHED_TEST_DEVICEPLUGIN_FIXTURES_H_
