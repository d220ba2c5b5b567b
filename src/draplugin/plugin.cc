#include "draplugin/plugin.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "base/clock.h"
#include "claims/keys.h"
#include "dra.grpc.pb.h"
#include "draplugin/cdi.h"
#include "draplugin/resource_claim.h"
#include "kube/timestamp.h"
#include "nodeagent/pod_resources.h"
#include "pluginregistration.grpc.pb.h"
#include "topology/id_ranges.h"

namespace toposched::draplugin {
namespace {

namespace dra_v1 = k8s::io::kubelet::pkg::apis::dra::v1;
namespace fs = std::filesystem;

std::string Absolute(const std::string& path) {
  std::error_code error;
  const fs::path absolute = fs::absolute(path, error);
  return error ? path : absolute.lexically_normal().string();
}

topology::DeviceMask MaskOf(const dra::DeviceFaults& faults) {
  topology::DeviceMask mask = 0;
  for (const auto& [device, fault] : faults) mask |= topology::DeviceMask{1} << device;
  return mask;
}

std::vector<ClaimRef> RefsOf(const google::protobuf::RepeatedPtrField<dra_v1::Claim>& claims) {
  std::vector<ClaimRef> refs;
  for (const dra_v1::Claim& claim : claims)
    refs.push_back({claim.namespace_(), claim.uid(), claim.name()});
  return refs;
}

// "neurondevice0 (/dev/neuron0), neuroncores-4-5 (/dev/neuron2)" for logs.
std::string DescribeDevices(const PreparedClaim& claim) {
  std::vector<std::string> parts;
  for (const PreparedDevice& device : claim.devices) {
    parts.push_back(fmt::format("{} ({}){}", device.device, fmt::join(device.device_nodes, ","),
                                device.admin_access ? " admin access" : ""));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string DescribeEnv(const std::map<std::string, std::string>& env) {
  std::vector<std::string> parts;
  parts.reserve(env.size());
  for (const auto& [name, value] : env) parts.push_back(fmt::format("{}={}", name, value));
  return fmt::format("{}", fmt::join(parts, " "));
}

// Removes a socket file left by an earlier run (gRPC cannot bind over it).
Status RemoveStaleSocket(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Error{fmt::format("cannot remove stale socket {}: {}", path, std::strerror(errno))};
  }
  return OkStatus();
}

}  // namespace

class DraPlugin::DraService final : public dra_v1::DRAPlugin::Service {
 public:
  explicit DraService(DraPlugin& plugin) : plugin_(plugin) {}

  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const dra_v1::NodePrepareResourcesRequest* request,
                                    dra_v1::NodePrepareResourcesResponse* response) override {
    for (auto& [uid, outcome] : plugin_.Prepare(RefsOf(request->claims()))) {
      dra_v1::NodePrepareResourceResponse& out = (*response->mutable_claims())[uid];
      if (!outcome.error.empty()) {
        out.set_error(outcome.error);
        continue;
      }
      for (const PreparedDevice& device : outcome.claim.devices) {
        dra_v1::Device* d = out.add_devices();
        for (const std::string& name : device.requests) d->add_request_names(name);
        d->set_pool_name(device.pool);
        d->set_device_name(device.device);
        d->add_cdi_device_ids(outcome.claim.CdiId(device));
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                      const dra_v1::NodeUnprepareResourcesRequest* request,
                                      dra_v1::NodeUnprepareResourcesResponse* response) override {
    for (auto& [uid, error] : plugin_.Unprepare(RefsOf(request->claims()))) {
      (*response->mutable_claims())[uid].set_error(error);
    }
    return grpc::Status::OK;
  }

 private:
  DraPlugin& plugin_;
};

class DraPlugin::RegistrationService final : public pluginregistration::Registration::Service {
 public:
  explicit RegistrationService(DraPlugin& plugin) : plugin_(plugin) {}

  grpc::Status GetInfo(grpc::ServerContext*, const pluginregistration::InfoRequest*,
                       pluginregistration::PluginInfo* info) override {
    info->set_type(std::string(kPluginType));
    info->set_name(std::string(dra::kDriverName));
    info->set_endpoint(plugin_.dra_socket());
    info->add_supported_versions(std::string(kDraServiceVersion));
    spdlog::info("kubelet asked for our registration info: {} {} at {} ({})", kPluginType,
                 dra::kDriverName, plugin_.dra_socket(), kDraServiceVersion);
    return grpc::Status::OK;
  }

  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*,
                                        const pluginregistration::RegistrationStatus* status,
                                        pluginregistration::RegistrationStatusResponse*) override {
    plugin_.OnRegistrationStatus(status->plugin_registered(), status->error());
    return grpc::Status::OK;
  }

 private:
  DraPlugin& plugin_;
};

DraPlugin::DraPlugin(DraPluginOptions options, const topology::NodeShape& shape,
                     kube::ApiClient& api, UsagePublisher& publisher)
    : options_(std::move(options)),
      dra_socket_(Absolute(options_.plugin_dir + "/dra.sock")),
      registration_socket_(
          Absolute(fmt::format("{}/{}-reg.sock", options_.registry_dir, dra::kDriverName))),
      shape_(shape),
      api_(api),
      publisher_(publisher),
      holders_(shape,
               options_.pod_resources_socket.empty()
                   ? nullptr
                   : std::make_unique<nodeagent::PodResourcesClient>(options_.pod_resources_socket),
               options_.pod_resources_socket),
      notices_(api, options_.node_name, options_.evict_on_device_failure) {}

DraPlugin::~DraPlugin() { Stop(); }

Status DraPlugin::Start() {
  TOPOSCHED_ASSIGN_OR_RETURN(Checkpoint checkpoint, LoadCheckpoint(options_.cdi_root, shape_));
  for (const std::string& temp : checkpoint.removed_temp_files) {
    spdlog::info("removed {}, a CDI spec write that did not finish", temp);
  }
  for (const std::string& problem : checkpoint.problems) {
    spdlog::warn("CDI checkpoint: {}", problem);
  }
  {
    MutexLock lock(mutex_);
    stopping_ = false;
    for (PreparedClaim& claim : checkpoint.claims) {
      spdlog::info("claim {} is prepared at LNC {}, from its CDI spec: {}; it holds {}",
                   claim.Who(), claim.lnc, DescribeDevices(claim),
                   DescribeUnits(*shape_.type, claim.held));
      prepared_[claim.uid] = std::move(claim);
    }
  }
  {
    dra::DeviceFaults faults = CheckHealth();
    MutexLock lock(mutex_);
    unhealthy_ = MaskOf(faults);
    faults_ = std::move(faults);
  }
  SyncClaimsLabel(/*refresh=*/true);
  PublishNow("start");

  for (const std::string& dir : {options_.plugin_dir, options_.registry_dir}) {
    std::error_code error;
    fs::create_directories(dir, error);
    if (error) return Error{fmt::format("cannot create {}: {}", dir, error.message())};
  }
  const std::string dra_path = dra_socket();
  TOPOSCHED_RETURN_IF_ERROR(RemoveStaleSocket(dra_path));
  dra_service_ = std::make_unique<DraService>(*this);
  {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + dra_path, grpc::InsecureServerCredentials());
    builder.RegisterService(dra_service_.get());
    dra_server_ = builder.BuildAndStart();
  }
  if (dra_server_ == nullptr) {
    return Error{
        fmt::format("cannot serve the DRA plugin on {} (is the directory there and "
                    "writable?)",
                    dra_path)};
  }
  spdlog::info("serving {} on {}", kDraServiceVersion, dra_path);

