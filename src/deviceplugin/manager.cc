#include "deviceplugin/manager.h"

#include <algorithm>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include "claims/keys.h"
#include "deviceplugin/endpoint.h"
#include "deviceplugin/kubelet_watch.h"

namespace toposched::deviceplugin {
namespace {

constexpr auto kTick = std::chrono::milliseconds(100);
constexpr auto kWatchTick = std::chrono::milliseconds(200);

// Sleeps up to `duration` in short steps; false when `stop` was set meanwhile.
bool SleepUnlessStopped(const std::atomic<bool>& stop, std::chrono::milliseconds duration) {
  const auto until = std::chrono::steady_clock::now() + duration;
  while (!stop) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return true;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(kTick, until - now));
  }
  return false;
}

// Identifies one incarnation of kubelet.sock: a restarted kubelet creates a new file.
struct FileIdentity {
  bool exists = false;
  ino_t inode = 0;
  int64_t ctime_ns = 0;

  bool operator==(const FileIdentity&) const = default;
};

FileIdentity Identify(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {true, st.st_ino,
          static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec};
}

}  // namespace

std::string SocketName(const std::string& prefix, const std::string& resource) {
  const size_t slash = resource.rfind('/');
  std::string base = slash == std::string::npos ? resource : resource.substr(slash + 1);
  for (char& c : base) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    } else if (!ok) {
      c = '-';
    }
  }
  return fmt::format("{}-{}.sock", prefix, base);
}

struct DevicePluginManager::Endpoint {
  std::unique_ptr<PluginEndpoint> server;
  bool registered = false;
  FileIdentity registered_with;  // the kubelet.sock it registered on
  std::chrono::steady_clock::time_point next_attempt{};
  std::string last_error;
};

DevicePluginManager::DevicePluginManager(PluginOptions options, const topology::Catalog& catalog,
                                         nodeagent::PodSource& pods)
    : options_(std::move(options)), catalog_(catalog), pods_(pods) {}

DevicePluginManager::~DevicePluginManager() = default;

bool DevicePluginManager::WaitForDevices(const std::atomic<bool>& stop) {
  std::string last_error;
  std::optional<nodeagent::Inventory>
      previous;  // the last scan that found devices, not yet confirmed
  while (!stop) {
    auto inventory = nodeagent::Discover(options_.host);
    ++discovery_scans_;
    if (inventory.ok() && previous != *inventory) {
      // First sight, or the tree changed since: the driver may still be making it. Look again.
      if (previous) spdlog::info("sysfs changed while being read; reading it again");
      previous = *inventory;
      if (!SleepUnlessStopped(stop, options_.discovery_settle)) break;
      continue;
    }
    Result<nodeagent::NodeTopology> resolved =
        inventory.ok()
            ? nodeagent::ResolveTopology(catalog_, *inventory, options_.instance_type_override)
            : Result<nodeagent::NodeTopology>(Error{inventory.error()});
    if (resolved.ok()) {
      for (const std::string& warning : inventory->warnings) spdlog::warn("sysfs: {}", warning);
      for (const std::string& note : resolved->notes) spdlog::warn("topology: {}", note);
      topology_ = std::make_unique<nodeagent::NodeTopology>(std::move(resolved).value());
      const topology::NodeShape& shape = topology_->shape;
      spdlog::info("node {}: {} with {} devices x {} cores = {} cores{}, rule {} ({})",
                   options_.node_name, shape.type->name, shape.devices, shape.cores_per_device,
                   shape.cores, shape.lnc != 0 ? fmt::format(" at LNC {}", shape.lnc) : "",
                   topology::RuleName(shape.type->rule),
                   topology_->from_catalog ? "catalog" : "from sysfs");
      return true;
    }
    if (resolved.error() != last_error) {
      spdlog::warn("{}; nothing to serve yet, checking again every {} ms", resolved.error(),
                   options_.discovery_interval.count());
      last_error = resolved.error();
    }
    if (!SleepUnlessStopped(stop, options_.discovery_interval)) break;
  }
  return false;
}

