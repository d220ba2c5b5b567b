#include "deviceplugin/allocation.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claims/annotations.h"
#include "claims/gang.h"
#include "kube/allocation_record.h"
#include "topology/id_ranges.h"

namespace toposched::deviceplugin {
namespace {

constexpr size_t kMaxExplained = 6;

const kube::Container* FindContainer(const kube::Pod& pod, std::string_view name, int& order) {
  int index = 0;
  for (const auto* list : {&pod.init_containers, &pod.containers}) {
    for (const kube::Container& container : *list) {
      if (container.name == name) {
        order = index;
        return &container;
      }
      ++index;
    }
  }
  order = index;  // unknown names sort last
  return nullptr;
}

std::set<std::string> SplitServed(std::string_view text) {
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

bool Contains(const std::vector<int>& sorted, int value) {
  return std::binary_search(sorted.begin(), sorted.end(), value);
}

bool IsSubset(const std::vector<int>& small, const std::vector<int>& big_sorted) {
  return std::all_of(small.begin(), small.end(), [&](int v) { return Contains(big_sorted, v); });
}

std::string PodKey(const kube::Pod& pod) { return pod.ns + "/" + pod.name; }

}  // namespace

Result<std::map<std::string, std::string>> GangEnvOfPod(const kube::Pod& pod) {
  auto read = claims::GangRecordOf(pod);
  if (!read.ok()) {
    return Error{fmt::format(
        "pod {}: {}; not allocating its devices: a gang member must start with its own rank "
        "(the extender writes the record at bind)",
        PodKey(pod), read.error())};
  }
  if (!read->has_value()) return std::map<std::string, std::string>{};
  const claims::GangRecord* record = &**read;
  spdlog::info("pod {} is rank {} of {} in gang {} ({}-node groups{}{})", PodKey(pod), record->rank,
               record->size, record->gang, record->group_nodes,
               record->server_id.empty() ? "" : ", UltraServer group " + record->server_id,
               record->node_id < 0 ? "" : fmt::format(", node {}", record->node_id));
  return claims::GangEnv(*record);
}

std::string ClaimKey(std::string_view container, std::string_view resource) {
  return fmt::format("{}={}", container, resource);
}

Result<PodClaims> ReadPodClaims(const kube::Pod& pod, const std::vector<ResourceSpec>& resources,
                                std::string_view node_name) {
  PodClaims out;
  out.alloc_time = std::numeric_limits<int64_t>::max();
  const auto& notes = pod.annotations;
  if (auto it = notes.find(claims::kAnnotationAllocTime); it != notes.end()) {
    // A malformed time only loses the pod its place in the queue, not its devices.
    if (auto time = kube::ParseAllocTime(it->second); time.ok()) out.alloc_time = *time;
  }
  std::set<std::string> served;
  if (auto it = notes.find(kAnnotationAllocatedContainers); it != notes.end()) {
    served = SplitServed(it->second);
  }
  const auto allocated_it = notes.find(claims::kAnnotationAllocated);
  const bool all_served = allocated_it != notes.end() && allocated_it->second == "true";

  if (claims::HasAllocation(pod)) {
    // toposched.io/allocation, else AWS_NEURON_IDS alone (AWS's extender), split over the
    // containers in kubelet's order as claims reads it for the extender too.
    TOPOSCHED_ASSIGN_OR_RETURN(auto record, claims::RecordFromPod(pod, resources));
    out.from_record = notes.count(claims::kAnnotationRecord) > 0;
    if (out.from_record && !record.node.empty() && !node_name.empty() && record.node != node_name) {
      return Error{fmt::format("annotation {} records node {}, but this is node {}",
                               claims::kAnnotationRecord, record.node, node_name)};
    }
    for (const kube::ContainerIds& entry : record.containers) {
      const auto spec =
          std::find_if(resources.begin(), resources.end(),
                       [&](const ResourceSpec& r) { return r.Matches(entry.resource); });
      if (spec == resources.end()) continue;  // another resource, served by another plugin
      Claim claim;
      claim.container = entry.container;
      claim.resource = spec->name;
      claim.ids = entry.ids;
      std::sort(claim.ids.begin(), claim.ids.end());
      const kube::Container* container = FindContainer(pod, entry.container, claim.order);
      claim.requested =
          container == nullptr ? 0 : static_cast<int>(ContainerRequest(*container, *spec));
      out.claims.push_back(std::move(claim));
    }
  }
  for (Claim& claim : out.claims) {
    claim.served = all_served || served.count(ClaimKey(claim.container, claim.resource)) > 0;
  }
  std::stable_sort(out.claims.begin(), out.claims.end(),
                   [](const Claim& a, const Claim& b) { return a.order < b.order; });
  return out;
}

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
  setup.envs["NEURON_RT_VISIBLE_CORES"] = FormatCoreList(cores);
  if (shape.lnc != 0) setup.envs["NEURON_LOGICAL_NC_CONFIG"] = std::to_string(shape.lnc);
  return setup;
}

std::vector<int> PreferredByTopology(const topology::NodeShape& shape, topology::Unit unit,
                                     const std::vector<int>& available,
                                     const std::vector<int>& must_include, int size) {
  const int units = unit == topology::Unit::kDevice ? shape.devices : shape.cores;
  std::vector<int> must = must_include;
  std::sort(must.begin(), must.end());
  must.erase(std::unique(must.begin(), must.end()), must.end());
  std::vector<int> free = available;
  free.insert(free.end(), must.begin(), must.end());
  std::sort(free.begin(), free.end());
  free.erase(std::unique(free.begin(), free.end()), free.end());
  free.erase(
      std::remove_if(free.begin(), free.end(), [&](int id) { return id < 0 || id >= units; }),
      free.end());

  auto fill_lowest = [&] {
    std::vector<int> out = must;
    for (int id : free) {
      if (static_cast<int>(out.size()) >= size) break;
      if (!Contains(must, id)) out.push_back(id);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  if (size <= 0 || static_cast<int>(must.size()) >= size || static_cast<int>(free.size()) < size) {
    return fill_lowest();
  }

  topology::NodeUsage usage;
  for (int id = 0; id < units; ++id) {
    if (!Contains(free, id)) usage.Take(shape, unit, {id});
  }
  const topology::Request request{unit, size};
  const auto has_must = [&](const std::vector<int>& ids) { return IsSubset(must, ids); };
  topology::Decision decision =
      topology::Allocate(shape, usage, request, topology::Policy::kBestFit);
  if (decision.ok() && has_must(decision.placement.ids)) return decision.placement.ids;
  for (const topology::Placement& placement : topology::LegalPlacements(shape, usage, request)) {
    if (has_must(placement.ids)) return placement.ids;
  }
  // Rule `any` lists one placement only, and every set is legal there.
  return fill_lowest();
}

struct AllocationService::Candidate {
  const kube::Pod* pod = nullptr;
  int64_t alloc_time = 0;
  Claim claim;
  bool all_other_claims_served = false;
  std::vector<std::string> served_keys;  // the pod's served keys, this claim included
};

AllocationService::AllocationService(PodSource& pods, const topology::NodeShape& shape,
                                     AllocatorOptions options)
    : pods_(pods), shape_(shape), options_(std::move(options)) {}

bool AllocationService::ServedInMemory(const std::string& uid, const std::string& key) const {
  const auto it = served_.find(uid);
  return it != served_.end() && it->second.count(key) > 0;
}

void AllocationService::ForgetGonePods(const std::vector<kube::Pod>& pods) {
  std::set<std::string> live;
  for (const kube::Pod& pod : pods) live.insert(pod.uid);
  for (auto it = served_.begin(); it != served_.end();) {
    it = live.count(it->first) > 0 ? std::next(it) : served_.erase(it);
  }
}

std::vector<AllocationService::Candidate> AllocationService::Candidates(
    const std::vector<kube::Pod>& pods, const ResourceSpec& resource, int count,
    std::vector<std::string>* skipped) {
  auto explain = [&](std::string text) {
    if (skipped != nullptr) skipped->push_back(std::move(text));
  };
  std::vector<Candidate> out;
  for (const kube::Pod& pod : pods) {
    if (pod.deleting || pod.Terminated()) continue;
    if (skipped == nullptr) {
      // No explanations wanted (GetPreferredAllocation): a pod marked allocated as a whole has
      // no candidate, so skip parsing its record.
      auto allocated = pod.annotations.find(claims::kAnnotationAllocated);
      if (allocated != pod.annotations.end() && allocated->second == "true") continue;
    }
    auto claims = ReadPodClaims(pod, options_.resources, options_.node_name);
    if (!claims.ok()) {
      explain(fmt::format("{}: {}", PodKey(pod), claims.error()));
      continue;
    }
    for (Claim& claim : claims->claims) {
      claim.served =
          claim.served || ServedInMemory(pod.uid, ClaimKey(claim.container, claim.resource));
    }
    for (const Claim& claim : claims->claims) {
      if (claim.resource != resource.name) continue;
      const std::string who = fmt::format("{} container {}", PodKey(pod), claim.container);
      if (claim.served) {
        explain(fmt::format("{}: already allocated", who));
        continue;
      }
      if (static_cast<int>(claim.ids.size()) != count) {
        explain(
            fmt::format("{}: recorded {} ids, kubelet asks for {}", who, claim.ids.size(), count));
        continue;
      }
      if (claim.requested != count) {
        explain(fmt::format("{}: recorded {} ids but the container requests {} {}", who,
                            claim.ids.size(), claim.requested, resource.name));
        continue;
      }
      Candidate candidate;
      candidate.pod = &pod;
      candidate.alloc_time = claims->alloc_time;
      candidate.claim = claim;
      bool others_served = true;
      for (const Claim& other : claims->claims) {
        if (other.served) {
          candidate.served_keys.push_back(ClaimKey(other.container, other.resource));
        } else if (&other != &claim) {
          others_served = false;
        }
      }
      candidate.served_keys.push_back(ClaimKey(claim.container, claim.resource));
      std::sort(candidate.served_keys.begin(), candidate.served_keys.end());
      candidate.all_other_claims_served = others_served;
      out.push_back(std::move(candidate));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.alloc_time, a.pod->creation_timestamp, a.pod->ns, a.pod->name,
                    a.claim.order) <
           std::tie(b.alloc_time, b.pod->creation_timestamp, b.pod->ns, b.pod->name, b.claim.order);
  });
  return out;
}

std::vector<int> AllocationService::Prefer(const ResourceSpec& resource,
                                           const std::vector<int>& available,
                                           const std::vector<int>& must_include, int size) {
  std::vector<int> avail = available;
  avail.insert(avail.end(), must_include.begin(), must_include.end());
  std::sort(avail.begin(), avail.end());
  {
    MutexLock lock(mutex_);
    auto pods = pods_.PodsOnNode();
    // As in Allocate: the cached list may trail kubelet, which asks for a preference right after
    // the binding (seen with a real kubelet 1.20, test/e2e/kubelet.sh: 28 ms after the bind the
    // cache had no annotation, kubelet's checkpoint got topology's ids, the container the
    // recorded ones). Ask the API itself before choosing by topology.
    std::vector<Candidate> candidates;
    if (pods.ok()) candidates = Candidates(*pods, resource, size, nullptr);
    if (!pods.ok() || candidates.empty()) {
      auto fresh = pods_.PodsOnNodeFresh();
      if (fresh.ok() || !pods.ok()) {
        pods = std::move(fresh);
        candidates.clear();
        if (pods.ok()) candidates = Candidates(*pods, resource, size, nullptr);
      }
    }
    if (pods.ok()) {
      for (const Candidate& candidate : candidates) {
        if (IsSubset(candidate.claim.ids, avail) && IsSubset(must_include, candidate.claim.ids)) {
          spdlog::debug("preferring {} for {} container {} ({})",
                        topology::FormatIdRanges(candidate.claim.ids), PodKey(*candidate.pod),
                        candidate.claim.container, resource.name);
          return candidate.claim.ids;
        }
        spdlog::warn("{} container {} records {} {} but kubelet offers only {} (must include {})",
                     PodKey(*candidate.pod), candidate.claim.container,
                     topology::FormatIdRanges(candidate.claim.ids), resource.name,
                     topology::FormatIdRanges(available), topology::FormatIdRanges(must_include));
      }
    } else {
      spdlog::warn("GetPreferredAllocation: cannot list pods on node {}: {}; choosing by topology",
                   options_.node_name, pods.error());
    }
  }
  return PreferredByTopology(shape_, resource.unit, available, must_include, size);
}

Result<Grant> AllocationService::Allocate(const ResourceSpec& resource,
                                          const std::vector<int>& requested) {
  const int count = static_cast<int>(requested.size());
  const int units = resource.unit == topology::Unit::kDevice ? shape_.devices : shape_.cores;
  const bool one_or_all = count == 1 || count == units;
  Grant grant;
  {
    MutexLock lock(mutex_);
    auto pods = pods_.PodsOnNode();
    std::vector<std::string> skipped;
    std::vector<Candidate> candidates;
    if (pods.ok()) candidates = Candidates(*pods, resource, count, &skipped);
    if (!pods.ok() || candidates.empty()) {
      // A cached list may trail kubelet, which learns of the binding as fast as our watch does:
      // ask the API itself before concluding there is no such pod.
      auto fresh = pods_.PodsOnNodeFresh();
      if (fresh.ok() || !pods.ok()) {
        pods = std::move(fresh);
        skipped.clear();
        if (pods.ok()) candidates = Candidates(*pods, resource, count, &skipped);
      }
    }
    if (!pods.ok()) {
      if (!one_or_all) {
        return Error{fmt::format(
            "cannot find the pod this allocation of {} {} is for: listing pods on node {} failed: "
            "{}",
            count, resource.name, options_.node_name, pods.error())};
      }
      spdlog::warn("cannot list pods on node {} ({}); granting kubelet's {} {} as asked",
                   options_.node_name, pods.error(), topology::FormatIdRanges(requested),
                   resource.name);
      grant.ids = requested;
      return grant;
    }
    ForgetGonePods(*pods);
    // The pod GetPreferredAllocation steered kubelet to carries exactly these ids.
    auto chosen = std::find_if(candidates.begin(), candidates.end(),
                               [&](const Candidate& c) { return c.claim.ids == requested; });
    if (chosen == candidates.end() && !candidates.empty()) chosen = candidates.begin();
    if (chosen != candidates.end()) {
      const kube::Pod& pod = *chosen->pod;
      // Before anything is marked served: a bad record fails this Allocate, and kubelet's retry
      // (or a fixed record) finds the claim still pending.
      TOPOSCHED_ASSIGN_OR_RETURN(grant.envs, GangEnvOfPod(pod));
      const std::string key = ClaimKey(chosen->claim.container, chosen->claim.resource);
      served_[pod.uid].insert(key);
      std::map<std::string, std::optional<std::string>> changes;
      changes[std::string(kAnnotationAllocatedContainers)] =
          fmt::format("{}", fmt::join(chosen->served_keys, ","));
      if (chosen->all_other_claims_served)
        changes[std::string(claims::kAnnotationAllocated)] = "true";
      if (Status patched = pods_.PatchAnnotations(pod, changes); !patched.ok()) {
        // The in-memory record still keeps the claim from being served twice by this process.
        spdlog::warn("allocated {} to {} container {} but could not mark it on the pod: {}",
                     topology::FormatIdRanges(chosen->claim.ids), PodKey(pod),
                     chosen->claim.container, patched.error());
      }
      if (chosen->claim.ids != requested) {
        spdlog::warn(
            "kubelet chose {} {} but {} container {} records {}: the container gets the "
            "recorded ids (kubelet did not follow GetPreferredAllocation)",
            resource.name, topology::FormatIdRanges(requested), PodKey(pod),
            chosen->claim.container, topology::FormatIdRanges(chosen->claim.ids));
      }
      grant.ids = chosen->claim.ids;
      grant.pod = PodKey(pod);
      grant.container = chosen->claim.container;
      grant.by_annotation = true;
      return grant;
    }
    // kubelet may Allocate again for a container it already admitted (after its own restart).
    for (const kube::Pod& pod : *pods) {
      if (pod.deleting || pod.Terminated()) continue;
      auto claims = ReadPodClaims(pod, options_.resources, options_.node_name);
      if (!claims.ok()) continue;
      for (const Claim& claim : claims->claims) {
        const bool served =
            claim.served || ServedInMemory(pod.uid, ClaimKey(claim.container, claim.resource));
        if (served && claim.resource == resource.name && claim.ids == requested) {
          TOPOSCHED_ASSIGN_OR_RETURN(grant.envs, GangEnvOfPod(pod));
          grant.ids = claim.ids;
          grant.pod = PodKey(pod);
          grant.container = claim.container;
          grant.by_annotation = true;
          return grant;
        }
      }
    }
    if (!one_or_all) {
      std::string why;
      for (size_t i = 0; i < skipped.size() && i < kMaxExplained; ++i) why += "; " + skipped[i];
      if (skipped.size() > kMaxExplained) {
        why += fmt::format("; and {} more", skipped.size() - kMaxExplained);
      }
      return Error{fmt::format(
          "no pod on node {} is waiting for {} {}: none of its {} pods carries an unserved "
          "allocation ({} or {}, with {} not \"true\") of exactly {} ids for this resource. "
          "Schedule pods that ask for {} through the toposched extender (their schedulerName), "
          "or ask for 1 or all {} {}{}",
          options_.node_name, count, resource.name, pods->size(), claims::kAnnotationRecord,
          claims::kAnnotationNeuronIds, claims::kAnnotationAllocated, count, resource.name, units,
          topology::UnitName(resource.unit, units), why.empty() ? "" : ". Pods seen" + why)};
    }
    grant.ids = requested;
  }
  spdlog::info("granted {} {} without an annotation (one or all are always legal)",
               topology::FormatIdRanges(requested), resource.name);
  if (on_unannotated_grant_) on_unannotated_grant_();
  return grant;
}

}  // namespace toposched::deviceplugin
