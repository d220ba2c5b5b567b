#include "deviceplugin/endpoint.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include "claims/keys.h"
#include "deviceplugin.grpc.pb.h"
#include "topology/id_ranges.h"

namespace toposched::deviceplugin {
namespace {

constexpr auto kStreamPoll = std::chrono::milliseconds(100);
constexpr std::string_view kHealthy = "Healthy";
constexpr std::string_view kUnhealthy = "Unhealthy";

v1beta1::DevicePluginOptions Options() {
  v1beta1::DevicePluginOptions options;
  options.set_pre_start_required(false);
  options.set_get_preferred_allocation_available(true);
  return options;
}

}  // namespace

class PluginEndpoint::Service final : public v1beta1::DevicePlugin::Service {
 public:
  Service(const claims::ResourceSpec& resource, const EndpointContext& context)
      : resource_(resource), context_(context) {}

  void Stop() { stopping_ = true; }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* response) override {
    *response = Options();
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    HealthBoard& health = *context_.health;
    HealthBoard::Snapshot snapshot = health.Get();
    spdlog::info("kubelet opened ListAndWatch for {}", resource_.name);
    while (true) {
      if (!writer->Write(DeviceList(snapshot.healthy))) {
        spdlog::info("ListAndWatch for {}: kubelet went away", resource_.name);
        return grpc::Status::OK;
      }
      const uint64_t sent = snapshot.version;
      // Wake often enough to notice a cancelled stream or our own stop promptly.
      while (snapshot.version == sent) {
        if (stopping_ || context->IsCancelled() || health.closed()) return grpc::Status::OK;
        snapshot = health.WaitForChange(sent, kStreamPoll);
      }
    }
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override {
    const int limit = Units();
    for (const auto& container : request->container_requests()) {
      const std::vector<std::string> available(container.available_deviceids().begin(),
                                               container.available_deviceids().end());
      const std::vector<std::string> must(container.must_include_deviceids().begin(),
                                          container.must_include_deviceids().end());
      auto available_ids = nodeagent::ParseUnitIds(resource_.unit, available, limit);
      auto must_ids = nodeagent::ParseUnitIds(resource_.unit, must, limit);
      if (!available_ids.ok() || !must_ids.ok()) {
        return grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            fmt::format("GetPreferredAllocation for {}: {}", resource_.name,
                        !available_ids.ok() ? available_ids.error() : must_ids.error()));
      }
      const std::vector<int> chosen = context_.allocations->Prefer(
          resource_, *available_ids, *must_ids, container.allocation_size());
      auto* out = response->add_container_responses();
      for (const std::string& id : nodeagent::UnitIds(resource_.unit, chosen))
        out->add_deviceids(id);
      spdlog::info("GetPreferredAllocation {} x{} (available {}, must include {}): {}",
                   resource_.name, container.allocation_size(),
                   topology::FormatIdRanges(*available_ids), topology::FormatIdRanges(*must_ids),
                   topology::FormatIdRanges(chosen));
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override {
    const int limit = Units();
    for (const auto& container : request->container_requests()) {
      const std::vector<std::string> ids(container.devices_ids().begin(),
                                         container.devices_ids().end());
      auto requested = nodeagent::ParseUnitIds(resource_.unit, ids, limit);
      if (!requested.ok()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            fmt::format("Allocate for {}: {}", resource_.name, requested.error()));
      }
      if (requested->empty()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            fmt::format("Allocate for {}: no device ids", resource_.name));
      }
      auto grant = context_.allocations->Allocate(resource_, *requested);
      if (!grant.ok()) {
        spdlog::error("Allocate {} {}: {}", resource_.name, topology::FormatIdRanges(*requested),
                      grant.error());
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, grant.error());
      }
      const nodeagent::ContainerSetup setup = nodeagent::BuildContainerSetup(
          *context_.shape, resource_.unit, grant->ids, context_.numbering);
      auto* out = response->add_container_responses();
      for (const auto& [name, value] : setup.envs) (*out->mutable_envs())[name] = value;
      for (const auto& [name, value] : grant->envs) (*out->mutable_envs())[name] = value;
      for (const std::string& node : setup.device_nodes) {
        auto* spec = out->add_devices();
        spec->set_container_path(node);
        spec->set_host_path(node);
        spec->set_permissions("rw");
      }
      std::string gang_env;  // a gang member's rank and UltraServer env, for the log
      for (const auto& [name, value] : grant->envs) gang_env += fmt::format(" {}={}", name, value);
      spdlog::info("Allocate {} {} -> {}{}: {} NEURON_RT_VISIBLE_CORES={}{}", resource_.name,
                   topology::FormatIdRanges(*requested), topology::FormatIdRanges(grant->ids),
                   grant->pod.empty()
                       ? std::string(" (no annotation, matched to no pod)")
                       : fmt::format(" for {} container {}{}", grant->pod, grant->container,
                                     grant->by_annotation ? "" : " (no annotation)"),
                   fmt::join(setup.device_nodes, ","),
                   setup.envs.at(std::string(claims::kEnvVisibleCores)), gang_env);
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override {
    return grpc::Status::OK;
  }

 private:
  int Units() const {
    return resource_.unit == topology::Unit::kDevice ? context_.shape->devices
                                                     : context_.shape->cores;
  }

  v1beta1::ListAndWatchResponse DeviceList(const std::vector<bool>& healthy) const {
    v1beta1::ListAndWatchResponse response;
    for (const auto& [id, ok] : AdvertisedDevices(resource_, *context_.shape, healthy)) {
      auto* out = response.add_devices();
      out->set_id(id);
      out->set_health(std::string(ok ? kHealthy : kUnhealthy));
    }
    return response;
  }

  const claims::ResourceSpec& resource_;
  const EndpointContext& context_;
  std::atomic<bool> stopping_{false};
};

std::vector<std::pair<std::string, bool>> AdvertisedDevices(const claims::ResourceSpec& resource,
                                                            const topology::NodeShape& shape,
                                                            const std::vector<bool>& healthy) {
  const int units = resource.unit == topology::Unit::kDevice ? shape.devices : shape.cores;
  const int cpd = std::max(shape.cores_per_device, 1);
  std::vector<std::pair<std::string, bool>> out;
  for (int id = 0; id < units; ++id) {
    const int device = resource.unit == topology::Unit::kDevice ? id : id / cpd;
    const bool ok =
        static_cast<size_t>(device) < healthy.size() && healthy[static_cast<size_t>(device)];
    out.emplace_back(nodeagent::UnitId(resource.unit, id), ok);
  }
  return out;
}

PluginEndpoint::PluginEndpoint(claims::ResourceSpec resource, std::string directory,
                               std::string socket_name, EndpointContext context)
    : resource_(std::move(resource)),
      directory_(std::move(directory)),
      socket_name_(std::move(socket_name)),
      context_(context) {}

PluginEndpoint::~PluginEndpoint() { Stop(); }

Status PluginEndpoint::Start() {
  Stop();
  const std::string path = socket_path();
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Error{fmt::format("cannot remove stale socket {}: {}", path, std::strerror(errno))};
  }
  service_ = std::make_unique<Service>(resource_, context_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    service_.reset();
    return Error{fmt::format("cannot serve {} on {} (is the directory there and writable?)",
                             resource_.name, path)};
  }
  spdlog::info("serving {} on {}", resource_.name, path);
  return OkStatus();
}