void DevicePluginManager::EnsureLncLabel() {
  const topology::NodeShape& shape = topology_->shape;
  if (!topology_->type->has_lnc || shape.lnc == 0) return;  // nothing to say
  const std::string value = std::to_string(shape.lnc);
  const std::string label = fmt::format("{}={}", claims::kLabelNeuronLnc, value);
  // A Node object deleted and re-created (kubelet re-registering) has lost the label; without it
  // and with an allocatable that does not pin the LNC the extender could read the node wrongly.
  std::string found;
  if (auto read = pods_.ReadNodeLabel(claims::kLabelNeuronLnc); !read.ok()) {
    found =
        fmt::format("could not be read ({}), so its label is set without reading", read.error());
  } else if (!read->has_value()) {
    found = fmt::format("has no {} label", claims::kLabelNeuronLnc);
  } else if (**read != value) {
    found = fmt::format("is labelled {}={}, but the driver runs at LNC {}", claims::kLabelNeuronLnc,
                        **read, value);
  } else {
    if (!label_logged_.empty())
      spdlog::info("node {} is labelled {} now", options_.node_name, label);
    label_logged_.clear();
    return;
  }
  if (Status labelled = pods_.PatchNodeLabel(claims::kLabelNeuronLnc, value); !labelled.ok()) {
    std::string message = fmt::format(
        "node {} {}; cannot label it {}: {}; the extender infers the LNC from allocatable until "
        "it can (retried every {} s)",
        options_.node_name, found, label, labelled.error(), options_.label_interval.count() / 1000);
    if (message != label_logged_) spdlog::warn("{}", message);  // a repeated failure once
    label_logged_ = std::move(message);
    return;
  }
  spdlog::info("node {} {}: labelled it {}", options_.node_name, found, label);
  label_logged_.clear();
}

void DevicePluginManager::KickLabelCheck() {
  {
    MutexLock lock(label_mutex_);
    label_kicked_ = true;
  }
  label_wake_.NotifyAll();
}

void DevicePluginManager::LabelLoop(const std::atomic<bool>& stop) {
  auto next = std::chrono::steady_clock::now() + options_.label_interval;
  while (!stop) {
    bool kicked = false;
    {
      MutexLock lock(label_mutex_);
      // Short waits: `stop` is an atomic nobody notifies.
      label_wake_.WaitFor(label_mutex_, kTick,
                          [&]() TS_REQUIRES(label_mutex_) { return label_kicked_; });
      kicked = label_kicked_;
      label_kicked_ = false;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!kicked && now < next) continue;
    next = now + options_.label_interval;
    EnsureLncLabel();
  }
}

void DevicePluginManager::PublishDraClaims() {
  if (pod_resources_ == nullptr) return;
  auto listed = pod_resources_->List();
  if (!listed.ok()) {
    spdlog::warn("cannot read kubelet's DRA claims on node {}: {}; label {} unchanged",
                 options_.node_name, listed.error(), claims::kLabelDraClaimsHeld);
    return;
  }
  std::vector<std::string> warnings;
  const std::vector<nodeagent::DraHold> holds =
      nodeagent::DraHolds(*listed, topology_->shape, options_.node_name, &warnings);
  for (const std::string& warning : warnings) spdlog::warn("{}", warning);
  topology::DeviceMask devices = 0;
  for (const nodeagent::DraHold& hold : holds) devices |= hold.offer.placement.devices;
  const std::optional<std::string> value = nodeagent::DraClaimsHeldValue(devices);
  const bool same = dra_claims_published_ && *dra_claims_published_ == value;
  // While claims hold devices the label is written at every pass (a Node object re-created by
  // kubelet has lost it; an unchanged merge-patch changes nothing); its absence once only.
  if (same && !value) return;
  if (Status labelled = pods_.PatchNodeLabel(claims::kLabelDraClaimsHeld, value); !labelled.ok()) {
    spdlog::warn("cannot set label {} on node {}: {}; retried with each PodResources pass",
                 claims::kLabelDraClaimsHeld, options_.node_name, labelled.error());
    return;
  }
  if (same) return;  // said already
  if (value) {
    std::vector<std::string> named;
    named.reserve(holds.size());
    for (const nodeagent::DraHold& hold : holds) {
      named.push_back(fmt::format("{} ({} container {})", hold.offer.name, hold.claim, hold.pod));
    }
    spdlog::warn(
        "node {}: DRA claims still hold {} device(s): {}; labelled {}={} (the extender offers "
        "no node with it) and Allocate refuses their units until they end",
        options_.node_name, *value, fmt::join(named, ", "), claims::kLabelDraClaimsHeld, *value);
  } else if (dra_claims_published_) {
    spdlog::info("node {}: no DRA claim holds a device any more; removed label {}",
                 options_.node_name, claims::kLabelDraClaimsHeld);
  }
  dra_claims_published_.emplace(value);
}

