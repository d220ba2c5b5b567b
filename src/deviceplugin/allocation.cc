#include "deviceplugin/allocation.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "claims/allocation_record.h"
#include "claims/annotations.h"
#include "claims/gang.h"
#include "claims/keys.h"
#include "nodeagent/pod_resources.h"
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

Result<PodClaims> ReadPodClaims(const kube::Pod& pod,
                                const std::vector<claims::ResourceSpec>& resources,
                                std::string_view node_name) {
  PodClaims out;
  out.alloc_time = std::numeric_limits<int64_t>::max();
  const auto& notes = pod.annotations;
  if (auto it = notes.find(claims::kAnnotationAllocTime); it != notes.end()) {
    // A malformed time only loses the pod its place in the queue, not its devices.
    if (auto time = claims::ParseAllocTime(it->second); time.ok()) out.alloc_time = *time;
  }
  std::set<std::string> served;
  if (auto it = notes.find(kAnnotationAllocatedContainers); it != notes.end()) {
    served = claims::ParseServedKeys(it->second);
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
    for (const claims::ContainerIds& entry : record.containers) {
      const auto spec =
          std::find_if(resources.begin(), resources.end(),
                       [&](const claims::ResourceSpec& r) { return r.Matches(entry.resource); });
      if (spec == resources.end()) continue;  // another resource, served by another plugin
      Claim claim;
      claim.container = entry.container;
      claim.resource = spec->name;
      claim.ids = entry.ids;
      std::sort(claim.ids.begin(), claim.ids.end());
      const kube::Container* container = FindContainer(pod, entry.container, claim.order);
      claim.requested =
          container == nullptr ? 0 : static_cast<int>(AsksWithAliases(*container, *spec));
      out.claims.push_back(std::move(claim));
    }
  }
  for (Claim& claim : out.claims) {
    claim.served =
        all_served || served.count(claims::ServedKey(claim.container, claim.resource)) > 0;
  }
  std::stable_sort(out.claims.begin(), out.claims.end(),
                   [](const Claim& a, const Claim& b) { return a.order < b.order; });
  return out;
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

// One container's units that another pod must not be given.
struct AllocationService::Holder {
  enum class Kind { kKubelet, kServed, kPending, kDra };
  Kind kind = Kind::kKubelet;
  std::string pod;  // namespace/name
  std::string container;
  std::string resource;
  topology::Unit unit = topology::Unit::kDevice;
  std::vector<int> ids;
  std::set<int> cores;  // the physical cores they take
};

struct AllocationService::View {
  std::vector<kube::Pod> pods;
  bool kubelet_answered = false;
  std::set<std::string> known;   // namespace/name of every pod kubelet lists
  std::set<std::string> listed;  // "ns/name|container=resource" kubelet booked
  std::vector<Holder> holders;   // kubelet's books and our own grants
  std::vector<Holder> pending;   // records of containers not started yet
};

struct AllocationService::Candidate {
  const kube::Pod* pod = nullptr;
  std::string container;
  int order = 0;
  bool known = false;          // kubelet lists the pod
  std::optional<Claim> claim;  // the record's ids for this container and resource
  std::string record_error;    // the pod's record cannot be served for this container
  bool all_other_claims_served = false;
  std::vector<std::string> served_keys;  // the pod's served keys, this one included
};

namespace {

std::string ListedKey(std::string_view pod, std::string_view container, std::string_view resource) {
  return fmt::format("{}|{}", pod, claims::ServedKey(container, resource));
}

std::string_view KindText(int kind) {
  switch (kind) {
    case 0:
      return "per kubelet's PodResources";
    case 1:
      return "granted by this plugin";
    case 3:
      return "prepared for its DRA claim, per kubelet's PodResources";
    default:
      return "reserved by its toposched.io/allocation, not started yet";
  }
}

bool Terminal(const kube::Pod& pod) { return pod.Terminated(); }

}  // namespace

AllocationService::AllocationService(nodeagent::PodSource& pods, const topology::NodeShape& shape,
                                     AllocatorOptions options)
    : pods_(pods), shape_(shape), options_(std::move(options)) {}

std::set<int> AllocationService::PhysicalCores(topology::Unit unit,
                                               const std::vector<int>& ids) const {
  const int cpd = std::max(shape_.cores_per_device, 1);
  std::set<int> cores;
  for (int id : ids) {
    if (unit == topology::Unit::kDevice) {
      for (int c = id * cpd; c < (id + 1) * cpd; ++c) cores.insert(c);
    } else {
      cores.insert(id);
    }
  }
  return cores;
}

void AllocationService::ForgetGonePods(const std::vector<kube::Pod>& pods) {
  // kubelet frees a pod's devices once it is terminal; a pod being deleted still runs.
  std::set<std::string> live;
  for (const kube::Pod& pod : pods) {
    if (!Terminal(pod)) live.insert(pod.uid);
  }
  for (auto it = served_.begin(); it != served_.end();) {
    it = live.count(it->first) > 0 ? std::next(it) : served_.erase(it);
  }
  for (auto it = refused_.begin(); it != refused_.end();) {
    it = live.count(*it) > 0 ? std::next(it) : refused_.erase(it);
  }
}

Result<AllocationService::View> AllocationService::Read(bool fresh) {
  auto pods = fresh ? pods_.PodsOnNodeFresh() : pods_.PodsOnNode();
  if (!pods.ok()) return Error{pods.error()};
  View view;
  view.pods = std::move(pods).value();
  ForgetGonePods(view.pods);
  if (kubelet_ != nullptr) {
    auto listed = kubelet_->List();
    if (listed.ok()) {
      view.kubelet_answered = true;
      for (const nodeagent::AssignedDevices& item : *listed) {
        const std::string pod = item.ns + "/" + item.pod;
        view.known.insert(pod);
        const auto spec =
            std::find_if(options_.resources.begin(), options_.resources.end(),
                         [&](const claims::ResourceSpec& r) { return r.Matches(item.resource); });
        if (spec == options_.resources.end() || item.device_ids.empty()) continue;
        const int units = spec->unit == topology::Unit::kDevice ? shape_.devices : shape_.cores;
        auto ids = nodeagent::ParseUnitIds(spec->unit, item.device_ids, units);
        if (!ids.ok()) {
          spdlog::warn("kubelet lists {} {} for {} container {}: {}", spec->name,
                       fmt::join(item.device_ids, ","), pod, item.container, ids.error());
          continue;
        }
        view.listed.insert(ListedKey(pod, item.container, spec->name));
        Holder holder{
            Holder::Kind::kKubelet,         pod, item.container, spec->name, spec->unit, *ids,
            PhysicalCores(spec->unit, *ids)};
        view.holders.push_back(std::move(holder));
      }
      // A DRA claim's devices (the node ran the DRA driver before; its claims still run).
      std::vector<std::string> warnings;
      for (nodeagent::DraHold& hold :
           nodeagent::DraHolds(*listed, shape_, options_.node_name, &warnings)) {
        const std::vector<int> cores = dra::CoresOfOffer(shape_, hold.offer);
        const bool by_core = hold.offer.kind == dra::OfferKind::kCores;
        view.holders.push_back({Holder::Kind::kDra, std::move(hold.pod), std::move(hold.container),
                                fmt::format("DRA device {} of claim {}, {}", hold.offer.name,
                                            hold.claim, by_core ? "cores" : "devices"),
                                by_core ? topology::Unit::kCore : topology::Unit::kDevice,
                                hold.offer.placement.ids,
                                std::set<int>(cores.begin(), cores.end())});
      }
      for (const std::string& warning : warnings) spdlog::warn("{}", warning);
    } else {
      spdlog::warn("kubelet's PodResources did not answer ({}); judging by our own marks",
                   listed.error());
    }
  }
  for (const auto& [uid, containers] : served_) {
    for (const auto& [key, served] : containers) {
      const std::string resource = key.substr(key.find('=') + 1);
      view.holders.push_back({Holder::Kind::kServed, served.pod, served.container, resource,
                              served.unit, served.ids, PhysicalCores(served.unit, served.ids)});
    }
  }
  for (const kube::Pod& pod : view.pods) {
    if (pod.deleting || Terminal(pod) || refused_.count(pod.uid) > 0 ||
        !claims::HasAllocation(pod)) {
      continue;
    }
    auto claims = ReadPodClaims(pod, options_.resources, options_.node_name);
    if (!claims.ok()) continue;
    const std::string key = PodKey(pod);
    for (const Claim& claim : claims->claims) {
      const std::string claim_key = claims::ServedKey(claim.container, claim.resource);
      const bool served =
          view.kubelet_answered
              ? view.listed.count(ListedKey(key, claim.container, claim.resource)) > 0
              : claim.served ||
                    (served_.count(pod.uid) > 0 && served_.at(pod.uid).count(claim_key) > 0);
      if (served) continue;
      const auto spec =
          std::find_if(options_.resources.begin(), options_.resources.end(),
                       [&](const claims::ResourceSpec& r) { return r.name == claim.resource; });
      if (spec == options_.resources.end()) continue;
      view.pending.push_back({Holder::Kind::kPending, key, claim.container, claim.resource,
                              spec->unit, claim.ids, PhysicalCores(spec->unit, claim.ids)});
    }
  }
  return view;
}

std::vector<AllocationService::Candidate> AllocationService::Candidates(
    const View& view, const claims::ResourceSpec& resource, int count,
    std::vector<std::string>* skipped) const {
  auto explain = [&](std::string text) {
    if (skipped != nullptr) skipped->push_back(std::move(text));
  };
  std::vector<Candidate> out;
  for (const kube::Pod& pod : view.pods) {
    if (pod.deleting || Terminal(pod)) continue;
    // kubelet fails the admission of a pod whose Allocate was refused: it is not coming back,
    // though the API may still show it Pending for a moment while kubelet admits the next pod.
    if (refused_.count(pod.uid) > 0) continue;
    const std::string key = PodKey(pod);
    std::optional<Result<PodClaims>> claims;
    std::set<std::string> marked;  // the pod's allocated-containers
    if (auto it = pod.annotations.find(kAnnotationAllocatedContainers);
        it != pod.annotations.end()) {
      marked = claims::ParseServedKeys(it->second);
    }
    const auto all = pod.annotations.find(claims::kAnnotationAllocated);
    const bool all_marked = all != pod.annotations.end() && all->second == "true";
    const auto memory = served_.find(pod.uid);
    const bool in_memory = memory != served_.end();
    auto served = [&](std::string_view container, std::string_view resource_name) {
      if (view.kubelet_answered) {
        return view.listed.count(ListedKey(key, container, resource_name)) > 0;
      }
      const std::string claim_key = claims::ServedKey(container, resource_name);
      return all_marked || marked.count(claim_key) > 0 ||
             (in_memory && memory->second.count(claim_key) > 0);
    };
    int order = 0;
    for (const auto* list : {&pod.init_containers, &pod.containers}) {
      for (const kube::Container& container : *list) {
        const int index = order++;
        const int asked = static_cast<int>(AsksWithAliases(container, resource));
        if (asked == 0) continue;
        const std::string who = fmt::format("{} container {}", key, container.name);
        if (served(container.name, resource.name)) {
          explain(fmt::format("{}: already allocated", who));
          continue;
        }
        if (asked != count) {
          explain(
              fmt::format("{}: asks for {} {}, kubelet for {}", who, asked, resource.name, count));
          continue;
        }
        Candidate candidate;
        candidate.pod = &pod;
        candidate.container = container.name;
        candidate.order = index;
        candidate.known = view.known.count(key) > 0;
        if (claims::HasAllocation(pod)) {
          if (!claims) claims = ReadPodClaims(pod, options_.resources, options_.node_name);
          if (!claims->ok()) {
            candidate.record_error = (*claims).error();
          } else {
            const PodClaims& recorded = claims->value();
            const auto claim =
                std::find_if(recorded.claims.begin(), recorded.claims.end(), [&](const Claim& c) {
                  return c.container == container.name && c.resource == resource.name;
                });
            if (claim == recorded.claims.end()) {
              candidate.record_error =
                  fmt::format("its allocation record has no {} for this container", resource.name);
            } else if (static_cast<int>(claim->ids.size()) != count) {
              candidate.record_error =
                  fmt::format("recorded {} ids but the container requests {} {}", claim->ids.size(),
                              count, resource.name);
            } else {
              candidate.claim = *claim;
              bool others_served = true;
              for (const Claim& other : recorded.claims) {
                const bool done = served(other.container, other.resource);
                if (done) {
                  candidate.served_keys.push_back(
                      claims::ServedKey(other.container, other.resource));
                } else if (&other != &*claim) {
                  others_served = false;
                }
              }
              candidate.served_keys.push_back(claims::ServedKey(claim->container, claim->resource));
              std::sort(candidate.served_keys.begin(), candidate.served_keys.end());
              candidate.all_other_claims_served = others_served;
            }
          }
          if (!candidate.record_error.empty()) {
            explain(fmt::format("{}: {}", who, candidate.record_error));
          }
        }
        out.push_back(std::move(candidate));
      }
    }
  }
  // kubelet's order: the pods it knows first, then creation order (see the header comment).
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    return std::tuple(!a.known, std::string_view(a.pod->creation_timestamp),
                      std::string_view(a.pod->ns), std::string_view(a.pod->name), a.order) <
           std::tuple(!b.known, std::string_view(b.pod->creation_timestamp),
                      std::string_view(b.pod->ns), std::string_view(b.pod->name), b.order);
  });
  return out;
}

