#include "draplugin/slice_publisher.h"

#include <algorithm>
#include <bit>
#include <span>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/json_reader.h"
#include "base/json_writer.h"
#include "claims/keys.h"

namespace toposched::draplugin {
namespace {

using json::Path;
namespace ondemand = simdjson::ondemand;
using KnownSlice = SlicePublisher::KnownSlice;

constexpr std::string_view kSlicesPath = "/apis/resource.k8s.io/v1/resourceslices";
// What we wrote, generation left out, so an unchanged plan is recognised after a restart too.
constexpr int kListPageSize = 100;

bool Is2xx(long status) { return status >= 200 && status < 300; }  // NOLINT(google-runtime-int)

std::string Digest(std::string_view text) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a: stable across builds, unlike std::hash
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return fmt::format("{:016x}", h);
}

std::string SlicePath(std::string_view name) {
  return fmt::format("{}/{}", kSlicesPath, kube::EscapeUrlComponent(name));
}

// BuildSlices' JSON opens with apiVersion, kind, then "metadata":{ — ours, so the first match is
// the object's metadata. The two members are spliced into that text, not the slice parsed into a
// tree and written again: its digest is taken of the text BuildSlices wrote, and the whole slice
// would be parsed only to add them.
std::string SpliceMetadata(const std::string& json, std::string_view resource_version,
                           std::string_view digest) {
  constexpr std::string_view kOpen = "\"metadata\":{";
  const size_t at = json.find(kOpen);
  if (at == std::string::npos) return json;
  JsonTree extra = JsonTree::object();
  if (!resource_version.empty()) extra["resourceVersion"] = resource_version;
  extra["annotations"] = {{claims::kAnnotationSliceDigest, digest}};
  // {"resourceVersion":..,"annotations":{..}} without its braces, then the comma before "name".
  std::string members = WriteJson(extra);
  members.back() = ',';
  std::string out = json;
  out.insert(at + kOpen.size(), std::string_view(members).substr(1));
  return out;
}

Status ReadMetadata(ondemand::value& value, const Path& path, KnownSlice& out) {
  return json::ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key == "name") return json::ReadString(field, at, out.name);
        if (key == "resourceVersion") return json::ReadString(field, at, out.resource_version);
        if (key != "annotations") return OkStatus();
        return json::ForEachMapEntryOf(
            field, at,
            [&](std::string_view name, ondemand::value& entry, const Path& entry_at) -> Status {
              if (name != claims::kAnnotationSliceDigest) return OkStatus();
              return json::ReadString(entry, entry_at, out.digest);
            });
      });
}

Status ReadSpec(ondemand::value& value, const Path& path, KnownSlice& out) {
  return json::ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key == "pool") {
          return json::ForEachFieldOf(
              field, at, [&](std::string_view k, ondemand::value& v, const Path& p) -> Status {
                return k == "generation" ? json::ReadInt64(v, p, out.generation) : OkStatus();
              });
        }
        if (key == "sharedCounters") {
          return json::ForEachElementOf(field, at,
                                        [&](size_t, ondemand::value&, const Path&) -> Status {
                                          out.has_shared_counters = true;
                                          return OkStatus();
                                        });
        }
        return OkStatus();
      });
}

Status ReadSlice(ondemand::value& value, const Path& path, KnownSlice& out) {
  ondemand::object object;
  bool present = false;
  TOPOSCHED_RETURN_IF_ERROR(json::OpenObject(value, path, object, present));
  if (!present) return json::ErrorAt(path, "expected an object");
  TOPOSCHED_RETURN_IF_ERROR(json::ForEachField(
      object, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key == "metadata") return ReadMetadata(field, at, out);
        if (key == "spec") return ReadSpec(field, at, out);
        return OkStatus();
      }));
  if (out.name.empty()) return json::ErrorAt(path.Field("metadata"), "no name");
  return OkStatus();
}

Result<KnownSlice> ParseSlice(std::string_view body) {
  KnownSlice slice;
  const simdjson::padded_string padded(body);
  Status status = json::DecodeDocument(
      padded, [&](ondemand::value& root) { return ReadSlice(root, Path(), slice); });
  if (!status.ok()) return Error{"ResourceSlice: " + status.error()};
  return slice;
}

