// One kubelet device-plugin endpoint: a v1beta1.DevicePlugin gRPC server on a unix socket in
// kubelet's device-plugin directory, serving one extended resource, and its registration.
#ifndef TOPOSCHED_DEVICEPLUGIN_ENDPOINT_H_
#define TOPOSCHED_DEVICEPLUGIN_ENDPOINT_H_

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "deviceplugin/allocation.h"
#include "deviceplugin/health.h"
#include "nodeagent/device_ids.h"
#include "topology/allocator.h"

namespace grpc {
class Server;
}

namespace toposched::deviceplugin {

inline constexpr std::string_view kApiVersion = "v1beta1";

struct EndpointContext {
  const topology::NodeShape* shape = nullptr;
  HealthBoard* health = nullptr;
  AllocationService* allocations = nullptr;
  nodeagent::CoreNumbering numbering = nodeagent::CoreNumbering::kContainer;
};

// The ids `resource` advertises in ListAndWatch, each with its health (a core is as healthy as
// its device; `healthy` is per device).
std::vector<std::pair<std::string, bool>> AdvertisedDevices(const claims::ResourceSpec& resource,
                                                            const topology::NodeShape& shape,
                                                            const std::vector<bool>& healthy);

// Not thread-safe itself: one owner starts, stops and registers it. The gRPC handlers run on
// gRPC's threads and only read shared state that is thread-safe.
class PluginEndpoint {
 public:
  PluginEndpoint(claims::ResourceSpec resource, std::string directory, std::string socket_name,
                 EndpointContext context);
  ~PluginEndpoint();
  PluginEndpoint(const PluginEndpoint&) = delete;
  PluginEndpoint& operator=(const PluginEndpoint&) = delete;

  // Removes a stale socket file and serves on a new one. Serving starts before registration
  // (kubelet dials back inside Register).
  Status Start();
  // Ends every stream (ListAndWatch returns within ~100 ms) and removes the socket file.
  void Stop();
  bool serving() const { return server_ != nullptr; }
  // False once kubelet (restarting) has deleted our socket.
  bool SocketExists() const;

  // Register with kubelet on `kubelet_socket`; kubelet calls GetDevicePluginOptions back before
  // it answers.
  Status Register(const std::string& kubelet_socket, std::chrono::milliseconds timeout) const;

  const claims::ResourceSpec& resource() const { return resource_; }
  const std::string& socket_name() const { return socket_name_; }
  std::string socket_path() const { return directory_ + "/" + socket_name_; }

 private:
  class Service;

  const claims::ResourceSpec resource_;
  const std::string directory_;
  const std::string socket_name_;
  const EndpointContext context_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace toposched::deviceplugin

#endif  // TOPOSCHED_DEVICEPLUGIN_ENDPOINT_H_