const AllocationService::Holder* AllocationService::Conflict(const View& view,
                                                             const std::set<int>& cores,
                                                             const std::string& pod_key,
                                                             bool pending, const kube::Pod* pod,
                                                             std::string_view container) const {
  // An init container that runs to completion before the next starts (not a sidecar, which
  // keeps running beside the app containers).
  auto is_init = [&](std::string_view name) {
    return std::any_of(pod->init_containers.begin(), pod->init_containers.end(),
                       [&](const kube::Container& c) { return c.name == name && !c.sidecar; });
  };
  auto meets = [&](const Holder& holder) {
    if (holder.pod == pod_key) {
      // The same container (another resource of it, or kubelet's books of this very call), or an
      // init container on either side: they never run at the same time.
      if (pod == nullptr || holder.container.empty() || holder.container == container ||
          is_init(holder.container) || is_init(container)) {
        return false;
      }
    }
    return std::any_of(cores.begin(), cores.end(),
                       [&](int core) { return holder.cores.count(core) > 0; });
  };
  for (const Holder& holder : view.holders) {
    if (meets(holder)) return &holder;
  }
  if (pending) {
    for (const Holder& holder : view.pending) {
      if (meets(holder)) return &holder;
    }
  }
  return nullptr;
}

namespace {

// How many candidates are tied with the first one: kubelet's order cannot tell them apart.
template <typename Candidate>
size_t TiedWithFirst(const std::vector<Candidate>& candidates) {
  size_t n = 0;
  while (n < candidates.size() && candidates[n].known == candidates.front().known &&
         candidates[n].pod->creation_timestamp == candidates.front().pod->creation_timestamp) {
    ++n;
  }
  return n;
}

}  // namespace

