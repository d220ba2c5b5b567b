// Fakes for the device plugin's tests: a fake kubelet (Registration server that dials back
// inside Register, as the real one does, then keeps ListAndWatch open), beside the node's fakes
// (node_fixtures.h: sysfs tree, pod source, PodResources).
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
#include "kube/objects.h"
#include "node_fixtures.h"
#include "nodeagent/pod_source.h"
#include "podresources.grpc.pb.h"
#include "support/pods.h"
#include "topology/catalog.h"

namespace toposched::testing {

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

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_DEVICEPLUGIN_FIXTURES_H_