  // Registration last: kubelet dials dra.sock as soon as it has read our info.
  const std::string registration_path = registration_socket();
  TOPOSCHED_RETURN_IF_ERROR(RemoveStaleSocket(registration_path));
  registration_service_ = std::make_unique<RegistrationService>(*this);
  {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + registration_path, grpc::InsecureServerCredentials());
    builder.RegisterService(registration_service_.get());
    registration_server_ = builder.BuildAndStart();
  }
  if (registration_server_ == nullptr) {
    return Error{
        fmt::format("cannot serve plugin registration on {} (is kubelet's "
                    "plugins_registry directory there and writable?)",
                    registration_path)};
  }
  spdlog::info("waiting for kubelet to register {} through {}", dra::kDriverName,
               registration_path);
  UpdateReadiness();
  health_thread_ = std::thread([this] { HealthLoop(); });
  return OkStatus();
}

void DraPlugin::Stop() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  stop_cv_.NotifyAll();
  if (health_thread_.joinable()) health_thread_.join();
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(1);
  if (registration_server_ != nullptr) {
    registration_server_->Shutdown(deadline);
    registration_server_->Wait();
    registration_server_.reset();
    ::unlink(registration_socket().c_str());
  }
  if (dra_server_ != nullptr) {
    dra_server_->Shutdown(deadline);
    dra_server_->Wait();
    dra_server_.reset();
    ::unlink(dra_socket().c_str());
  }
  registration_service_.reset();
  dra_service_.reset();
  registered_ = false;
}