std::vector<int> AllocationService::Prefer(const claims::ResourceSpec& resource,
                                           const std::vector<int>& available,
                                           const std::vector<int>& must_include, int size) {
  std::vector<int> avail = available;
  avail.insert(avail.end(), must_include.begin(), must_include.end());
  std::sort(avail.begin(), avail.end());
  avail.erase(std::unique(avail.begin(), avail.end()), avail.end());
  {
    MutexLock lock(mutex_);
    // As in Allocate: the cached list may trail kubelet, which asks for a preference right after
    // the binding (seen with a real kubelet 1.20, test/e2e/kubelet.sh: 28 ms after the bind the
    // cache had no annotation). Ask the API itself before choosing without a record.
    auto view = Read(false);
    std::vector<Candidate> candidates;
    if (view.ok()) candidates = Candidates(*view, resource, size, nullptr);
    if (!view.ok() || candidates.empty() || !candidates.front().claim) {
      auto fresh = Read(true);
      if (fresh.ok() || !view.ok()) {
        view = std::move(fresh);
        candidates.clear();
        if (view.ok()) candidates = Candidates(*view, resource, size, nullptr);
      }
    }
    if (!view.ok()) {
      spdlog::warn("GetPreferredAllocation: cannot list pods on node {}: {}; choosing by topology",
                   options_.node_name, view.error());
      return PreferredByTopology(shape_, resource.unit, available, must_include, size);
    }
    const Candidate* chosen = candidates.empty() ? nullptr : &candidates.front();
    const size_t tied = TiedWithFirst(candidates);
    for (size_t i = 0; i < tied; ++i) {
      const Candidate& c = candidates[i];
      if (c.claim && IsSubset(c.claim->ids, avail) && IsSubset(must_include, c.claim->ids)) {
        chosen = &c;
        break;
      }
    }
    const std::string key = chosen != nullptr ? PodKey(*chosen->pod) : "";
    if (chosen != nullptr && chosen->claim) {
      const std::vector<int>& ids = chosen->claim->ids;
      const Holder* holder = Conflict(*view, PhysicalCores(resource.unit, ids), key, true,
                                      chosen->pod, chosen->container);
      if (IsSubset(ids, avail) && IsSubset(must_include, ids) && holder == nullptr) {
        spdlog::debug("preferring {} for {} container {} ({})", topology::FormatIdRanges(ids), key,
                      chosen->container, resource.name);
        return ids;
      }
      spdlog::warn(
          "{} container {} records {} {} but kubelet offers only {} (must include {}){}; "
          "preferring free ids instead",
          key, chosen->container, topology::FormatIdRanges(ids), resource.name,
          topology::FormatIdRanges(available), topology::FormatIdRanges(must_include),
          holder == nullptr ? ""
                            : fmt::format(" and {} container {} holds some of them", holder->pod,
                                          holder->container));
    }
    // Steer kubelet away from whatever another pod holds or is reserved for, across resources.
    std::vector<int> free;
    for (int id : available) {
      if (Conflict(*view, PhysicalCores(resource.unit, {id}), key, true,
                   chosen != nullptr ? chosen->pod : nullptr,
                   chosen != nullptr ? chosen->container : "") == nullptr) {
        free.push_back(id);
      }
    }
    std::vector<int> with_must = free;
    with_must.insert(with_must.end(), must_include.begin(), must_include.end());
    std::sort(with_must.begin(), with_must.end());
    with_must.erase(std::unique(with_must.begin(), with_must.end()), with_must.end());
    if (static_cast<int>(with_must.size()) >= size) {
      return PreferredByTopology(shape_, resource.unit, free, must_include, size);
    }
  }
  return PreferredByTopology(shape_, resource.unit, available, must_include, size);
}

