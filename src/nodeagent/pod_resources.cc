#include "nodeagent/pod_resources.h"

#include <algorithm>
#include <bit>
#include <memory>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "base/clock.h"
#include "claims/allocation_record.h"
#include "claims/annotations.h"
#include "claims/keys.h"
#include "nodeagent/container_setup.h"
#include "podresources.grpc.pb.h"

namespace toposched::nodeagent {

PodResourcesClient::PodResourcesClient(std::string socket_path, std::chrono::milliseconds timeout)
    : socket_path_(std::move(socket_path)), timeout_(timeout) {}

namespace {

std::unique_ptr<v1::PodResourcesLister::Stub> Stub(const std::string& socket_path) {
  return v1::PodResourcesLister::NewStub(
      grpc::CreateChannel("unix://" + socket_path, grpc::InsecureChannelCredentials()));
}

void SetDeadline(grpc::ClientContext& context, std::chrono::milliseconds timeout) {
  context.set_deadline(std::chrono::system_clock::now() + timeout);
}

// kubelet has no such call: UNIMPLEMENTED (1.20 has List only), or the plain error (code
// UNKNOWN) a kubelet answers with the call's feature gate off: "PodResources API Get method
// disabled" (server_v1.go, 1.27-1.35 with KubeletPodResourcesGet off), and likewise for
// GetAllocatableResources before its gate was on by default (1.21-1.22).
bool NotOffered(const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) return true;
  const std::string& message = status.error_message();
  return status.error_code() == grpc::StatusCode::UNKNOWN &&
         message.find("Resources API") != std::string::npos && message.ends_with("disabled");
}

// Get for a pod kubelet does not know: server_v1.go answers "pod NAME in namespace NS not found"
// (code UNKNOWN); NOT_FOUND in case a kubelet says it properly.
bool PodUnknown(const grpc::Status& status, const std::string& ns, const std::string& name) {
  return status.error_code() == grpc::StatusCode::NOT_FOUND ||
         status.error_message() == fmt::format("pod {} in namespace {} not found", name, ns);
}

// Once per kubelet (until KubeletRestarted): that it does not offer `rpc`, and what is done
// instead.
void RememberRefused(std::atomic<bool>& refused, const std::string& socket_path,
                     std::string_view rpc, const grpc::Status& status, std::string_view instead) {
  if (refused.exchange(true)) return;
  spdlog::info("kubelet's PodResources on {} does not offer {} ({}: {}); {}", socket_path, rpc,
               status.error_code() == grpc::StatusCode::UNIMPLEMENTED ? "UNIMPLEMENTED" : "refused",
               status.error_message(), instead);
}

// A pod's containers and devices as AssignedDevices items (see List): one per container and
// resource. kubelet 1.21+ sends one ContainerDevices per device id (per NUMA node with topology:
// containerDevicesFromResourceDeviceInstances), 1.20 one per resource; both are merged here, so
// no reader takes one device of a container for all it holds.
void AppendPod(const v1::PodResources& pod, std::vector<AssignedDevices>& out) {
  const size_t before = out.size();
  for (const v1::ContainerResources& container : pod.containers()) {
    const size_t first = out.size();
    for (const v1::ContainerDevices& devices : container.devices()) {
      auto same = std::find_if(
          out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
          [&](const AssignedDevices& item) { return item.resource == devices.resource_name(); });
      if (same == out.end()) {
        AssignedDevices item;
        item.ns = pod.namespace_();
        item.pod = pod.name();
        item.container = container.name();
        item.resource = devices.resource_name();
        out.push_back(std::move(item));
        same = out.end() - 1;
      }
      for (const std::string& id : devices.device_ids()) {
        // A device on two NUMA nodes is listed under each.
        if (std::find(same->device_ids.begin(), same->device_ids.end(), id) ==
            same->device_ids.end()) {
          same->device_ids.push_back(id);
        }
      }
    }
    // DRA claims prepared for the container: a DRA driver's devices are as taken as ours.
    AssignedDevices dra;
    for (const v1::DynamicResource& claim : container.dynamic_resources()) {
      for (const v1::ClaimResource& resource : claim.claim_resources()) {
        dra.dra_devices.push_back({claim.claim_namespace() + "/" + claim.claim_name(),
                                   resource.driver_name(), resource.pool_name(),
                                   resource.device_name()});
      }
    }
    if (!dra.dra_devices.empty()) {
      dra.ns = pod.namespace_();
      dra.pod = pod.name();
      dra.container = container.name();
      out.push_back(std::move(dra));
    }
  }
  if (out.size() == before) {
    // kubelet knows the pod (it runs, or is being admitted) but it holds no devices.
    AssignedDevices item;
    item.ns = pod.namespace_();
    item.pod = pod.name();
    out.push_back(std::move(item));
  }
}

}  // namespace