// One page of a list: its slices and the continue token.
Status ParseSlicePage(std::string_view body, std::vector<KnownSlice>& items,
                      std::string& continue_token) {
  const simdjson::padded_string padded(body);
  return json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    const Path path;
    return json::ForEachFieldOfRequired(
        root, path, "expected an object",
        [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
          if (key == "metadata") {
            return json::ForEachFieldOf(
                field, at, [&](std::string_view k, ondemand::value& v, const Path& p) -> Status {
                  return k == "continue" ? json::ReadString(v, p, continue_token) : OkStatus();
                });
          }
          if (key != "items") return OkStatus();
          return json::ForEachElementOf(
              field, at, [&](size_t, ondemand::value& element, const Path& element_at) -> Status {
                KnownSlice slice;
                TOPOSCHED_RETURN_IF_ERROR(ReadSlice(element, element_at, slice));
                items.push_back(std::move(slice));
                return OkStatus();
              });
        });
  });
}

Error WriteError(std::string_view verb, std::string_view name, const kube::HttpResponse& answer) {
  return Error{fmt::format("{} ResourceSlice {}: HTTP {}: {}", verb, name, answer.status,
                           kube::StatusMessage(answer.body))};
}

}  // namespace

Result<Partitionable> ParsePartitionable(std::string_view text) {
  if (text == "auto") return Partitionable::kAuto;
  if (text == "on") return Partitionable::kOn;
  if (text == "off") return Partitionable::kOff;
  return Error{fmt::format("--partitionable '{}': expected auto, on or off", text)};
}

Result<PublishOrder> ParsePublishOrder(std::string_view text) {
  if (text == "scarcity") return PublishOrder::kScarcity;
  if (text == "index") return PublishOrder::kIndex;
  return Error{fmt::format("--order '{}': expected scarcity or index", text)};
}

Result<DeviceTaints> ParseDeviceTaints(std::string_view text) {
  if (text == "auto") return DeviceTaints::kAuto;
  if (text == "on") return DeviceTaints::kOn;
  if (text == "off") return DeviceTaints::kOff;
  return Error{fmt::format("--device-taints '{}': expected auto, on or off", text)};
}

Result<dra::TaintEffect> ParseOnDeviceFailure(std::string_view text) {
  if (text == "event") return dra::TaintEffect::kNoSchedule;
  if (text == "evict") return dra::TaintEffect::kNoExecute;
  return Error{fmt::format("--on-device-failure '{}': expected event or evict", text)};
}

// The node's slices as they should be: names in write order (counter slices first, so a device
// never names a counter set the pool does not have yet), with the digest of each.
struct SlicePublisher::Plan {
  bool partitionable = false;
  std::vector<dra::Offer> ordered;
  dra::DeviceFaults tainted;  // failed devices whose offers are published tainted
  struct Entry {
    std::string name;
    std::string digest;
    bool counters = false;
  };
  std::vector<Entry> entries;  // counter slices first, then device slices
};

SlicePublisher::SlicePublisher(kube::ApiClient& api, PublisherConfig config)
    : api_(api), config_(std::move(config)) {
  if (config_.partitionable != Partitionable::kAuto) {
    decided_ = true;
    partitionable_ = config_.partitionable == Partitionable::kOn;
  }
  if (config_.device_taints != DeviceTaints::kAuto) {
    taints_served_ = config_.device_taints == DeviceTaints::kOn;
  }
  // Whole devices only need no counters, so there is nothing to find out about the cluster.
  if (ScopeWith(true) == dra::OfferScope::kWholeDevices) {
    decided_ = true;
    partitionable_ = false;
  }
}

dra::OfferScope SlicePublisher::ScopeWith(bool counters) const {
  return counters ? dra::ScopeFor(config_.shape, config_.set_offers, config_.core_offers)
                  : dra::OfferScope::kWholeDevices;
}

bool SlicePublisher::Offers(dra::OfferKind kind) const {
  bool counters = false;
  {
    MutexLock lock(mu_);
    counters = !decided_ || partitionable_;  // undecided: the plan tries counters first
  }
  return dra::ScopeHas(ScopeWith(counters), kind);
}

bool SlicePublisher::partitionable() const {
  MutexLock lock(mu_);
  return partitionable_;
}

int64_t SlicePublisher::generation() const {
  MutexLock lock(mu_);
  return generation_;
}

std::optional<bool> SlicePublisher::taints_served() const {
  MutexLock lock(mu_);
  return taints_served_;
}

