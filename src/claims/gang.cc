#include "claims/gang.h"

#include <simdjson.h>

#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "base/json_reader.h"
#include "base/json_writer.h"
#include "base/text.h"
#include "claims/keys.h"

namespace toposched::claims {
namespace {

using StringMap = std::map<std::string, std::string, std::less<>>;
using json::Path;
namespace ondemand = simdjson::ondemand;

const std::string* Find(const StringMap& map, std::string_view key) {
  auto it = map.find(key);
  return it == map.end() ? nullptr : &it->second;
}

// A decimal integer in [min, max]: digits only (no sign, no spaces), as Kubernetes objects write
// counts in string values. `kind` is "annotation" or "label".
Result<int> ParseNumber(std::string_view kind, std::string_view key, std::string_view text, int min,
                        int max) {
  const std::optional<int64_t> value = ParseDecimal(text, min, max);
  if (!value) {
    return Error{fmt::format("{} {}: '{}' is not an integer from {} to {}", kind, key,
                             text.substr(0, 40), min, max)};
  }
  return static_cast<int>(*value);
}

Result<int> ParseNodes(std::string_view key, std::string_view text) {
  if (text != "1" && text != "2" && text != "4") {
    return Error{fmt::format("annotation {}: '{}' is not an UltraServer node config (1, 2 or 4)",
                             key, text.substr(0, 40))};
  }
  return text[0] - '0';
}

// 2 or 4 for the UltraServer group labels, else 0.
int NodesOfGroupLabel(std::string_view label) {
  if (label == kLabelUltraServerServerId2) return 2;
  if (label == kLabelUltraServerServerId4) return 4;
  return 0;
}

Status NonEmpty(std::string_view kind, std::string_view key, const std::string& value) {
  if (value.empty()) return Error{fmt::format("{} {} is empty", kind, key)};
  return OkStatus();
}

enum class Source { kAnnotation, kUpstream, kLeaderWorkerSet, kMpiJob };

// --- The gang record's JSON. ---

Error RecordError(std::string_view what) {
  return Error{fmt::format("annotation {}: {}", kAnnotationGangRecord, what)};
}

Status ReadRequiredInt(ondemand::value& value, const Path& path, int& out) {
  ondemand::json_type type;
  TOPOSCHED_RETURN_IF_ERROR(json::TypeOf(value, path, type));
  int64_t number = 0;
  if (type != ondemand::json_type::number || value.get_int64().get(number) != simdjson::SUCCESS) {
    return json::ErrorAt(path, "expected an integer");
  }
  // Every field is far below this; the bound only keeps the cast exact.
  if (number < -1 || number > kMaxGangSize) return json::ErrorAt(path, "out of range");
  out = static_cast<int>(number);
  return OkStatus();
}

Status ReadNodes(ondemand::value& value, const Path& path, std::vector<std::string>& nodes) {
  nodes.clear();
  return json::ForEachElementOfRequired(
      value, path, [&](size_t, ondemand::value& element, const Path& at) -> Status {
        if (nodes.size() >= static_cast<size_t>(kMaxGangSize)) {
          return json::ErrorAt(at, "too many nodes");
        }
        std::string node;
        TOPOSCHED_RETURN_IF_ERROR(json::ReadRequiredString(element, at, node));
        if (node.empty()) return json::ErrorAt(at, "empty node name");
        nodes.push_back(std::move(node));
        return OkStatus();
      });
}

Status CheckRecord(const GangRecord& record) {
  if (record.gang.empty()) return RecordError("empty \"gang\"");
  if (record.size < 1) return RecordError(fmt::format("size {} is below 1", record.size));
  if (record.group_nodes != 1 && record.group_nodes != 2 && record.group_nodes != 4) {
    return RecordError(fmt::format("groupNodes {} is not 1, 2 or 4", record.group_nodes));
  }
  if (record.size % record.group_nodes != 0) {
    return RecordError(
        fmt::format("size {} is not a multiple of groupNodes {}", record.size, record.group_nodes));
  }
  if (record.rank < 0 || record.rank >= record.size) {
    return RecordError(fmt::format("rank {} is not in 0..{}", record.rank, record.size - 1));
  }
  if (record.nodes.size() != static_cast<size_t>(record.size)) {
    return RecordError(
        fmt::format("{} nodes for a gang of size {}", record.nodes.size(), record.size));
  }
  if (record.group_nodes == 1) {
    if (!record.server_id.empty() || record.node_id != -1) {
      return RecordError("serverId and nodeId are set for groupNodes 1");
    }
    return OkStatus();
  }
  if (record.server_id.empty()) {
    return RecordError(fmt::format("no serverId for groupNodes {}", record.group_nodes));
  }
  if (record.node_id < 0 || record.node_id >= record.group_nodes) {
    return RecordError(
        fmt::format("nodeId {} is not in 0..{}", record.node_id, record.group_nodes - 1));
  }
  return OkStatus();
}

}  // namespace

namespace {

// Which gang the pod names: the first of our annotation, upstream's PodGroup or Workload,
// LeaderWorkerSet's labels or an MPIJob worker's that it carries (`source` says which). nullopt
// when it names none, or is an MPIJob's launcher; an error when our gang keys are set without a
// gang.
Result<std::optional<GangMembership>> IdentifyGang(const kube::Pod& pod, Source& source) {
  const StringMap& notes = pod.annotations;
  const StringMap& labels = pod.labels;
  GangMembership gang;
  source = Source::kAnnotation;
  if (const std::string* name = Find(notes, kAnnotationGang)) {
    TOPOSCHED_RETURN_IF_ERROR(NonEmpty("annotation", kAnnotationGang, *name));
    gang.id = fmt::format("{}/gang:{}", pod.ns, *name);
    gang.source = kAnnotationGang;
  } else if (!pod.scheduling_group.empty()) {
    gang.id = fmt::format("{}/podgroup:{}", pod.ns, pod.scheduling_group);
    gang.source = "PodGroup";
    gang.job_name = pod.scheduling_group;
    source = Source::kUpstream;
  } else if (pod.workload_ref) {
    const kube::Pod::WorkloadRef& ref = *pod.workload_ref;
    if (ref.name.empty() || ref.pod_group.empty()) {
      return Error{
          fmt::format("spec.workloadRef: {} is empty", ref.name.empty() ? "name" : "podGroup")};
    }
    // Each replica key is its own group of the pod group's size (upstream's rule).
    gang.id = fmt::format("{}/workload:{}/{}", pod.ns, ref.name, ref.pod_group);
    if (!ref.pod_group_replica_key.empty()) gang.id += "/" + ref.pod_group_replica_key;
    gang.source = "Workload";
    gang.job_name = ref.name;
    gang.pod_group = ref.pod_group;
    source = Source::kUpstream;
  } else if (const std::string* lws = Find(labels, kLabelLwsName),
             *group = Find(labels, kLabelLwsGroupIndex);
             lws != nullptr || group != nullptr) {
    if (lws == nullptr || group == nullptr) {
      return Error{fmt::format("label {} is set without {}",
                               lws == nullptr ? kLabelLwsGroupIndex : kLabelLwsName,
                               lws == nullptr ? kLabelLwsName : kLabelLwsGroupIndex)};
    }
    TOPOSCHED_RETURN_IF_ERROR(NonEmpty("label", kLabelLwsName, *lws));
    // Not parsed as a number: it only names the group (LWS's hash identity mode puts a key here).
    TOPOSCHED_RETURN_IF_ERROR(NonEmpty("label", kLabelLwsGroupIndex, *group));
    gang.id = fmt::format("{}/lws:{}/{}", pod.ns, *lws, *group);
    gang.source = "LeaderWorkerSet";
    source = Source::kLeaderWorkerSet;
  } else if (const std::string* job = Find(labels, kLabelMpiJobName)) {
    // The launcher (and any other role) is not one of the ranks.
    const std::string* role = Find(labels, kLabelMpiJobRole);
    if (role == nullptr || *role != kMpiJobRoleWorker) return std::optional<GangMembership>{};
    TOPOSCHED_RETURN_IF_ERROR(NonEmpty("label", kLabelMpiJobName, *job));
    gang.id = fmt::format("{}/mpijob:{}", pod.ns, *job);
    gang.source = "MPIJob";
    gang.job_name = *job;
    source = Source::kMpiJob;
  } else {
    // Our gang keys without a gang would schedule the pod alone, which its author did not mean.
    for (std::string_view key :
         {kAnnotationGangSize, kAnnotationUltraServerNodes, kAnnotationGangRank}) {
      if (notes.count(key) > 0) {
        return Error{fmt::format(
            "annotation {} is set, but the pod names no gang (annotation {}, "
            "spec.schedulingGroup, spec.workloadRef, LeaderWorkerSet labels, or MPIJob worker "
            "labels)",
            key, kAnnotationGang)};
      }
    }
    return std::optional<GangMembership>{};
  }
  return std::optional<GangMembership>(std::move(gang));
}

}  // namespace

Result<std::optional<GangMembership>> GangOf(const kube::Pod& pod) {
  const StringMap& notes = pod.annotations;
  const StringMap& labels = pod.labels;
  Source source = Source::kAnnotation;
  TOPOSCHED_ASSIGN_OR_RETURN(std::optional<GangMembership> found, IdentifyGang(pod, source));
  if (!found) return found;
  GangMembership& gang = *found;
  const bool lws = source == Source::kLeaderWorkerSet;

  std::string_view size_key;
  if (const std::string* text = Find(notes, kAnnotationGangSize)) {
    TOPOSCHED_ASSIGN_OR_RETURN(
        gang.size, ParseNumber("annotation", kAnnotationGangSize, *text, 1, kMaxGangSize));
    size_key = kAnnotationGangSize;
  }
  if (const std::string* text = lws ? Find(notes, kAnnotationLwsSize) : nullptr) {
    TOPOSCHED_ASSIGN_OR_RETURN(
        gang.size, ParseNumber("annotation", kAnnotationLwsSize, *text, 1, kMaxGangSize));
    size_key = kAnnotationLwsSize;  // the job's own size wins
  }

  std::string nodes_from;
  if (const std::string* text = Find(notes, kAnnotationUltraServerNodes)) {
    TOPOSCHED_ASSIGN_OR_RETURN(gang.group_nodes, ParseNodes(kAnnotationUltraServerNodes, *text));
    nodes_from = fmt::format("annotation {}", kAnnotationUltraServerNodes);
  } else if (const std::string* topology =
                 lws ? Find(notes, kAnnotationLwsExclusiveTopology) : nullptr;
             topology != nullptr && NodesOfGroupLabel(*topology) > 0) {
    gang.group_nodes = NodesOfGroupLabel(*topology);
    nodes_from = fmt::format("annotation {} {}", kAnnotationLwsExclusiveTopology, *topology);
  } else {
    for (const std::string& key : pod.pod_affinity_topology_keys) {
      if (NodesOfGroupLabel(key) == 0) continue;
      gang.group_nodes = NodesOfGroupLabel(key);
      nodes_from = fmt::format("pod affinity topologyKey {}", key);
      break;
    }
  }

  std::string_view index_key;
  std::string_view index_kind = "label";
  const std::string* index_text = nullptr;
  if ((index_text = Find(notes, kAnnotationGangRank)) != nullptr) {
    index_key = kAnnotationGangRank;
    index_kind = "annotation";
  } else if (lws && (index_text = Find(labels, kLabelLwsWorkerIndex)) != nullptr) {
    index_key = kLabelLwsWorkerIndex;
  } else if (source == Source::kMpiJob &&
             (index_text = Find(labels, kLabelMpiReplicaIndex)) != nullptr) {
    index_key = kLabelMpiReplicaIndex;
  }
  if (index_text != nullptr) {
    TOPOSCHED_ASSIGN_OR_RETURN(
        gang.index, ParseNumber(index_kind, index_key, *index_text, 0, kMaxGangSize - 1));
  }

  if (gang.size > 0 && gang.size % gang.group_nodes != 0) {
    return Error{fmt::format(
        "gang {}: size {} (annotation {}) is not a multiple of its {} UltraServer nodes ({})",
        gang.id, gang.size, size_key, gang.group_nodes, nodes_from)};
  }
  if (gang.size > 0 && gang.index >= gang.size) {
    return Error{fmt::format("gang {}: {} {} is {}, but the gang has {} members (annotation {})",
                             gang.id, index_kind, index_key, gang.index, gang.size, size_key)};
  }
  return found;
}

std::string EncodeGangRecord(const GangRecord& record) {
  return WriteJson({{"gang", record.gang},
                    {"size", record.size},
                    {"groupNodes", record.group_nodes},
                    {"rank", record.rank},
                    {"nodes", JsonTree(record.nodes)},
                    {"serverId", record.server_id},
                    {"nodeId", record.node_id},
                    {"rank0Host", record.rank0_host}});
}

Result<GangRecord> DecodeGangRecord(std::string_view text) {
  GangRecord record;
  bool has_gang = false;
  bool has_size = false;
  bool has_group_nodes = false;
  bool has_rank = false;
  bool has_nodes = false;
  const simdjson::padded_string padded(text);
  Status status = json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    const Path path;
    return json::ForEachFieldOfRequired(
        root, path, "expected an object",
        [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
          if (key == "gang") {
            has_gang = true;
            return json::ReadRequiredString(field, at, record.gang);
          }
          if (key == "size") {
            has_size = true;
            return ReadRequiredInt(field, at, record.size);
          }
          if (key == "groupNodes") {
            has_group_nodes = true;
            return ReadRequiredInt(field, at, record.group_nodes);
          }
          if (key == "rank") {
            has_rank = true;
            return ReadRequiredInt(field, at, record.rank);
          }
          if (key == "nodes") {
            has_nodes = true;
            return ReadNodes(field, at, record.nodes);
          }
          if (key == "serverId") return json::ReadRequiredString(field, at, record.server_id);
          if (key == "nodeId") return ReadRequiredInt(field, at, record.node_id);
          if (key == "rank0Host") return json::ReadRequiredString(field, at, record.rank0_host);
          return OkStatus();  // a newer writer's field
        });
  });
  if (!status.ok()) return RecordError(status.error());
  for (const auto& [has, name] : {std::pair{has_gang, "gang"}, std::pair{has_size, "size"},
                                  std::pair{has_group_nodes, "groupNodes"},
                                  std::pair{has_rank, "rank"}, std::pair{has_nodes, "nodes"}}) {
    if (!has) return RecordError(fmt::format("missing \"{}\"", name));
  }
  TOPOSCHED_RETURN_IF_ERROR(CheckRecord(record));
  return record;
}