Result<std::vector<AssignedDevices>> PodResourcesClient::List(
    std::chrono::milliseconds timeout) const {
  auto stub = Stub(socket_path_);
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  v1::ListPodResourcesRequest request;
  v1::ListPodResourcesResponse response;
  const grpc::Status status = stub->List(&context, request, &response);
  if (!status.ok()) {
    return Error{fmt::format("PodResources List on {}: {}", socket_path_, status.error_message())};
  }
  std::vector<AssignedDevices> out;
  for (const v1::PodResources& pod : response.pod_resources()) AppendPod(pod, out);
  return out;
}

Result<std::optional<std::vector<AssignedDevices>>> PodResourcesClient::Get(
    const std::string& ns, const std::string& name, std::chrono::milliseconds timeout) const {
  if (get_refused_) return std::optional<std::vector<AssignedDevices>>();
  auto stub = Stub(socket_path_);
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  v1::GetPodResourcesRequest request;
  request.set_pod_namespace(ns);
  request.set_pod_name(name);
  v1::GetPodResourcesResponse response;
  const grpc::Status status = stub->Get(&context, request, &response);
  if (NotOffered(status)) {
    RememberRefused(get_refused_, socket_path_, "Get", status,
                    "reading one pod's devices with List");
    return std::optional<std::vector<AssignedDevices>>();
  }
  if (!status.ok() && PodUnknown(status, ns, name)) {
    return std::optional<std::vector<AssignedDevices>>(std::vector<AssignedDevices>{});
  }
  if (!status.ok()) {
    return Error{fmt::format("PodResources Get {}/{} on {}: {}", ns, name, socket_path_,
                             status.error_message())};
  }
  const v1::PodResources& pod = response.pod_resources();
  if (pod.namespace_() != ns || pod.name() != name) {
    return Error{fmt::format("PodResources Get {}/{} on {}: kubelet answered for pod '{}/{}'", ns,
                             name, socket_path_, pod.namespace_(), pod.name())};
  }
  std::vector<AssignedDevices> out;
  AppendPod(pod, out);
  return std::optional<std::vector<AssignedDevices>>(std::move(out));
}

Result<std::optional<AllocatableDevices>> PodResourcesClient::Allocatable(
    std::chrono::milliseconds timeout) const {
  if (allocatable_refused_) return std::optional<AllocatableDevices>();
  auto stub = Stub(socket_path_);
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  v1::AllocatableResourcesRequest request;
  v1::AllocatableResourcesResponse response;
  const grpc::Status status = stub->GetAllocatableResources(&context, request, &response);
  if (NotOffered(status)) {
    RememberRefused(allocatable_refused_, socket_path_, "GetAllocatableResources", status,
                    "cannot confirm that kubelet holds the advertised devices: ready once "
                    "registered");
    return std::optional<AllocatableDevices>();
  }
  if (!status.ok()) {
    return Error{fmt::format("PodResources GetAllocatableResources on {}: {}", socket_path_,
                             status.error_message())};
  }
  AllocatableDevices out;
  for (const v1::ContainerDevices& devices : response.devices()) {
    if (devices.resource_name().empty()) {
      return Error{fmt::format(
          "PodResources GetAllocatableResources on {}: an entry without a resource name (ids {})",
          socket_path_, fmt::join(devices.device_ids(), ","))};
    }
    out[devices.resource_name()].insert(devices.device_ids().begin(), devices.device_ids().end());
  }
  return std::optional<AllocatableDevices>(std::move(out));
}

void PodResourcesClient::KubeletRestarted() {
  get_refused_ = false;
  allocatable_refused_ = false;
}

std::optional<std::string> DraClaimsHeldValue(topology::DeviceMask devices) {
  if (devices == 0) return std::nullopt;
  return std::to_string(std::popcount(devices));
}

std::vector<DraHold> DraHolds(const std::vector<AssignedDevices>& assigned,
                              const topology::NodeShape& shape, std::string_view node_name,
                              std::vector<std::string>* warnings) {
  std::vector<DraHold> out;
  for (const AssignedDevices& item : assigned) {
    for (const DraDevice& device : item.dra_devices) {
      if (device.driver != dra::kDriverName || device.pool != node_name) continue;
      auto offer = dra::OfferFromName(shape, device.device);
      if (!offer.ok()) {
        if (warnings != nullptr) {
          warnings->push_back(fmt::format("{}/{} container {}: DRA claim {} holds {}/{}: {}",
                                          item.ns, item.pod, item.container, device.claim,
                                          device.pool, device.device, offer.error()));
        }
        continue;
      }
      out.push_back({item.ns + "/" + item.pod, item.container, device.claim, *offer});
    }
  }
  return out;
}

