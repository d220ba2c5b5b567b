#include "claims/resources.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace toposched::claims {

bool ResourceSpec::Matches(std::string_view resource) const {
  if (resource == name) return true;
  return std::find(aliases.begin(), aliases.end(), resource) != aliases.end();
}

bool ResourceSet::Manages(std::string_view name) const {
  return std::find(device.begin(), device.end(), name) != device.end() ||
         std::find(core.begin(), core.end(), name) != core.end();
}

std::vector<ResourceSpec> ResourceSet::Specs() const {
  std::vector<ResourceSpec> out;
  for (const auto& [unit, list] :
       {std::pair{topology::Unit::kDevice, &device}, std::pair{topology::Unit::kCore, &core}}) {
    if (list->empty()) continue;
    out.push_back({list->front(), unit, {list->begin() + 1, list->end()}});
  }
  return out;
}

std::vector<ResourceSpec> DefaultResources(const std::string& device_resource,
                                           const std::string& core_resource) {
  std::vector<ResourceSpec> out;
  if (!device_resource.empty()) {
    ResourceSpec devices{device_resource, topology::Unit::kDevice, {}};
    if (device_resource == kResourceNeuron) {
      devices.aliases.emplace_back(kResourceNeuronDevice);
    }
    out.push_back(std::move(devices));
  }
  if (!core_resource.empty()) out.push_back({core_resource, topology::Unit::kCore, {}});
  return out;
}

int64_t Asks(const kube::Container& container, std::string_view resource) {
  if (auto it = container.limits.find(resource); it != container.limits.end()) return it->second;
  if (auto it = container.requests.find(resource); it != container.requests.end()) {
    return it->second;
  }
  return 0;
}

int64_t AsksWithAliases(const kube::Container& container, const ResourceSpec& spec,
                        std::string* asked_as) {
  int64_t total = 0;
  auto add = [&](const std::string& name) {
    const int64_t n = Asks(container, name);
    if (n == 0) return;
    if (asked_as != nullptr && asked_as->empty()) *asked_as = name;
    total += n;
  };
  if (asked_as != nullptr) asked_as->clear();
  add(spec.name);
  for (const auto& alias : spec.aliases) add(alias);
  return total;
}

Result<std::vector<ContainerAsk>> ListAsks(const kube::Pod& pod,
                                           const std::vector<ResourceSpec>& resources) {
  std::vector<ContainerAsk> out;
  int order = 0;
  for (const auto* list : {&pod.init_containers, &pod.containers}) {
    const bool init_list = list == &pod.init_containers;
    for (const kube::Container& container : *list) {
      for (const ResourceSpec& spec : resources) {
        std::string asked_as;
        const int64_t total = AsksWithAliases(container, spec, &asked_as);
        if (total == 0) continue;
        if (total < 0 || total > std::numeric_limits<int>::max()) {
          return Error{fmt::format("container '{}' asks for {} {}: not a usable count",
                                   container.name, total, asked_as)};
        }
        ContainerAsk ask;
        ask.container = container.name;
        ask.resource = spec.name;
        ask.asked_as = std::move(asked_as);
        ask.unit = spec.unit;
        ask.count = static_cast<int>(total);
        ask.init = init_list && !container.sidecar;
        ask.order = order;
        out.push_back(std::move(ask));
      }
      ++order;
    }
  }
  return out;
}

}  // namespace toposched::claims