void DevicePluginManager::HealthLoop(const std::atomic<bool>& stop) {
  while (SleepUnlessStopped(stop, options_.health_interval)) {
    PollHealth(options_.host, *health_);
    PublishFaults();
  }
}

void DevicePluginManager::PublishFaults() {
  const std::vector<DeviceFault> faults = health_->Faults();
  auto annotations = FaultAnnotations(faults);
  if (faults_published_ == annotations) return;
  if (Status written = pods_.PatchNodeAnnotations(annotations); !written.ok()) {
    if (written.error() != faults_error_) {
      spdlog::warn(
          "node {}: could not publish which devices are out of service ({}): {}; "
          "retrying every health poll",
          options_.node_name,
          faults.empty() ? "none" : *annotations[std::string(claims::kAnnotationUnhealthyDevices)],
          written.error());
      faults_error_ = written.error();
    }
    return;
  }
  faults_error_.clear();
  if (faults.empty()) {
    if (faults_published_)
      spdlog::info("node {}: every device is in service again", options_.node_name);
  } else {
    spdlog::warn("node {}: devices out of service published for the scheduler: {}",
                 options_.node_name, *annotations[std::string(claims::kAnnotationUnhealthyWhy)]);
  }
  faults_published_ = std::move(annotations);
}

void DevicePluginManager::KickReconcile(const std::string& pod) {
  {
    MutexLock lock(reconcile_mutex_);
    if (pod.empty()) {
      reconcile_kicked_ = true;
    } else {
      kicked_pods_.insert(pod);
    }
  }
  reconcile_wake_.NotifyAll();
}

void DevicePluginManager::ReconcileLoop(const std::atomic<bool>& stop) {
  const nodeagent::RecordContext context{options_.node_name, topology_->type->name,
                                         &topology_->shape, options_.resources};
  auto last_run = std::chrono::steady_clock::now();
  std::string last_error;
  while (!stop) {
    bool run = false;
    bool every_pod = false;
    std::set<std::string> pods;
    {
      MutexLock lock(reconcile_mutex_);
      reconcile_wake_.WaitFor(reconcile_mutex_, kTick, [&]() TS_REQUIRES(reconcile_mutex_) {
        return reconcile_kicked_ || !kicked_pods_.empty();
      });
      if (reconcile_kicked_ || !kicked_pods_.empty()) {
        run = true;
        every_pod = reconcile_kicked_;
        pods.swap(kicked_pods_);
        reconcile_kicked_ = false;
      }
    }
    if (run && !SleepUnlessStopped(stop, options_.reconcile_delay)) break;
    const auto now = std::chrono::steady_clock::now();
    const bool due =
        options_.reconcile_interval.count() > 0 && now - last_run >= options_.reconcile_interval;
    if (!run && !due) continue;
    PublishDraClaims();
    std::string error;
    if (!every_pod) {
      // After a grant only its pod changed: Get asks kubelet for that pod alone, where List
      // makes kubelet build every pod's devices, CPUs, memory and DRA claims, and we plan
      // patches for every pod again. Without Get (kubelet < 1.34 by default), the List pass.
      for (const std::string& pod : pods) {
        auto one = nodeagent::RecordKubeletAssignment(*pod_resources_, pods_, context, pod);
        if (!one.ok()) {
          error = one.error();
        } else if (!one->has_value()) {
          every_pod = true;
          break;
        }
      }
    }
    if (every_pod || due) {
      last_run = now;
      auto patched = nodeagent::RecordKubeletAssignments(*pod_resources_, pods_, context);
      if (!patched.ok()) error = patched.error();
    }
    if (!error.empty() && error != last_error) {
      spdlog::warn("recording kubelet's assignments: {}", error);
    }
    last_error = error;
  }
}

