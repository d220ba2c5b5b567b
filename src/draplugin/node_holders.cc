#include "draplugin/node_holders.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claims/resources.h"
#include "nodeagent/device_ids.h"
#include "topology/id_ranges.h"

namespace toposched::draplugin {
namespace {

// "neuron0-3" for logs.
std::string DescribeDevices(topology::DeviceMask devices) {
  return fmt::format("neuron{}", topology::FormatIdRanges(topology::MaskToIds(devices)));
}

std::string DescribeHolders(const std::vector<Holder>& holders) {
  std::vector<std::string> parts;
  parts.reserve(holders.size());
  for (const Holder& holder : holders) parts.push_back(holder.Describe());
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

std::string Holder::Describe() const {
  return fmt::format("container {} of pod {}/{} ({} {})", container, ns, pod, resource,
                     fmt::join(ids, ","));
}

Result<std::vector<Holder>> HoldersOf(const topology::NodeShape& shape,
                                      const std::vector<nodeagent::AssignedDevices>& assigned) {
  const std::vector<claims::ResourceSpec> specs = claims::ResourceSet{}.Specs();
  std::vector<Holder> holders;
  for (const nodeagent::AssignedDevices& item : assigned) {
    const claims::ResourceSpec* spec = nullptr;
    for (const claims::ResourceSpec& s : specs) {
      if (s.Matches(item.resource)) spec = &s;
    }
    if (spec == nullptr || item.device_ids.empty()) continue;
    Holder holder{item.ns, item.pod, item.container, item.resource, item.device_ids, {}, 0};
    const int limit = spec->unit == topology::Unit::kDevice ? shape.devices : shape.cores;
    for (const std::string& id : item.device_ids) {
      auto index = nodeagent::ParseUnitId(spec->unit, id, limit);
      if (!index.ok()) {
        return Error{fmt::format("kubelet lists {} for {}, which is not a {} of this node ({})", id,
                                 holder.Describe(), topology::UnitName(spec->unit, 1),
                                 index.error())};
      }
      const topology::Placement placement =
          topology::Placement::FromIds(shape, spec->unit, {*index});
      holder.cores |= topology::CoresOf(shape, placement);
      holder.devices |= placement.devices;
    }
    holders.push_back(std::move(holder));
  }
  return holders;
}

Status CheckClaimFree(const topology::NodeShape& shape, const HolderView& view,
                      const PreparedClaim& claim) {
  if (!view.checked) {
    return Error{
        fmt::format("cannot check that the claim's devices are free of containers outside DRA "
                    "(device-plugin pods), so it is not prepared: {}",
                    view.error)};
  }
  for (const PreparedDevice& device : claim.devices) {
    if (device.admin_access) continue;
    const topology::CoreBits cores = topology::CoresOf(shape, device.offer.placement);
    for (const Holder& holder : view.holders) {
      if ((holder.cores & cores).none()) continue;
      return Error{fmt::format(
          "device {} of the claim is held outside DRA by {}: the node was moved to DRA while "
          "that pod runs; the claim can be prepared once the pod is gone",
          device.device, holder.Describe())};
    }
  }
  return OkStatus();
}

NodeHolders::NodeHolders(const topology::NodeShape& shape,
                         std::unique_ptr<nodeagent::KubeletView> kubelet, std::string source)
    : shape_(shape), kubelet_(std::move(kubelet)), source_(std::move(source)) {
  if (kubelet_ != nullptr) {
    // Nothing is known before kubelet first answers.
    view_.checked = false;
    view_.error = "kubelet's PodResources (" + source_ + ") not asked yet";
    view_.withheld = shape_.AllDevices();
  }
}

HolderView NodeHolders::Current() const {
  MutexLock lock(mutex_);
  return view_;
}

std::pair<HolderView, bool> NodeHolders::Refresh() {
  if (kubelet_ == nullptr) return {HolderView{}, false};
  MutexLock refreshing(refresh_mutex_);
  auto listed = kubelet_->List();
  Result<std::vector<Holder>> holders =
      listed.ok() ? HoldersOf(shape_, *listed) : Result<std::vector<Holder>>(Error{listed.error()});

  MutexLock lock(mutex_);
  HolderView next;
  if (holders.ok()) {
    next.holders = std::move(holders).value();
    for (const Holder& holder : next.holders) next.withheld |= holder.devices;
  } else {
    // Keep what the last answer said (before any: every device); prepares wait for kubelet.
    next.checked = false;
    next.error = fmt::format("kubelet's PodResources ({}): {}", source_, holders.error());
    next.holders = view_.holders;
    next.withheld = answered_ ? view_.withheld : shape_.AllDevices();
  }
  const bool changed = next.withheld != view_.withheld || next.checked != view_.checked;
  if (!next.checked && next.error != view_.error) {
    spdlog::error(
        "{}; no claim is prepared until it answers, and {} stay out of the ResourceSlices",
        next.error,
        next.withheld == 0 ? std::string("no devices") : DescribeDevices(next.withheld));
  } else if (next.checked && !view_.checked) {
    spdlog::info("kubelet's PodResources ({}) answers", source_);
  }
  if (next.checked && (next.withheld != view_.withheld || !answered_)) {
    if (next.withheld != 0) {
      spdlog::warn(
          "{} held by containers outside DRA (device-plugin pods), so left out of the "
          "ResourceSlices and refused at prepare until those pods are gone: {}",
          DescribeDevices(next.withheld), DescribeHolders(next.holders));
    } else {
      spdlog::info("no container outside DRA holds a Neuron device: every device is offered");
    }
  }
  if (next.checked) answered_ = true;
  view_ = next;
  return {std::move(next), changed};
}

}  // namespace toposched::draplugin