namespace {

// The ids kubelet booked for `container`'s `spec`, or nullopt when it lists none. Unparseable ids
// are a warning and count as none.
std::optional<std::vector<int>> Booked(const kube::Pod& pod, std::string_view container,
                                       const ResourceSpec& spec,
                                       const std::vector<AssignedDevices>& assigned,
                                       const RecordContext& context,
                                       std::vector<std::string>* warnings) {
  for (const AssignedDevices& item : assigned) {
    if (item.ns != pod.ns || item.pod != pod.name || item.container != container ||
        !spec.Matches(item.resource) || item.device_ids.empty()) {
      continue;
    }
    const int limit =
        spec.unit == topology::Unit::kDevice ? context.shape->devices : context.shape->cores;
    auto ids = ParseUnitIds(spec.unit, item.device_ids, limit);
    if (!ids.ok()) {
      if (warnings != nullptr) {
        warnings->push_back(fmt::format("{}/{} container {}: kubelet lists {}: {}", pod.ns,
                                        pod.name, container, item.resource, ids.error()));
      }
      return std::nullopt;
    }
    return std::move(ids).value();
  }
  return std::nullopt;
}

// For a pod with a record: toposched.io/granted when what kubelet booked for any of its
// containers differs from what the pod's annotations say (the record, or an earlier granted).
// Containers kubelet lists nothing for yet keep their recorded ids.
std::optional<RecordPatch> PlanGrantedPatch(const kube::Pod& pod,
                                            const std::vector<AssignedDevices>& assigned,
                                            const RecordContext& context,
                                            std::vector<std::string>* warnings) {
  auto record = claims::RecordFromPod(pod, context.resources);
  if (!record.ok()) {
    if (warnings != nullptr) {
      warnings->push_back(fmt::format("{}/{}: {}; not comparing it with what kubelet booked",
                                      pod.ns, pod.name, record.error()));
    }
    return std::nullopt;
  }
  claims::AllocationRecord truth = *record;
  bool differs = false;
  for (claims::ContainerIds& entry : truth.containers) {
    const auto spec =
        std::find_if(context.resources.begin(), context.resources.end(),
                     [&](const ResourceSpec& r) { return r.Matches(entry.resource); });
    if (spec == context.resources.end()) continue;
    auto booked = Booked(pod, entry.container, *spec, assigned, context, warnings);
    if (!booked) continue;
    std::vector<int> recorded = entry.ids;
    std::sort(recorded.begin(), recorded.end());
    if (recorded != *booked) {
      differs = true;
      entry.ids = std::move(*booked);
    }
  }
  if (!differs) return std::nullopt;
  if (truth.node.empty()) truth.node = context.node_name;
  RecordPatch patch;
  patch.ns = pod.ns;
  patch.name = pod.name;
  patch.changes[std::string(claims::kAnnotationGranted)] = claims::AllocationRecordJson(truth);
  return patch;
}

}  // namespace

std::vector<RecordPatch> PlanRecordPatches(const std::vector<kube::Pod>& pods,
                                           const std::vector<AssignedDevices>& assigned,
                                           const RecordContext& context, int64_t now_ns,
                                           std::vector<std::string>* warnings) {
  std::vector<RecordPatch> out;
  for (const kube::Pod& pod : pods) {
    if (pod.deleting || pod.Terminated()) continue;
    if (pod.annotations.count(claims::kAnnotationRecord) > 0 ||
        pod.annotations.count(claims::kAnnotationGranted) > 0) {
      if (auto patch = PlanGrantedPatch(pod, assigned, context, warnings)) {
        out.push_back(std::move(*patch));
      }
      continue;
    }
    claims::AllocationRecord record;
    record.node = context.node_name;
    record.instance_type = context.instance_type;
    std::vector<std::string> keys;
    // Spec order (init containers, then app containers), as AWS_NEURON_IDS lists them.
    for (const auto* list : {&pod.init_containers, &pod.containers}) {
      for (const kube::Container& container : *list) {
        for (const AssignedDevices& item : assigned) {
          if (item.ns != pod.ns || item.pod != pod.name || item.container != container.name) {
            continue;
          }
          const auto spec =
              std::find_if(context.resources.begin(), context.resources.end(),
                           [&](const ResourceSpec& r) { return r.Matches(item.resource); });
          if (spec == context.resources.end() || item.device_ids.empty()) continue;
          const int limit =
              spec->unit == topology::Unit::kDevice ? context.shape->devices : context.shape->cores;
          auto ids = ParseUnitIds(spec->unit, item.device_ids, limit);
          if (!ids.ok()) {
            if (warnings != nullptr) {
              warnings->push_back(fmt::format("{}/{} container {}: kubelet lists {}: {}", pod.ns,
                                              pod.name, container.name, item.resource,
                                              ids.error()));
            }
            continue;
          }
          record.containers.push_back({container.name, spec->name, std::move(ids).value()});
          keys.push_back(claims::ServedKey(container.name, spec->name));
        }
      }
    }
    if (record.containers.empty()) continue;
    std::sort(keys.begin(), keys.end());
    RecordPatch patch;
    patch.ns = pod.ns;
    patch.name = pod.name;
    for (auto& [key, value] : claims::AllocationAnnotations(record, now_ns)) {
      if ((key == claims::kAnnotationNeuronIds || key == claims::kAnnotationAllocTime) &&
          pod.annotations.count(key) > 0) {
        continue;
      }
      patch.changes[key] = value;
    }
    patch.changes[std::string(claims::kAnnotationAllocated)] = "true";
    patch.changes[std::string(claims::kAnnotationAllocatedContainers)] =
        claims::FormatServedKeys(keys);
    out.push_back(std::move(patch));
  }
  return out;
}