// The state of the GetAllocatableResources comparison since the last registration.
struct DevicePluginManager::AllocatableWatch {
  bool holds = false;        // kubelet held every advertised id at least once
  bool not_offered = false;  // kubelet has no GetAllocatableResources
  bool mismatching = false;
  std::chrono::steady_clock::time_point next_check{};
  std::chrono::steady_clock::time_point mismatch_since{};
  std::string logged;  // the last mismatch or error logged
};

void DevicePluginManager::CheckKubeletHolds(AllocatableWatch& watch) {
  if (pod_resources_ == nullptr) {
    readiness_.Set(true,
                   "registered with kubelet (PodResources off: that kubelet holds the devices is "
                   "not confirmed)");
    return;
  }
  if (watch.not_offered) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < watch.next_check) return;
  constexpr auto kSlowRetry = std::chrono::seconds(2);
  auto held = pod_resources_->Allocatable(std::chrono::seconds(2));
  if (!held.ok()) {
    readiness_.Record(nodeagent::Readiness::Check::kError, {});
    if (held.error() != watch.logged) spdlog::warn("{}", held.error());
    watch.logged = held.error();
    watch.next_check = now + (watch.holds ? options_.allocatable_recheck : kSlowRetry);
    if (!watch.holds) {
      readiness_.Set(false,
                     "registered; cannot ask kubelet which devices it holds: " + held.error());
    }
    return;
  }
  if (!held->has_value()) {
    readiness_.Record(nodeagent::Readiness::Check::kNotOffered, {});
    watch.not_offered = true;
    readiness_.Set(true,
                   "registered with kubelet, which does not offer PodResources "
                   "GetAllocatableResources (kubelet < 1.21): that it holds the devices is not "
                   "confirmed");
    return;
  }
  const HealthBoard::Snapshot health = health_->Get();
  std::map<std::string, std::set<std::string>> advertised;
  for (const claims::ResourceSpec& resource : options_.resources) {
    std::set<std::string>& ids = advertised[resource.name];
    for (const auto& [id, ok] : AdvertisedDevices(resource, topology_->shape, health.healthy)) {
      if (ok) ids.insert(id);
    }
  }
  const std::vector<nodeagent::AllocatableDiff> diffs =
      nodeagent::CompareAllocatable(advertised, **held);
  const bool matches = std::all_of(diffs.begin(), diffs.end(),
                                   [](const nodeagent::AllocatableDiff& d) { return d.matches(); });
  const bool holds_all =
      std::all_of(diffs.begin(), diffs.end(),
                  [](const nodeagent::AllocatableDiff& d) { return d.missing.empty(); });
  readiness_.Record(
      matches ? nodeagent::Readiness::Check::kMatch : nodeagent::Readiness::Check::kMismatch,
      diffs);
  std::vector<std::string> counts;
  counts.reserve(diffs.size());
  for (const nodeagent::AllocatableDiff& diff : diffs) {
    counts.push_back(fmt::format("{} {} ids", diff.resource, diff.advertised));
  }
  if (matches) {
    if (!watch.holds || watch.mismatching) {
      spdlog::info("kubelet's allocatable matches the advertised ids ({} healthy)",
                   fmt::join(counts, ", "));
    }
    watch.holds = true;
    watch.mismatching = false;
    watch.logged.clear();
    readiness_.Set(true, fmt::format("registered; kubelet holds every advertised healthy id ({})",
                                     fmt::join(counts, ", ")));
    watch.next_check = now + options_.allocatable_recheck;
    return;
  }
  if (!watch.mismatching) {
    watch.mismatching = true;
    watch.mismatch_since = now;
  }
  // Right after registering, kubelet has not read our ListAndWatch list yet: only a mismatch
  // that lasts is news.
  const bool lasting = now - watch.mismatch_since >= options_.allocatable_grace;
  const std::string mismatch = nodeagent::DescribeMismatch(diffs);
  if (lasting && mismatch != watch.logged) {
    spdlog::warn(
        "kubelet's allocatable does not match the advertised ids for {} ms: {}",
        std::chrono::duration_cast<std::chrono::milliseconds>(now - watch.mismatch_since).count(),
        mismatch);
    watch.logged = mismatch;
  }
  if (holds_all && !watch.holds) {
    // Only extras: kubelet has our whole list, and admits against it.
    spdlog::info("kubelet holds every advertised id ({} healthy), and more: {}",
                 fmt::join(counts, ", "), mismatch);
  }
  if (holds_all) {
    watch.holds = true;
    readiness_.Set(true,
                   "registered; kubelet holds every advertised healthy id, and more: " + mismatch);
  } else if (!watch.holds) {
    readiness_.Set(false,
                   "registered; waiting for kubelet to hold the advertised devices: " + mismatch);
  } else if (lasting) {
    readiness_.Set(false, "kubelet lacks advertised devices: " + mismatch);
  }
  watch.next_check =
      now + (lasting ? std::chrono::milliseconds(kSlowRetry) : options_.allocatable_retry);
}

