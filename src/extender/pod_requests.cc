#include "extender/pod_requests.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace toposched::extender {

bool ResourceNames::Manages(std::string_view name) const {
  return std::find(device.begin(), device.end(), name) != device.end() ||
         std::find(core.begin(), core.end(), name) != core.end();
}

std::string PodRequests::ResourceFor(const std::string& container, topology::Unit unit) const {
  for (size_t i = 0; i < spec.containers.size(); ++i) {
    if (spec.containers[i].name == container && spec.containers[i].request.unit == unit) {
      return resource_of[i];
    }
  }
  return {};
}

namespace {

Status AddContainer(const kube::Container& c, bool init, const ResourceNames& names,
                    PodRequests& out) {
  for (const auto& [unit, list] : {std::pair{topology::Unit::kDevice, &names.device},
                                   std::pair{topology::Unit::kCore, &names.core}}) {
    int64_t total = 0;
    std::string first_resource;
    for (const auto& resource : *list) {
      const int64_t n = c.Asks(resource);
      if (n == 0) continue;
      if (first_resource.empty()) first_resource = resource;
      total += n;
    }
    if (total == 0) continue;
    if (total < 0 || total > std::numeric_limits<int>::max()) {
      return Error{fmt::format("container '{}' asks for {} {}: not a usable count", c.name, total,
                               first_resource)};
    }
    out.spec.containers.push_back({c.name, {unit, static_cast<int>(total)}, init});
    out.resource_of.push_back(first_resource);
  }
  return OkStatus();
}

}  // namespace

Result<PodRequests> RequestsOf(const kube::Pod& pod, const ResourceNames& names) {
  PodRequests out;
  out.spec.uid = pod.uid;
  out.spec.name = pod.Key();
  out.ns = pod.ns;
  out.name = pod.name;
  out.node_name = pod.node_name;
  for (const auto& c : pod.init_containers) {
    if (auto s = AddContainer(c, !c.sidecar, names, out); !s.ok()) return Error{s.error()};
  }
  for (const auto& c : pod.containers) {
    if (auto s = AddContainer(c, false, names, out); !s.ok()) return Error{s.error()};
  }
  return out;
}

}  // namespace toposched::extender