bool SlicePublisher::TaintsServedLocked() {
  if (taints_served_.has_value()) return *taints_served_;
  // A dry run: validated and defaulted as a create would be (a server with DRADeviceTaints off
  // drops the field), never stored.
  Result<kube::HttpResponse> answer =
      api_.Post(fmt::format("{}?dryRun=All", kSlicesPath), dra::TaintProbeSlice(config_.facts));
  if (!answer.ok() || !(Is2xx(answer->status) || answer->status == 400 || answer->status == 422)) {
    spdlog::warn(
        "DRA publisher: could not find out whether the API server keeps device taints ({}); "
        "withdrawing the failed devices' offers for now, asking again at the next publish",
        answer.ok() ? fmt::format("HTTP {}: {}", answer->status, kube::StatusMessage(answer->body))
                    : answer.error());
    return false;
  }
  taints_served_ =
      Is2xx(answer->status) &&
      answer->body.find(fmt::format("\"{}\"", dra::kUnhealthyTaintKey)) != std::string::npos;
  if (*taints_served_) {
    spdlog::info(
        "DRA publisher: the API server keeps devices[].taints: a failed device's offers stay "
        "published with taint {} ({})",
        dra::kUnhealthyTaintKey, dra::TaintEffectName(config_.failure_effect));
  } else {
    spdlog::info(
        "DRA publisher: the API server {} devices[].taints (DRADeviceTaints off, Kubernetes "
        "before 1.37?): a failed device's offers are withdrawn from the slices",
        Is2xx(answer->status)
            ? std::string("dropped")
            : fmt::format("refused ({}: {})", answer->status, kube::StatusMessage(answer->body)));
  }
  return *taints_served_;
}

void SlicePublisher::ObserveRequest(const topology::Request& request) {
  MutexLock lock(demand_mu_);
  demand_.Observe(request);
}

SlicePublisher::Plan SlicePublisher::MakePlan(bool partitionable, topology::DeviceMask withdrawn,
                                              dra::DeviceFaults tainted,
                                              const topology::NodeUsage& usage) {
  const topology::NodeShape& shape = config_.shape;
  topology::DeviceMask unusable = withdrawn;
  for (const auto& [device, fault] : tainted) unusable |= topology::DeviceMask{1} << device;
  // An unhealthy device counts as taken: its slots are no home for anything.
  topology::NodeUsage effective = usage;
  for (int d = 0; d < shape.devices; ++d) {
    if ((unusable >> d & 1) == 0) continue;
    for (int k = 0; k < shape.cores_per_device; ++k) {
      const int core = d * shape.cores_per_device + k;
      if (effective.AllFree(shape, topology::Unit::kCore, {core})) {
        effective.Take(shape, topology::Unit::kCore, {core});
      }
    }
  }
  Plan plan;
  plan.partitionable = partitionable;
  plan.tainted = std::move(tainted);
  std::vector<dra::Offer> offers = dra::LegalOffers(shape, ScopeWith(partitionable), withdrawn);
  if (config_.order == PublishOrder::kIndex) {
    plan.ordered = dra::OrderForFirstFit(std::move(offers), shape, effective, nullptr);
  } else {
    topology::SlotCosts costs;
    {
      MutexLock lock(demand_mu_);
      costs = dra::NodeLocalCosts(demand_, shape, effective);
    }
    plan.ordered = dra::OrderForFirstFit(std::move(offers), shape, effective, &costs);
  }
  // Digests over the slices at generation 0: the generation alone never makes a change.
  const auto slices =
      dra::BuildSlices(config_.facts, shape, plan.ordered,
                       dra::SliceOptions{partitionable, 0, plan.tainted, config_.failure_effect});
  const std::string counter_prefix = dra::SliceNamePrefix(config_.facts.node_name) + "-zc-";
  for (const dra::ResourceSliceObject& slice : slices) {
    plan.entries.push_back(
        {slice.name, Digest(slice.json), slice.name.starts_with(counter_prefix)});
  }
  std::stable_partition(plan.entries.begin(), plan.entries.end(),
                        [](const Plan::Entry& e) { return e.counters; });
  return plan;
}

Status SlicePublisher::Publish(topology::DeviceMask withheld, const dra::DeviceFaults& faults,
                               const topology::NodeUsage& usage) {
  MutexLock lock(mu_);
  Status status = PublishLocked(withheld, faults, usage);
  if (!status.ok()) known_.reset();  // the next call starts from a fresh read
  return status;
}