Result<Grant> AllocationService::Allocate(const claims::ResourceSpec& resource,
                                          const std::vector<int>& requested) {
  const int count = static_cast<int>(requested.size());
  const int units = resource.unit == topology::Unit::kDevice ? shape_.devices : shape_.cores;
  const bool one_or_all = count == 1 || count == units;
  const std::string asked =
      fmt::format("{} {}", resource.name, topology::FormatIdRanges(requested));
  Grant grant;
  bool record_truth = false;
  std::optional<kube::Pod> refused;  // the pod a refusal's event is about
  std::string refusal;
  {
    MutexLock lock(mutex_);
    auto view = Read(false);
    std::vector<std::string> skipped;
    std::vector<Candidate> candidates;
    if (view.ok()) candidates = Candidates(*view, resource, count, &skipped);
    const std::set<int> cores = PhysicalCores(resource.unit, requested);
    // The candidate kubelet is serving: the first in its order, or among those tied with it the
    // one whose record names the ids kubelet chose.
    auto choose = [&](const std::vector<Candidate>& among) {
      const Candidate* chosen = &among.front();
      const size_t tied = TiedWithFirst(among);
      for (size_t i = 0; i < tied; ++i) {
        if (among[i].claim && among[i].claim->ids == requested) {
          chosen = &among[i];
          break;
        }
      }
      return chosen;
    };
    auto conflicts = [&](const View& in, const std::vector<Candidate>& among) {
      if (among.empty()) return false;
      const Candidate* chosen = choose(among);
      return Conflict(in, cores, PodKey(*chosen->pod), true, chosen->pod, chosen->container) !=
             nullptr;
    };
    // A cached list may trail kubelet, which learns of the binding as fast as our watch does: ask
    // the API itself before concluding there is no such pod. Likewise before refusing for a
    // holder: it may be a pod kubelet has just failed (a restarted kubelet's re-admission) whose
    // status our watch has not delivered yet, while the extender, which saw it, gave its ids away.
    if (!view.ok() || candidates.empty() || conflicts(*view, candidates)) {
      auto fresh = Read(true);
      if (fresh.ok() || !view.ok()) {
        view = std::move(fresh);
        skipped.clear();
        candidates.clear();
        if (view.ok()) candidates = Candidates(*view, resource, count, &skipped);
      }
    }
    if (!view.ok()) {
      if (!one_or_all) {
        return Error{fmt::format(
            "cannot find the pod this allocation of {} {} is for: listing pods on node {} failed: "
            "{}",
            count, resource.name, options_.node_name, view.error())};
      }
      spdlog::warn("cannot list pods on node {} ({}); granting kubelet's {} as asked",
                   options_.node_name, view.error(), asked);
      grant.ids = requested;
      return grant;
    }
    auto conflict_text = [&](const std::string& who, const Holder& holder) {
      return fmt::format(
          "refusing {} for {}: {} container {} holds {} {} ({}); the same unit is never given "
          "to two pods",
          asked, who, holder.pod, holder.container, holder.resource,
          topology::FormatIdRanges(holder.ids), KindText(static_cast<int>(holder.kind)));
    };
    if (!candidates.empty()) {
      const Candidate* chosen = choose(candidates);
      const kube::Pod& pod = *chosen->pod;
      const std::string key = PodKey(pod);
      const std::string who = fmt::format("pod {} container {}", key, chosen->container);
      if (!chosen->record_error.empty()) {
        refusal = fmt::format("refusing {} for {}: {}; fix or remove the record", asked, who,
                              chosen->record_error);
        refused = pod;
      } else if (!chosen->claim && !one_or_all) {
        refusal = fmt::format(
            "refusing {} for {}: it carries no allocation ({} or {}), and only 1 or all {} {} "
            "are always topology-legal. Schedule pods that ask for {} through the toposched "
            "extender (their schedulerName)",
            asked, who, claims::kAnnotationRecord, claims::kAnnotationNeuronIds, units,
            topology::UnitName(resource.unit, units), resource.name);
        refused = pod;
      } else if (const Holder* holder = Conflict(*view, cores, key, true, &pod, chosen->container);
                 holder != nullptr) {
        refusal = conflict_text(who, *holder);
        refused = pod;
      }
      if (refused) refused_.insert(pod.uid);
      if (refusal.empty()) {
        // Before anything is marked served: a bad gang record fails this Allocate, and kubelet's
        // retry (or a fixed record) finds the container still pending.
        TOPOSCHED_ASSIGN_OR_RETURN(grant.envs, GangEnvOfPod(pod));
        const std::string claim_key = claims::ServedKey(chosen->container, resource.name);
        served_[pod.uid][claim_key] = {key, chosen->container, resource.unit, requested};
        grant.ids = requested;
        grant.pod = key;
        grant.container = chosen->container;
        grant.by_annotation = chosen->claim.has_value();
        grant.matches_record = chosen->claim && chosen->claim->ids == requested;
        record_truth = !grant.matches_record;
        if (chosen->claim) {
          std::map<std::string, std::optional<std::string>> changes;
          changes[std::string(kAnnotationAllocatedContainers)] =
              claims::FormatServedKeys(chosen->served_keys);
          if (chosen->all_other_claims_served)
            changes[std::string(claims::kAnnotationAllocated)] = "true";
          if (Status patched = pods_.PatchAnnotations(pod, changes); !patched.ok()) {
            // The in-memory record still keeps the claim from being served twice by us.
            spdlog::warn("allocated {} to {} but could not mark it on the pod: {}", asked, who,
                         patched.error());
          }
          if (!grant.matches_record) {
            spdlog::warn(
                "kubelet chose {} for {}, whose record says {}: the container gets kubelet's "
                "ids (kubelet's books must hold what the container has), and what it got is "
                "recorded in {} for the extender",
                asked, who, topology::FormatIdRanges(chosen->claim->ids),
                claims::kAnnotationGranted);
          }
        }
      }
    } else {
      // kubelet may Allocate again for a container it already admitted (after its own restart).
      bool again = false;
      for (const Holder& holder : view->holders) {
        if (holder.resource != resource.name || holder.ids != requested) continue;
        const auto pod = std::find_if(view->pods.begin(), view->pods.end(), [&](const auto& p) {
          return PodKey(p) == holder.pod && !Terminal(p);
        });
        if (pod == view->pods.end()) continue;
        if (const Holder* other =
                Conflict(*view, cores, holder.pod, false, &*pod, holder.container);
            other != nullptr) {
          break;  // refused below
        }
        TOPOSCHED_ASSIGN_OR_RETURN(grant.envs, GangEnvOfPod(*pod));
        grant.ids = requested;
        grant.pod = holder.pod;
        grant.container = holder.container;
        grant.by_annotation = claims::HasAllocation(*pod);
        record_truth = !grant.by_annotation;
        again = true;
        break;
      }
      if (!again && !one_or_all) {
        std::string why;
        for (size_t i = 0; i < skipped.size() && i < kMaxExplained; ++i) why += "; " + skipped[i];
        if (skipped.size() > kMaxExplained) {
          why += fmt::format("; and {} more", skipped.size() - kMaxExplained);
        }
        return Error{fmt::format(
            "no pod on node {} is waiting for {} {}: none of its {} pods has a container asking "
            "for exactly {} {} that holds none yet. Schedule pods that ask for {} through the "
            "toposched extender (their schedulerName), or ask for 1 or all {} {}{}",
            options_.node_name, count, resource.name, view->pods.size(), count, resource.name,
            resource.name, units, topology::UnitName(resource.unit, units),
            why.empty() ? "" : ". Pods seen" + why)};
      }
      if (again) {
        spdlog::info("granted {} again to {} container {} (kubelet admits it again)", asked,
                     grant.pod, grant.container);
      } else if (const Holder* holder = Conflict(*view, cores, "", true); holder != nullptr) {
        refusal = conflict_text("a container of no pod found on this node", *holder);
      } else {
        grant.ids = requested;
        record_truth = true;
        spdlog::info("granted {} matched to no pod (one or all are always legal)", asked);
      }
    }
  }
  if (!refusal.empty()) {
    spdlog::error("{}", refusal);
    if (refused) {
      if (Status posted = pods_.PostWarning(*refused, "NeuronAllocationRefused", refusal);
          !posted.ok()) {
        spdlog::warn("cannot post an event on {}: {}", PodKey(*refused), posted.error());
      }
    }
    return Error{std::move(refusal)};
  }
  if (record_truth && on_grant_to_record_) on_grant_to_record_(grant.pod);
  return grant;
}

}  // namespace toposched::deviceplugin
