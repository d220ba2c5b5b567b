#include "nodeagent/container_setup.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "claims/keys.h"

namespace toposched::nodeagent {

Result<CoreNumbering> ParseCoreNumbering(std::string_view text) {
  if (text == "container") return CoreNumbering::kContainer;
  if (text == "host") return CoreNumbering::kHost;
  return Error{fmt::format("unknown core numbering '{}': use container or host", text)};
}

std::string FormatCoreList(const std::vector<int>& cores) {
  if (cores.empty()) return "";
  bool contiguous = true;
  for (size_t i = 1; i < cores.size(); ++i) contiguous = contiguous && cores[i] == cores[i - 1] + 1;
  if (!contiguous) return fmt::format("{}", fmt::join(cores, ","));
  if (cores.size() == 1) return std::to_string(cores.front());
  return fmt::format("{}-{}", cores.front(), cores.back());
}

ContainerSetup BuildContainerSetup(const topology::NodeShape& shape, topology::Unit unit,
                                   const std::vector<int>& ids, CoreNumbering numbering) {
  const int cpd = std::max(shape.cores_per_device, 1);
  std::vector<int> devices;
  std::vector<int> cores;
  for (int id : ids) {
    if (unit == topology::Unit::kDevice) {
      devices.push_back(id);
      for (int c = id * cpd; c < (id + 1) * cpd; ++c) cores.push_back(c);
    } else {
      devices.push_back(id / cpd);
      cores.push_back(id);
    }
  }
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  std::sort(cores.begin(), cores.end());
  if (numbering == CoreNumbering::kContainer) {
    // Inside the container the runtime numbers the mounted devices from 0 in host order.
    for (int& c : cores) {
      const auto local =
          std::lower_bound(devices.begin(), devices.end(), c / cpd) - devices.begin();
      c = static_cast<int>(local) * cpd + c % cpd;
    }
  }
  ContainerSetup setup;
  for (int d : devices) setup.device_nodes.push_back(fmt::format("/dev/neuron{}", d));
  setup.envs[std::string(claims::kEnvVisibleCores)] = FormatCoreList(cores);
  if (shape.lnc != 0)
    setup.envs[std::string(claims::kEnvLogicalNcConfig)] = std::to_string(shape.lnc);
  return setup;
}

}  // namespace toposched::nodeagent