namespace {

// Plans the patches of `live` by `assigned` and writes them. Returns the number of pods patched.
int PatchAssignments(const std::vector<kube::Pod>& live,
                     const std::vector<AssignedDevices>& assigned, PodSource& pods,
                     const RecordContext& context) {
  std::vector<std::string> warnings;
  const std::vector<RecordPatch> patches =
      PlanRecordPatches(live, assigned, context, WallNs(), &warnings);
  for (const std::string& warning : warnings) spdlog::warn("{}", warning);
  int patched = 0;
  for (const RecordPatch& patch : patches) {
    const auto pod = std::find_if(live.begin(), live.end(), [&](const kube::Pod& p) {
      return p.ns == patch.ns && p.name == patch.name;
    });
    Status status = pods.PatchAnnotations(*pod, patch.changes);
    if (status.ok()) {
      ++patched;
      const auto granted = patch.changes.find(std::string(claims::kAnnotationGranted));
      if (granted != patch.changes.end()) {
        spdlog::warn(
            "{}/{} holds other ids than its record says; recorded what kubelet booked "
            "in {}: {}",
            patch.ns, patch.name, claims::kAnnotationGranted, granted->second.value_or(""));
      } else {
        spdlog::info("recorded kubelet's assignment on {}/{}: {}", patch.ns, patch.name,
                     patch.changes.at(std::string(claims::kAnnotationRecord)).value_or(""));
      }
    } else {
      spdlog::warn("cannot record kubelet's assignment on {}/{}: {}", patch.ns, patch.name,
                   status.error());
    }
  }
  return patched;
}

}  // namespace

Result<int> RecordKubeletAssignments(const PodResourcesClient& kubelet, PodSource& pods,
                                     const RecordContext& context) {
  TOPOSCHED_ASSIGN_OR_RETURN(auto assigned, kubelet.List(std::chrono::seconds(5)));
  auto live = pods.PodsOnNode();
  if (!live.ok())
    return Error{fmt::format("listing pods on node {}: {}", context.node_name, live.error())};
  return PatchAssignments(*live, assigned, pods, context);
}

Result<std::optional<int>> RecordKubeletAssignment(const PodResourcesClient& kubelet,
                                                   PodSource& pods, const RecordContext& context,
                                                   const std::string& pod_key) {
  const size_t slash = pod_key.find('/');
  if (slash == std::string::npos) return Error{fmt::format("'{}' is not namespace/name", pod_key)};
  const std::string ns = pod_key.substr(0, slash);
  const std::string name = pod_key.substr(slash + 1);
  TOPOSCHED_ASSIGN_OR_RETURN(auto assigned, kubelet.Get(ns, name, std::chrono::seconds(5)));
  if (!assigned) return std::optional<int>();
  std::vector<std::string> booked;
  for (const AssignedDevices& item : *assigned) {
    if (!item.device_ids.empty()) {
      booked.push_back(
          fmt::format("{} {} {}", item.container, item.resource, fmt::join(item.device_ids, ",")));
    }
  }
  spdlog::info("PodResources Get {}: kubelet books {}", pod_key,
               assigned->empty() ? "nothing (it does not know the pod)"
               : booked.empty()  ? "no devices yet"
                                 : fmt::format("{}", fmt::join(booked, "; ")));
  auto live = pods.PodsOnNode();
  if (!live.ok())
    return Error{fmt::format("listing pods on node {}: {}", context.node_name, live.error())};
  std::vector<kube::Pod> one;
  for (kube::Pod& pod : *live) {
    if (pod.ns == ns && pod.name == name) one.push_back(std::move(pod));
  }
  return std::optional<int>(PatchAssignments(one, *assigned, pods, context));
}

}  // namespace toposched::nodeagent