void DevicePluginManager::ServeAndRegister(const std::atomic<bool>& stop) {
  const std::string kubelet_socket = options_.kubelet_dir + "/" + options_.kubelet_socket_name;
  const EndpointContext context{&topology_->shape, health_.get(), allocations_.get(),
                                options_.numbering};
  std::vector<Endpoint> endpoints;
  for (const claims::ResourceSpec& resource : options_.resources) {
    Endpoint endpoint;
    endpoint.server = std::make_unique<PluginEndpoint>(
        resource, options_.kubelet_dir, SocketName(options_.socket_prefix, resource.name), context);
    endpoints.push_back(std::move(endpoint));
  }
  DirectoryWatch watch(options_.kubelet_dir);
  AllocatableWatch allocatable;
  while (!stop) {
    bool kubelet_restarted = false;
    for (const DirectoryWatch::Event& event : watch.Wait(kWatchTick)) {
      if (event.name == options_.kubelet_socket_name && event.created) kubelet_restarted = true;
    }
    const FileIdentity kubelet_now = Identify(kubelet_socket);
    const auto now = std::chrono::steady_clock::now();
    bool registered_now = false;
    for (Endpoint& endpoint : endpoints) {
      PluginEndpoint& server = *endpoint.server;
      if (endpoint.registered &&
          (kubelet_restarted || !(endpoint.registered_with == kubelet_now))) {
        spdlog::info("kubelet.sock was re-created (kubelet restarted): registering {} again",
                     server.resource().name);
        endpoint.registered = false;
        endpoint.next_attempt = now;
        // Not ready from here on: the new kubelet holds no devices until it reads our list.
        readiness_.Set(false, "kubelet restarted: registering again");
        // A new kubelet (maybe upgraded) may offer other PodResources calls.
        if (pod_resources_ != nullptr) pod_resources_->KubeletRestarted();
        // kubelet may have registered its Node object anew (without our label).
        KickLabelCheck();
      }
      if (!server.serving() || !server.SocketExists()) {
        if (now < endpoint.next_attempt) continue;
        if (server.serving()) {
          spdlog::info("{} was removed (kubelet restarted?): serving a new socket",
                       server.socket_path());
          readiness_.Set(false, fmt::format("{} was removed: serving and registering again",
                                            server.socket_path()));
        }
        if (Status started = server.Start(); !started.ok()) {
          if (started.error() != endpoint.last_error) spdlog::warn("{}", started.error());
          endpoint.last_error = started.error();
          endpoint.next_attempt = now + options_.register_retry;
          continue;
        }
        endpoint.registered = false;
      }
      if (endpoint.registered || now < endpoint.next_attempt) continue;
      if (!kubelet_now.exists) {
        const std::string error =
            fmt::format("waiting for kubelet: {} does not exist", kubelet_socket);
        if (error != endpoint.last_error) spdlog::warn("{}", error);
        ++kubelet_missing_checks_;
        endpoint.last_error = error;
        endpoint.next_attempt = now + options_.register_retry;
        continue;
      }
      if (Status registered = server.Register(kubelet_socket, options_.register_timeout);
          !registered.ok()) {
        if (registered.error() != endpoint.last_error) {
          spdlog::warn("{}; retrying every {} ms", registered.error(),
                       options_.register_retry.count());
        }
        endpoint.last_error = registered.error();
        endpoint.next_attempt = std::chrono::steady_clock::now() + options_.register_retry;
        continue;
      }
      endpoint.registered = true;
      endpoint.registered_with = kubelet_now;
      endpoint.last_error.clear();
      ++registrations_;
      registered_now = true;
    }
    const auto unregistered = std::find_if(endpoints.begin(), endpoints.end(),
                                           [](const Endpoint& e) { return !e.registered; });
    if (unregistered != endpoints.end()) {
      readiness_.Set(
          false, fmt::format("registering {} with kubelet", unregistered->server->resource().name));
      allocatable = {};
    } else {
      // kubelet reads our device list only after the registration returns: compare afresh.
      if (registered_now) allocatable = {};
      CheckKubeletHolds(allocatable);
    }
  }
  for (Endpoint& endpoint : endpoints) endpoint.server->Stop();
}