Result<PreparedClaim> DraPlugin::PrepareOne(const ClaimRef& ref, const HolderView& holders) {
  TOPOSCHED_RETURN_IF_ERROR(CheckClaimUid(ref.uid));
  auto claim = ReadResourceClaim(api_, ref.ns, ref.name);
  if (!claim.ok()) return Error{claim.error()};
  PrepareContext context{&shape_, options_.node_name, options_.numbering};
  TOPOSCHED_ASSIGN_OR_RETURN(PreparedClaim prepared, PlanClaim(context, *claim, ref.uid));
  // Not on a device a device-plugin pod still holds (a node moved to DRA without a drain).
  TOPOSCHED_RETURN_IF_ERROR(CheckClaimFree(shape_, holders, prepared));
  MutexLock labelling(label_mutex_);
  MutexLock lock(mutex_);
  // The last line of defence: whatever the slices said, two claims never hold one core. Checked
  // under the lock that records it, so two Prepares cannot both pass.
  if (const std::string overlap = OverlapWithPrepared(*shape_.type, prepared, prepared_);
      !overlap.empty()) {
    return Error{fmt::format("ResourceClaim {}/{}: {}", ref.ns, ref.name, overlap)};
  }
  // The node is marked before any claim holds a device (see SyncClaimsLabel).
  if (!label_written_ || !label_written_->has_value()) {
    if (Status marked = WriteClaimsLabel(ClaimsHeldValue(prepared_, &prepared)); !marked.ok()) {
      return Error{fmt::format(
          "ResourceClaim {}/{}: not prepared: {} (while a claim holds a device the node carries "
          "it, so that the extender never offers these devices should the node go back to the "
          "device plugin)",
          ref.ns, ref.name, marked.error())};
    }
  }
  // Written even when the claim is prepared already: the same claim gives the same file.
  TOPOSCHED_RETURN_IF_ERROR(WriteCdiSpec(options_.cdi_root, prepared));
  prepared_[prepared.uid] = prepared;
  return prepared;
}

std::map<std::string, PrepareOutcome> DraPlugin::Prepare(const std::vector<ClaimRef>& claims) {
  std::map<std::string, PrepareOutcome> outcomes;
  // kubelet's PodResources is read once per call: on a node managed by DRA no device plugin
  // grants devices, so holders outside DRA only go away, and this view withholds enough.
  const HolderView holders = holders_.Refresh().first;
  for (const ClaimRef& ref : claims) {
    PrepareOutcome& outcome = outcomes[ref.uid];
    auto prepared = PrepareOne(ref, holders);
    if (!prepared.ok()) {
      outcome.error = prepared.error();
      spdlog::error("NodePrepareResources: claim {}/{} (uid {}) failed: {}", ref.ns, ref.name,
                    ref.uid, outcome.error);
      continue;
    }
    outcome.claim = std::move(prepared).value();
    spdlog::info("NodePrepareResources: prepared claim {}/{} (uid {}): {}; {}; CDI spec {}", ref.ns,
                 ref.name, ref.uid, DescribeDevices(outcome.claim), DescribeEnv(outcome.claim.env),
                 CdiSpecPath(options_.cdi_root, ref.uid));
    publisher_.ObserveRequest(RequestOf(shape_, outcome.claim));
  }
  PublishNow("NodePrepareResources", &holders);
  return outcomes;
}

std::map<std::string, std::string> DraPlugin::Unprepare(const std::vector<ClaimRef>& claims) {
  std::map<std::string, std::string> errors;
  for (const ClaimRef& ref : claims) {
    std::string& error = errors[ref.uid];
    Status removed = CheckClaimUid(ref.uid);
    if (removed.ok()) {
      MutexLock lock(mutex_);
      removed = RemoveCdiSpec(options_.cdi_root, ref.uid);
      if (removed.ok()) prepared_.erase(ref.uid);
    }
    if (!removed.ok()) {
      error = removed.error();
      spdlog::error("NodeUnprepareResources: claim {}/{} (uid {}) failed: {}", ref.ns, ref.name,
                    ref.uid, error);
      continue;
    }
    spdlog::info("NodeUnprepareResources: claim {}/{} (uid {}) released, CDI spec removed", ref.ns,
                 ref.name, ref.uid);
  }
  PublishNow("NodeUnprepareResources");
  return errors;
}

