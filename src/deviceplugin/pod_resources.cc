#include "deviceplugin/pod_resources.h"

#include <algorithm>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "claims/annotations.h"
#include "claims/keys.h"
#include "deviceplugin/allocation.h"
#include "kube/allocation_record.h"
#include "podresources.grpc.pb.h"

namespace toposched::deviceplugin {

PodResourcesClient::PodResourcesClient(std::string socket_path)
    : socket_path_(std::move(socket_path)) {}

Result<std::vector<AssignedDevices>> PodResourcesClient::List(
    std::chrono::milliseconds timeout) const {
  auto channel = grpc::CreateChannel("unix://" + socket_path_, grpc::InsecureChannelCredentials());
  auto stub = v1::PodResourcesLister::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::ListPodResourcesRequest request;
  v1::ListPodResourcesResponse response;
  const grpc::Status status = stub->List(&context, request, &response);
  if (!status.ok()) {
    return Error{fmt::format("PodResources List on {}: {}", socket_path_, status.error_message())};
  }
  std::vector<AssignedDevices> out;
  for (const v1::PodResources& pod : response.pod_resources()) {
    for (const v1::ContainerResources& container : pod.containers()) {
      for (const v1::ContainerDevices& devices : container.devices()) {
        AssignedDevices item;
        item.ns = pod.namespace_();
        item.pod = pod.name();
        item.container = container.name();
        item.resource = devices.resource_name();
        item.device_ids.assign(devices.device_ids().begin(), devices.device_ids().end());
        out.push_back(std::move(item));
      }
    }
  }
  return out;
}

std::vector<RecordPatch> PlanRecordPatches(const std::vector<kube::Pod>& pods,
                                           const std::vector<AssignedDevices>& assigned,
                                           const RecordContext& context, int64_t now_ns,
                                           std::vector<std::string>* warnings) {
  std::vector<RecordPatch> out;
  for (const kube::Pod& pod : pods) {
    if (pod.deleting || pod.Terminated()) continue;
    if (pod.annotations.count(claims::kAnnotationRecord) > 0) continue;
    kube::AllocationRecord record;
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
          keys.push_back(ClaimKey(container.name, spec->name));
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
    patch.changes[std::string(kAnnotationAllocatedContainers)] =
        fmt::format("{}", fmt::join(keys, ","));
    out.push_back(std::move(patch));
  }
  return out;
}

Result<int> RecordKubeletAssignments(const PodResourcesClient& kubelet, PodSource& pods,
                                     const RecordContext& context) {
  TOPOSCHED_ASSIGN_OR_RETURN(auto assigned, kubelet.List(std::chrono::seconds(5)));
  auto live = pods.PodsOnNode();
  if (!live.ok())
    return Error{fmt::format("listing pods on node {}: {}", context.node_name, live.error())};
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  std::vector<std::string> warnings;
  const std::vector<RecordPatch> patches =
      PlanRecordPatches(*live, assigned, context, now_ns, &warnings);
  for (const std::string& warning : warnings) spdlog::warn("{}", warning);
  int patched = 0;
  for (const RecordPatch& patch : patches) {
    const auto pod = std::find_if(live->begin(), live->end(), [&](const kube::Pod& p) {
      return p.ns == patch.ns && p.name == patch.name;
    });
    Status status = pods.PatchAnnotations(*pod, patch.changes);
    if (status.ok()) {
      ++patched;
      spdlog::info("recorded kubelet's assignment on {}/{}: {}", patch.ns, patch.name,
                   patch.changes.at(std::string(claims::kAnnotationRecord)).value_or(""));
    } else {
      spdlog::warn("cannot record kubelet's assignment on {}/{}: {}", patch.ns, patch.name,
                   status.error());
    }
  }
  return patched;
}

}  // namespace toposched::deviceplugin