void PluginEndpoint::Stop() {
  if (server_ == nullptr) return;
  service_->Stop();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
  service_.reset();
  // The socket name is ours alone, so whatever is left at that path is ours to clean.
  ::unlink(socket_path().c_str());
}

bool PluginEndpoint::SocketExists() const {
  struct stat st {};
  return ::stat(socket_path().c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

Status PluginEndpoint::Register(const std::string& kubelet_socket,
                                std::chrono::milliseconds timeout) const {
  auto channel =
      grpc::CreateChannel("unix://" + kubelet_socket, grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  v1beta1::RegisterRequest request;
  request.set_version(std::string(kApiVersion));
  request.set_endpoint(socket_name_);
  request.set_resource_name(resource_.name);
  *request.mutable_options() = Options();
  v1beta1::Empty response;
  const grpc::Status status = stub->Register(&context, request, &response);
  if (!status.ok() && status.error_message().rfind("device plugin already connected:", 0) == 0) {
    // kubelet (PluginConnected, manager.go) already holds this very socket: we registered with
    // this kubelet and a second restart signal for it (the inotify event after the socket's
    // identity changed) made us try again. Retrying would be refused for as long as it runs.
    spdlog::info("kubelet already has {} connected (endpoint {}): registered", resource_.name,
                 socket_name_);
    return OkStatus();
  }
  if (!status.ok()) {
    return Error{fmt::format("registering {} with kubelet on {}: {}", resource_.name,
                             kubelet_socket, status.error_message())};
  }
  spdlog::info("registered {} (endpoint {}) with kubelet", resource_.name, socket_name_);
  return OkStatus();
}

}  // namespace toposched::deviceplugin