Status DraPlugin::WriteClaimsLabel(const std::optional<std::string>& value) {
  if (Status written =
          kube::PatchNodeLabel(api_, options_.node_name, claims::kLabelDraClaimsHeld, value);
      !written.ok()) {
    return written;  // retried by the next health check (SyncClaimsLabel)
  }
  if (value) {
    spdlog::info("node {} labelled {}={}: prepared claims hold {} device(s)", options_.node_name,
                 claims::kLabelDraClaimsHeld, *value, *value);
  } else {
    spdlog::info("node {}: no prepared claim holds a device; label {} removed", options_.node_name,
                 claims::kLabelDraClaimsHeld);
  }
  label_written_.emplace(value);
  return OkStatus();
}

void DraPlugin::SyncClaimsLabel(bool refresh) {
  MutexLock labelling(label_mutex_);
  std::optional<std::string> value;
  {
    MutexLock lock(mutex_);
    value = ClaimsHeldValue(prepared_);
  }
  const bool appears_or_goes = !label_written_ || label_written_->has_value() != value.has_value();
  if (!appears_or_goes && !(refresh && *label_written_ != value)) return;
  if (Status written = WriteClaimsLabel(value); !written.ok()) {
    spdlog::warn("{} (retried with each health check)", written.error());
  }
}

void DraPlugin::PublishNow(std::string_view why, const HolderView* holders) {
  MutexLock publishing(publish_mutex_);
  // Devices containers outside DRA hold are not ours to offer.
  const topology::DeviceMask held =
      holders != nullptr ? holders->withheld : holders_.Refresh().first.withheld;
  dra::DeviceFaults faults;
  topology::DeviceMask unpublished = 0;
  std::string unpublished_why;
  topology::NodeUsage usage;
  // Asked before mutex_ is taken: the publisher's lock is never held inside the plugin's.
  std::map<dra::OfferKind, bool> published;
  for (dra::OfferKind kind :
       {dra::OfferKind::kDevice, dra::OfferKind::kDeviceSet, dra::OfferKind::kCores}) {
    published[kind] = publisher_.Offers(kind);
  }
  {
    MutexLock lock(mutex_);
    faults = faults_;
    for (const auto& [uid, claim] : prepared_) {
      AddClaimUnits(shape_, claim, usage);
      for (const PreparedDevice& device : claim.devices) {
        if (device.admin_access || published.at(device.offer.kind)) continue;
        unpublished |= device.units.devices;
        if (unpublished_why.empty()) {
          unpublished_why = fmt::format("claim {} holds {}", claim.Who(), device.device);
        }
      }
    }
  }
  if (unpublished != withheld_unpublished_) {
    withheld_unpublished_ = unpublished;
    if (unpublished != 0) {
      spdlog::info(
          "devices {} withheld from the ResourceSlices: prepared claims hold them under names "
          "the slices no longer carry (e.g. {}), which kube-scheduler would not count against "
          "the devices published now; they come back when those claims go",
          topology::FormatIdRanges(topology::MaskToIds(unpublished)), unpublished_why);
    }
  }
  // Failed devices go as faults: the publisher taints their offers where the cluster serves
  // device taints and withdraws them elsewhere; held and unpublished ones are always withdrawn.
  const Status status = publisher_.Publish(held | unpublished, faults, usage);
  if (!status.ok()) {
    publish_pending_ = true;
    spdlog::warn("publishing ResourceSlices after {} failed (retried every health check): {}", why,
                 status.error());
  } else {
    publish_pending_ = false;
    if (!published_.exchange(true)) spdlog::info("ResourceSlices published");
  }
  UpdateReadiness();
}