Status SlicePublisher::PublishLocked(topology::DeviceMask withheld, const dra::DeviceFaults& faults,
                                     const topology::NodeUsage& usage) {
  const bool want_counters = !decided_ || partitionable_;
  // A failed device's offers: tainted where the cluster serves taints, else withdrawn (a device
  // also withheld for another reason stays withdrawn).
  topology::DeviceMask withdrawn = withheld;
  dra::DeviceFaults tainted;
  if (!faults.empty()) {
    const bool taints = TaintsServedLocked();
    for (const auto& [device, fault] : faults) {
      if (device < 0 || device >= config_.shape.devices) continue;
      const topology::DeviceMask bit = topology::DeviceMask{1} << device;
      if (taints && (withheld & bit) == 0) {
        tainted.emplace(device, fault);
      } else {
        withdrawn |= bit;
      }
    }
  }
  Plan plan = MakePlan(want_counters, withdrawn, std::move(tainted), usage);
  if (!known_.has_value()) TOPOSCHED_RETURN_IF_ERROR(ReadSlicesLocked());

  // Unchanged: the same names with the same digests, all at one generation.
  bool unchanged = known_->size() == plan.entries.size();
  int64_t highest = 0;
  for (const auto& [name, slice] : *known_) highest = std::max(highest, slice.generation);
  for (const Plan::Entry& entry : plan.entries) {
    auto it = known_->find(entry.name);
    if (it == known_->end() || it->second.digest != entry.digest ||
        it->second.generation != highest) {
      unchanged = false;
      break;
    }
  }
  // Undecided, the counter slice must be seen to carry its counters.
  const Plan::Entry* probe = !decided_ && !plan.entries.empty() && plan.entries.front().counters
                                 ? &plan.entries.front()
                                 : nullptr;
  if (unchanged && probe != nullptr) {
    if (known_->at(probe->name).has_shared_counters) {
      decided_ = true;
      partitionable_ = true;
      spdlog::info(
          "DRA publisher: ResourceSlice {} keeps spec.sharedCounters: publishing "
          "device sets and core ranges beside whole devices",
          probe->name);
    } else {
      unchanged = false;
    }
  }
  if (unchanged) {
    generation_ = highest;
    return OkStatus();
  }

  const int64_t generation = highest + 1;
  const auto slices = dra::BuildSlices(
      config_.facts, config_.shape, plan.ordered,
      dra::SliceOptions{plan.partitionable, generation, plan.tainted, config_.failure_effect});
  std::map<std::string, const dra::ResourceSliceObject*> by_name;
  for (const dra::ResourceSliceObject& slice : slices) by_name[slice.name] = &slice;
  int written = 0;
  for (const Plan::Entry& entry : plan.entries) {
    TOPOSCHED_ASSIGN_OR_RETURN(
        kube::HttpResponse answer,
        WriteSliceLocked(entry.name, by_name.at(entry.name)->json, entry.digest));
    const bool refused = answer.status == 400 || answer.status == 422;
    if (entry.counters && !decided_) {
      // An API server with DRAPartitionableDevices off drops the field; one that does not know
      // it refuses the object (strict decoding, validation): either way, no counters here.
      const bool kept = Is2xx(answer.status) && known_->at(entry.name).has_shared_counters;
      if (Is2xx(answer.status) || refused) {
        decided_ = true;
        partitionable_ = kept;
        if (kept) {
          spdlog::info(
              "DRA publisher: ResourceSlice {} keeps spec.sharedCounters: publishing "
              "device sets and core ranges beside whole devices",
              entry.name);
        } else {
          spdlog::info(
              "DRA publisher: the API server {} spec.sharedCounters of ResourceSlice {} "
              "(DRAPartitionableDevices off?): publishing whole devices only",
              refused
                  ? fmt::format("refused ({}: {})", answer.status, kube::StatusMessage(answer.body))
                  : std::string("dropped"),
              entry.name);
          if (Is2xx(answer.status)) TOPOSCHED_RETURN_IF_ERROR(DeleteSliceLocked(entry.name));
          return PublishLocked(withheld, faults, usage);  // decided now: whole devices
        }
      }
    } else if (entry.counters && partitionable_ && Is2xx(answer.status) &&
               !known_->at(entry.name).has_shared_counters) {
      return Error{
          fmt::format("ResourceSlice {}: the API server dropped spec.sharedCounters "
                      "(is the DRAPartitionableDevices feature gate off?); run with "
                      "--partitionable auto or off",
                      entry.name)};
    }
    if (!Is2xx(answer.status)) {
      return WriteError(known_->count(entry.name) != 0 ? "updating" : "creating", entry.name,
                        answer);
    }
    ++written;
  }
  // Last, what the plan no longer has: its generation is older, so no consumer counts it now.
  std::vector<std::string> stale;
  for (const auto& [name, slice] : *known_) {
    if (!by_name.contains(name)) stale.push_back(name);
  }
  for (const std::string& name : stale) TOPOSCHED_RETURN_IF_ERROR(DeleteSliceLocked(name));
  generation_ = generation;
  spdlog::debug(
      "DRA publisher: node {} publishes {} offers in {} ResourceSlices at generation "
      "{} ({} written, {} deleted)",
      config_.facts.node_name, plan.ordered.size(), slices.size(), generation, written,
      stale.size());
  return OkStatus();
}