Status DevicePluginManager::Run(const std::atomic<bool>& stop) {
  if (options_.resources.empty()) return Error{"no resources to serve"};
  for (const claims::ResourceSpec& resource : options_.resources) {
    if (resource.name.find('/') == std::string::npos ||
        resource.name.rfind("kubernetes.io/", 0) == 0) {
      return Error{
          fmt::format("'{}' is not an extended resource name (domain/name, not "
                      "kubernetes.io/)",
                      resource.name)};
    }
  }
  readiness_.Set(false, "waiting for the Neuron driver's devices");
  if (!WaitForDevices(stop)) return OkStatus();
  const auto interval = std::max<int64_t>(1, options_.health_interval.count());
  health_ = std::make_unique<HealthBoard>(
      topology_->shape.devices,
      static_cast<int>(std::max<int64_t>(1, options_.health_recover.count() / interval)));
  PollHealth(options_.host, *health_);
  PublishFaults();
  AllocatorOptions allocator_options{options_.node_name, options_.numbering, options_.resources};
  allocations_ =
      std::make_unique<AllocationService>(pods_, topology_->shape, std::move(allocator_options));
  const bool reconcile = !options_.pod_resources_socket.empty();
  if (reconcile) {
    // GetPreferredAllocation and Allocate read kubelet's books (who holds what, which pods
    // kubelet knows) with List, not Get: they weigh every pod on the node. A short deadline
    // (the client's default), as kubelet waits on them.
    pod_resources_ = std::make_unique<nodeagent::PodResourcesClient>(options_.pod_resources_socket,
                                                                     std::chrono::seconds(2));
    allocations_->set_kubelet_view(pod_resources_.get());
    allocations_->set_on_grant_to_record([this](const std::string& pod) { KickReconcile(pod); });
  }
  EnsureLncLabel();
  // Before kubelet learns our devices: the extender must not offer a node whose DRA claims
  // still hold some (the management label was just removed).
  PublishDraClaims();
  discovered_ = true;

  std::thread health_thread([&] { HealthLoop(stop); });
  std::thread reconcile_thread;
  if (reconcile) reconcile_thread = std::thread([&] { ReconcileLoop(stop); });
  std::thread label_thread;
  if (topology_->type->has_lnc) label_thread = std::thread([&] { LabelLoop(stop); });
  ServeAndRegister(stop);
  health_->Close();
  health_thread.join();
  if (reconcile_thread.joinable()) reconcile_thread.join();
  if (label_thread.joinable()) label_thread.join();
  spdlog::info("device plugin stopped");
  return OkStatus();
}

}  // namespace toposched::deviceplugin