int UltraServerModeFor(int group_nodes) {
  switch (group_nodes) {
    case 4:
      return 1;  // X4
    case 2:
      return 3;  // X2V: AWS's init script prefers it to X2H (2)
    case 1:
      return 4;  // X1
    default:
      return 0;  // unset
  }
}

std::map<std::string, std::string> GangEnv(const GangRecord& record) {
  std::map<std::string, std::string> env;
  env[std::string(kEnvUltraServerMode)] = std::to_string(UltraServerModeFor(record.group_nodes));
  if (!record.server_id.empty()) env[std::string(kEnvUltraServerServerId)] = record.server_id;
  if (record.node_id >= 0) env[std::string(kEnvUltraServerNodeId)] = std::to_string(record.node_id);
  env[std::string(kEnvGlobalTopoId)] = std::to_string(record.rank);
  if (!record.rank0_host.empty()) env[std::string(kEnvGlobalTopoId0Host)] = record.rank0_host;
  return env;
}

Result<std::optional<GangRecord>> GangRecordOf(const kube::Pod& pod) {
  const auto it = pod.annotations.find(kAnnotationGangRecord);
  if (it == pod.annotations.end()) return std::optional<GangRecord>();
  TOPOSCHED_ASSIGN_OR_RETURN(auto record, DecodeGangRecord(it->second));
  return std::optional<GangRecord>(std::move(record));
}

std::string PodHostName(const kube::Pod& pod) {
  if (pod.subdomain.empty() || pod.ns.empty()) return "";
  const std::string& host = pod.hostname.empty() ? pod.name : pod.hostname;
  if (host.empty()) return "";
  return fmt::format("{}.{}.{}.svc", host, pod.subdomain, pod.ns);
}

}  // namespace toposched::claims