Status SlicePublisher::ReadSlicesLocked() {
  const std::string selector =
      fmt::format("spec.nodeName={},spec.driver={}", config_.facts.node_name, dra::kDriverName);
  std::map<std::string, KnownSlice> slices;
  std::string continue_token;
  do {
    std::string path = fmt::format("{}?fieldSelector={}&limit={}", kSlicesPath,
                                   kube::EscapeUrlComponent(selector), kListPageSize);
    if (!continue_token.empty()) {
      path += "&continue=" + kube::EscapeUrlComponent(continue_token);
    }
    TOPOSCHED_ASSIGN_OR_RETURN(kube::HttpResponse answer, api_.Get(path));
    if (answer.status != 200) {
      return Error{fmt::format("listing the ResourceSlices of node {}: HTTP {}: {}",
                               config_.facts.node_name, answer.status,
                               kube::StatusMessage(answer.body))};
    }
    std::vector<KnownSlice> items;
    continue_token.clear();
    Status parsed = ParseSlicePage(answer.body, items, continue_token);
    if (!parsed.ok()) {
      return Error{fmt::format("listing the ResourceSlices of node {}: {}", config_.facts.node_name,
                               parsed.error())};
    }
    for (KnownSlice& slice : items) slices[slice.name] = std::move(slice);
  } while (!continue_token.empty());
  known_ = std::move(slices);
  return OkStatus();
}

Result<kube::HttpResponse> SlicePublisher::WriteSliceLocked(const std::string& name,
                                                            const std::string& json,
                                                            const std::string& digest) {
  auto it = known_->find(name);
  std::string resource_version = it == known_->end() ? "" : it->second.resource_version;
  kube::HttpResponse answer;
  // One retry: after a 409 (someone else wrote it, or created it since our read) with the
  // object's resourceVersion read again; after a 404 on update (deleted since) as a create.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (resource_version.empty()) {
      TOPOSCHED_ASSIGN_OR_RETURN(answer, api_.Post(kSlicesPath, SpliceMetadata(json, "", digest)));
    } else {
      TOPOSCHED_ASSIGN_OR_RETURN(
          answer, api_.Put(SlicePath(name), SpliceMetadata(json, resource_version, digest)));
    }
    if (answer.status == 404 && !resource_version.empty()) {
      resource_version.clear();
      continue;
    }
    if (answer.status != 409 || attempt > 0) break;
    TOPOSCHED_ASSIGN_OR_RETURN(kube::HttpResponse current, api_.Get(SlicePath(name)));
    if (current.status == 404) {
      resource_version.clear();
      continue;
    }
    if (current.status != 200) return WriteError("reading", name, current);
    TOPOSCHED_ASSIGN_OR_RETURN(KnownSlice fresh, ParseSlice(current.body));
    spdlog::info(
        "DRA publisher: ResourceSlice {} changed under us (resourceVersion {} -> {}); "
        "writing it again",
        name, resource_version.empty() ? "none" : resource_version, fresh.resource_version);
    resource_version = fresh.resource_version;
  }
  if (Is2xx(answer.status)) {
    TOPOSCHED_ASSIGN_OR_RETURN(KnownSlice written, ParseSlice(answer.body));
    (*known_)[name] = std::move(written);
  }
  return answer;
}

Status SlicePublisher::DeleteSliceLocked(const std::string& name) {
  TOPOSCHED_ASSIGN_OR_RETURN(kube::HttpResponse answer, api_.Delete(SlicePath(name)));
  if (!Is2xx(answer.status) && answer.status != 404) return WriteError("deleting", name, answer);
  known_->erase(name);
  return OkStatus();
}

void SlicePublisher::ForgetPublished() {
  MutexLock lock(mu_);
  known_.reset();
}

Status SlicePublisher::DeleteAll() {
  MutexLock lock(mu_);
  Status status = ReadSlicesLocked();
  if (status.ok()) {
    std::vector<std::string> names;
    for (const auto& [name, slice] : *known_) names.push_back(name);
    for (const std::string& name : names) {
      status = DeleteSliceLocked(name);
      if (!status.ok()) break;
    }
  }
  if (!status.ok()) {
    known_.reset();
    return status;
  }
  spdlog::info("DRA publisher: deleted the ResourceSlices of node {}", config_.facts.node_name);
  return OkStatus();
}

}  // namespace toposched::draplugin