dra::DeviceFaults DraPlugin::CheckHealth() {
  dra::DeviceFaults faults;
  dra::DeviceFaults before;
  {
    MutexLock lock(mutex_);
    before = faults_;
  }
  for (int d = 0; d < shape_.devices; ++d) {
    const Status status = nodeagent::CheckDeviceHealth(options_.host, d);
    auto was = before.find(d);
    if (status.ok()) {
      if (was != before.end()) spdlog::info("neuron{} is healthy again", d);
      continue;
    }
    if (was != before.end()) {
      faults.emplace(d, was->second);  // still failed: the same reason and time
      continue;
    }
    std::error_code error;
    const bool node_gone = !fs::exists(options_.host.DeviceNode(d), error);
    faults.emplace(d, dra::DeviceFault{node_gone ? "device-node-missing" : "sysfs-unreadable",
                                       kube::FormatRfc3339(WallNs() / 1'000'000'000)});
    spdlog::warn("neuron{} is unhealthy: {}", d, status.error());
  }
  return faults;
}

void DraPlugin::HealthLoop() {
  const auto resync_every = std::max<int64_t>(
      1, options_.resync_interval.count() / std::max<int64_t>(1, options_.health_interval.count()));
  int64_t ticks = 0;
  while (true) {
    {
      MutexLock lock(mutex_);
      if (stop_cv_.WaitFor(mutex_, options_.health_interval,
                           [&]() TS_REQUIRES(mutex_) { return stopping_; })) {
        return;
      }
    }
    dra::DeviceFaults faults = CheckHealth();
    bool changed = false;
    {
      MutexLock lock(mutex_);
      const topology::DeviceMask unhealthy = MaskOf(faults);
      changed = unhealthy != unhealthy_;
      unhealthy_ = unhealthy;
      faults_ = std::move(faults);
    }
    const bool holders_changed = holders_.Refresh().second;
    const bool resync_tick = ++ticks % resync_every == 0;
    if (resync_tick) resync_pending_ = true;
    SyncClaimsLabel(/*refresh=*/resync_tick);  // writes only when the label should go or changed
    if (resync_pending_.exchange(false)) {
      // Read back what the API server holds: kubelet wipes a node's slices when it starts.
      publisher_.ForgetPublished();
      PublishNow(changed ? "a device health change" : "a resync with the API server");
    } else if (changed) {
      PublishNow("a device health change");
    } else if (publish_pending_) {
      PublishNow("a failed publish");
    } else if (holders_changed) {
      PublishNow("a change in the devices containers outside DRA hold");
    }
    // After the publish: the taint that keeps new claims off a failed device goes out first, and
    // a slow API server answering these reads and writes does not delay it.
    TellPodsOnFailedDevices();
  }
}

void DraPlugin::TellPodsOnFailedDevices() {
  std::map<std::string, PreparedClaim> prepared;
  dra::DeviceFaults faults;
  {
    MutexLock lock(mutex_);
    if (notices_.Idle(unhealthy_)) return;
    prepared = prepared_;
    faults = faults_;
  }
  notices_.Sync(prepared, faults);
}

void DraPlugin::OnRegistrationStatus(bool registered, const std::string& error) {
  registered_ = registered;
  if (registered) {
    spdlog::info("kubelet registered DRA driver {} (endpoint {})", dra::kDriverName, dra_socket());
    // A kubelet that (re)starts wipes the node's slices: the health loop reads back and repairs.
    resync_pending_ = true;
  } else {
    spdlog::error("kubelet REFUSED to register DRA driver {}: {}", dra::kDriverName,
                  error.empty() ? "(no reason given)" : error);
  }
  UpdateReadiness();
}

void DraPlugin::UpdateReadiness() {
  const bool registered = registered_;
  const bool published = published_;
  int held = 0;
  {
    MutexLock lock(mutex_);
    for (const auto& [uid, claim] : prepared_) held += claim.held_because.empty() ? 0 : 1;
  }
  const std::string held_note =
      held == 0 ? ""
                : fmt::format(
                      "; {} prepared claim(s) hold whole devices because their CDI "
                      "specs could not be read by name (see the log)",
                      held);
  if (const HolderView holders = holders_.Current(); !holders.checked) {
    readiness_.Set(false,
                   holders.error + " (the devices device-plugin pods hold cannot be checked)");
  } else if (registered && published) {
    readiness_.Set(true, fmt::format("registered with kubelet as {}; ResourceSlices published{}",
                                     dra::kDriverName, held_note));
  } else if (!registered) {
    readiness_.Set(false, fmt::format("waiting for kubelet to register {} (registration socket {})",
                                      dra::kDriverName, registration_socket()));
  } else {
    readiness_.Set(false, "registered with kubelet; ResourceSlices not published yet");
  }
}

std::vector<PreparedClaim> DraPlugin::PreparedClaims() const {
  MutexLock lock(mutex_);
  std::vector<PreparedClaim> out;
  for (const auto& [uid, claim] : prepared_) out.push_back(claim);
  return out;
}

topology::NodeUsage DraPlugin::Usage() const {
  MutexLock lock(mutex_);
  topology::NodeUsage usage;
  for (const auto& [uid, claim] : prepared_) AddClaimUnits(shape_, claim, usage);
  return usage;
}

topology::DeviceMask DraPlugin::unhealthy() const {
  MutexLock lock(mutex_);
  return unhealthy_;
}

}  // namespace toposched::draplugin
