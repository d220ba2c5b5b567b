#include "claims/annotations.h"

#include <utility>

#include <fmt/format.h>

#include "topology/id_ranges.h"

namespace toposched::claims {

std::string FormatAwsIds(const claims::AllocationRecord& record) {
  std::string ids;
  for (const claims::ContainerIds& container : record.containers) {
    for (int id : container.ids) {
      if (!ids.empty()) ids += ',';
      ids += std::to_string(id);
    }
  }
  return ids;
}

Result<std::vector<std::vector<int>>> SplitAwsIds(std::string_view text,
                                                  const std::vector<int>& counts) {
  auto groups = topology::SplitIdGroups(text, counts, topology::kMaxCores);
  if (!groups.ok()) {
    return Error{fmt::format("annotation {}: {}", kAnnotationNeuronIds, groups.error())};
  }
  return groups;
}

std::map<std::string, std::string> AllocationAnnotations(const claims::AllocationRecord& record,
                                                         int64_t alloc_time_ns) {
  std::map<std::string, std::string> annotations;
  annotations.emplace(kAnnotationNeuronIds, FormatAwsIds(record));
  annotations.emplace(kAnnotationAllocated, "false");
  annotations.emplace(kAnnotationAllocTime, std::to_string(alloc_time_ns));
  annotations.emplace(kAnnotationRecord, claims::AllocationRecordJson(record));
  return annotations;
}

Result<claims::AllocationRecord> RecordFromAwsIds(const kube::Pod& pod, std::string_view text,
                                                  const std::vector<ResourceSpec>& resources) {
  TOPOSCHED_ASSIGN_OR_RETURN(auto asks, ListAsks(pod, resources));
  std::vector<int> counts;
  counts.reserve(asks.size());
  for (const ContainerAsk& ask : asks) counts.push_back(ask.count);
  TOPOSCHED_ASSIGN_OR_RETURN(auto groups, SplitAwsIds(text, counts));
  claims::AllocationRecord record;
  record.node = pod.node_name;
  for (size_t i = 0; i < asks.size(); ++i) {
    record.containers.push_back({asks[i].container, asks[i].asked_as, std::move(groups[i])});
  }
  return record;
}

bool HasAllocation(const kube::Pod& pod) {
  return pod.annotations.count(kAnnotationGranted) != 0 ||
         pod.annotations.count(kAnnotationRecord) != 0 ||
         pod.annotations.count(kAnnotationNeuronIds) != 0;
}

Result<claims::AllocationRecord> RecordFromPod(const kube::Pod& pod,
                                               const std::vector<ResourceSpec>& resources) {
  // What the containers really got, as the device plugin read it from kubelet, wins over what
  // was reserved at bind.
  if (auto it = pod.annotations.find(kAnnotationGranted); it != pod.annotations.end()) {
    auto granted = claims::ParseAllocationRecord(it->second);
    if (!granted.ok()) {
      return Error{fmt::format("annotation {}: {}", kAnnotationGranted, granted.error())};
    }
    return granted;
  }
  if (auto it = pod.annotations.find(kAnnotationRecord); it != pod.annotations.end()) {
    auto record = claims::ParseAllocationRecord(it->second);
    if (!record.ok()) {
      return Error{fmt::format("annotation {}: {}", kAnnotationRecord, record.error())};
    }
    return record;
  }
  if (auto it = pod.annotations.find(kAnnotationNeuronIds); it != pod.annotations.end()) {
    return RecordFromAwsIds(pod, it->second, resources);
  }
  return Error{"no allocation record"};
}

std::string ServedKey(std::string_view container, std::string_view resource) {
  return fmt::format("{}={}", container, resource);
}

std::string FormatServedKeys(const std::vector<std::string>& keys) {
  return fmt::format("{}", fmt::join(keys, ","));
}

std::set<std::string> ParseServedKeys(std::string_view text) {
  std::set<std::string> out;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    if (!item.empty()) out.emplace(item);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace toposched::claims
