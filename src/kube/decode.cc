#include "kube/decode.h"

#include <simdjson.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/json_reader.h"
#include "kube/quantity.h"

namespace toposched::kube {
namespace {

using json::ForEachElement;
using json::ForEachField;
using json::ForEachMapEntry;
using json::Path;
namespace ondemand = simdjson::ondemand;

using StringMap = std::map<std::string, std::string, std::less<>>;

// Every value must be a string; only the entries `keep` accepts are stored (null keeps all).
Status DecodeStringMap(ondemand::value& value, const Path& path, StringMap& out,
                       bool (*keep)(std::string_view) = nullptr) {
  ondemand::object object;
  bool present = false;
  Status status = json::OpenObject(value, path, object, present);
  if (!status.ok() || !present) return status;
  std::string ignored;  // checked like a kept value, then dropped; its buffer is reused
  return ForEachMapEntry(object, path,
                         [&](std::string_view key, ondemand::value& entry, const Path& at) {
                           if (keep != nullptr && !keep(key)) {
                             return json::ReadString(entry, at, ignored);
                           }
                           std::string text;
                           Status read = json::ReadString(entry, at, text);
                           if (read.ok()) out.insert_or_assign(std::string(key), std::move(text));
                           return read;
                         });
}

// The text of a quantity: the API writes strings, but Go's Quantity also accepts bare numbers.
Status ReadQuantityText(ondemand::value& value, const Path& path, std::string_view& text) {
  ondemand::json_type type;
  Status status = json::TypeOf(value, path, type);
  if (!status.ok()) return status;
  if (type == ondemand::json_type::string) {
    if (auto error = value.get_string().get(text)) return json::JsonErrorAt(path, error);
    return OkStatus();
  }
  if (type == ondemand::json_type::number) {
    text = value.raw_json_token();
    while (!text.empty() && (text.back() == ' ' || text.back() == '\n' || text.back() == '\r' ||
                             text.back() == '\t')) {
      text.remove_suffix(1);
    }
    return OkStatus();
  }
  return json::ErrorAt(path, "expected a quantity string");
}

bool IsExtendedResource(std::string_view name) { return name.find('/') != std::string_view::npos; }

// The first malformed quantity of an object; reported once the owner's name is known, because a
// container's "name" field may come after its "resources".
struct BadQuantity {
  std::string path;
  std::string detail;
  bool empty() const { return path.empty(); }
  Error Report(std::string_view owner_kind, std::string_view owner_name) const {
    return Error{path + ": " + std::string(owner_kind) + " \"" + std::string(owner_name) +
                 "\": " + detail};
  }
};

// Decodes a resource list, keeping only extended resources. A bad quantity does not stop the walk;
// it is kept in `bad_quantity`.
Status DecodeResourceCounts(ondemand::value& value, const Path& path, ResourceCounts& out,
                            BadQuantity& bad_quantity) {
  return json::ForEachMapEntryOf(
      value, path, [&](std::string_view name, ondemand::value& entry, const Path& at) {
        if (!IsExtendedResource(name)) return OkStatus();
        std::string_view text;
        Status read = ReadQuantityText(entry, at, text);
        if (!read.ok()) return read;
        Result<int64_t> count = ParseQuantity(text);
        if (!count.ok()) {
          if (bad_quantity.empty()) {
            bad_quantity = {at.ToString(), "resource " + std::string(name) + ": " + count.error()};
          }
          return OkStatus();
        }
        out.insert_or_assign(std::string(name), *count);
        return OkStatus();
      });
}

Status DecodeContainer(ondemand::value& value, const Path& path, bool is_init, Container& out) {
  ondemand::object object;
  bool present = false;
  Status status = json::OpenObject(value, path, object, present);
  if (!status.ok()) return status;
  if (!present) return json::ErrorAt(path, "expected an object, got null");
  BadQuantity bad_quantity;
  status = ForEachField(
      object, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key == "name") return json::ReadString(field, at, out.name);
        if (key == "restartPolicy" && is_init) {
          std::string policy;
          Status read = json::ReadString(field, at, policy);
          out.sidecar = policy == "Always";
          return read;
        }
        if (key != "resources") return OkStatus();
        return json::ForEachFieldOf(
            field, at,
            [&](std::string_view kind, ondemand::value& list, const Path& list_at) -> Status {
              if (kind == "requests")
                return DecodeResourceCounts(list, list_at, out.requests, bad_quantity);
              if (kind == "limits")
                return DecodeResourceCounts(list, list_at, out.limits, bad_quantity);
              return OkStatus();
            });
      });
  if (!status.ok()) return status;
  if (!bad_quantity.empty()) return bad_quantity.Report("container", out.name);
  return OkStatus();
}

Status DecodeContainers(ondemand::value& value, const Path& path, bool is_init,
                        std::vector<Container>& out) {
  return json::ForEachElementOf(value, path, [&](size_t, ondemand::value& element, const Path& at) {
    Container container;
    Status decoded = DecodeContainer(element, at, is_init, container);
    if (decoded.ok()) out.push_back(std::move(container));
    return decoded;
  });
}

Status DecodePodMetadata(ondemand::value& value, const Path& path, Pod& pod) {
  return json::ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key == "name") return json::ReadString(field, at, pod.name);
        if (key == "namespace") return json::ReadString(field, at, pod.ns);
        if (key == "uid") return json::ReadString(field, at, pod.uid);
        if (key == "resourceVersion") return json::ReadString(field, at, pod.resource_version);
        if (key == "creationTimestamp") return json::ReadString(field, at, pod.creation_timestamp);
        if (key == "deletionTimestamp") {
          std::string timestamp;
          Status read = json::ReadString(field, at, timestamp);
          pod.deleting = !timestamp.empty();
          return read;
        }
        if (key == "annotations") return DecodeStringMap(field, at, pod.annotations);
        if (key == "labels") return DecodeStringMap(field, at, pod.labels, IsPodLabelWeRead);
        return OkStatus();
      });
}

// One PodAffinityTerm, already opened: only its topologyKey is kept (an empty one is none).
Status DecodePodAffinityTerm(ondemand::object& term, const Path& path, Pod& pod) {
  return ForEachField(term, path,
                      [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
                        if (key != "topologyKey") return OkStatus();
                        std::string topology_key;
                        Status read = json::ReadString(field, at, topology_key);
                        if (read.ok() && !topology_key.empty()) {
                          pod.pod_affinity_topology_keys.push_back(std::move(topology_key));
                        }
                        return read;
                      });
}

// An array of terms: PodAffinityTerms (required) or WeightedPodAffinityTerms holding one under
// "podAffinityTerm" (preferred). A null element is an error, as in containers; a null
// podAffinityTerm is none.
Status DecodePodAffinityTerms(ondemand::value& value, const Path& path, bool weighted, Pod& pod) {
  return json::ForEachElementOf(
      value, path, [&](size_t, ondemand::value& element, const Path& at) -> Status {
        ondemand::object term;
        bool has_term = false;
        Status open = json::OpenObject(element, at, term, has_term);
        if (!open.ok()) return open;
        if (!has_term) return json::ErrorAt(at, "expected an object, got null");
        if (!weighted) return DecodePodAffinityTerm(term, at, pod);
        return ForEachField(
            term, at, [&](std::string_view key, ondemand::value& field, const Path& field_at) {
              if (key != "podAffinityTerm") return OkStatus();
              ondemand::object inner;
              bool has_inner = false;
              Status opened = json::OpenObject(field, field_at, inner, has_inner);
              if (!opened.ok() || !has_inner) return opened;
              return DecodePodAffinityTerm(inner, field_at, pod);
            });
      });
}

// spec.affinity: only podAffinity's terms (podAntiAffinity and nodeAffinity are skipped).
Status DecodeAffinity(ondemand::value& value, const Path& path, Pod& pod) {
  return json::ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key != "podAffinity") return OkStatus();
        return json::ForEachFieldOf(
            field, at,
            [&](std::string_view kind, ondemand::value& terms, const Path& terms_at) -> Status {
              if (kind == "requiredDuringSchedulingIgnoredDuringExecution") {
                return DecodePodAffinityTerms(terms, terms_at, false, pod);
              }
              if (kind == "preferredDuringSchedulingIgnoredDuringExecution") {
                return DecodePodAffinityTerms(terms, terms_at, true, pod);
              }
              return OkStatus();
            });
      });
}

// spec.schedulingGroup (1.36+): only podGroupName.
Status DecodeSchedulingGroup(ondemand::value& value, const Path& path, Pod& pod) {
  return json::ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key != "podGroupName") return OkStatus();
        return json::ReadString(field, at, pod.scheduling_group);
      });
}

// spec.workloadRef (1.35 only; replaced by schedulingGroup in 1.36).
Status DecodeWorkloadRef(ondemand::value& value, const Path& path, Pod& pod) {
  ondemand::object object;
  bool present = false;
  Status status = json::OpenObject(value, path, object, present);
  if (!status.ok() || !present) return status;
  Pod::WorkloadRef ref;
  status = ForEachField(
      object, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key == "name") return json::ReadString(field, at, ref.name);
        if (key == "podGroup") return json::ReadString(field, at, ref.pod_group);
        if (key == "podGroupReplicaKey") {
          return json::ReadString(field, at, ref.pod_group_replica_key);
        }
        return OkStatus();
      });
  if (status.ok()) pod.workload_ref = std::move(ref);
  return status;
}

Status DecodePodSpec(ondemand::value& value, const Path& path, Pod& pod) {
  return json::ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key == "nodeName") return json::ReadString(field, at, pod.node_name);
        if (key == "schedulerName") return json::ReadString(field, at, pod.scheduler_name);
        if (key == "hostname") return json::ReadString(field, at, pod.hostname);
        if (key == "subdomain") return json::ReadString(field, at, pod.subdomain);
        if (key == "affinity") return DecodeAffinity(field, at, pod);
        if (key == "schedulingGroup") return DecodeSchedulingGroup(field, at, pod);
        if (key == "workloadRef") return DecodeWorkloadRef(field, at, pod);
        if (key == "containers") return DecodeContainers(field, at, false, pod.containers);
        if (key == "initContainers") return DecodeContainers(field, at, true, pod.init_containers);
        return OkStatus();
      });
}

Status DecodePodStatus(ondemand::value& value, const Path& path, Pod& pod) {
  return json::ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key == "phase") return json::ReadString(field, at, pod.phase);
        return OkStatus();
      });
}

Status DecodePodValue(ondemand::value& value, const Path& path, Pod& pod) {
  return json::ForEachFieldOfRequired(
      value, path, "expected a Pod object, got null",
      [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key == "metadata") return DecodePodMetadata(field, at, pod);
        if (key == "spec") return DecodePodSpec(field, at, pod);
        if (key == "status") return DecodePodStatus(field, at, pod);
        return OkStatus();
      });
}

Status DecodeNodeMetadata(ondemand::value& value, const Path& path, Node& node) {
  return json::ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key == "name") return json::ReadString(field, at, node.name);
        if (key == "resourceVersion") return json::ReadString(field, at, node.resource_version);
        if (key == "labels") {
          return DecodeStringMap(field, at, node.labels, IsNodeLabelWeRead);
        }
        if (key == "annotations") return DecodeStringMap(field, at, node.annotations, IsOwnKey);
        return OkStatus();
      });
}

Status DecodeNodeValue(ondemand::value& value, const Path& path, Node& node) {
  ondemand::object object;
  bool present = false;
  Status status = json::OpenObject(value, path, object, present);
  if (!status.ok()) return status;
  if (!present) return json::ErrorAt(path, "expected a Node object, got null");
  BadQuantity bad_quantity;
  status = ForEachField(
      object, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key == "metadata") return DecodeNodeMetadata(field, at, node);
        ondemand::object part;
        bool has_part = false;
        if (key == "spec") {
          Status open = json::OpenObject(field, at, part, has_part);
          if (!open.ok() || !has_part) return open;
          return ForEachField(part, at,
                              [&](std::string_view spec_key, ondemand::value& spec_field,
                                  const Path& spec_at) -> Status {
                                if (spec_key == "unschedulable") {
                                  return json::ReadBool(spec_field, spec_at, node.unschedulable);
                                }
                                return OkStatus();
                              });
        }
        if (key == "status") {
          Status open = json::OpenObject(field, at, part, has_part);
          if (!open.ok() || !has_part) return open;
          return ForEachField(part, at,
                              [&](std::string_view status_key, ondemand::value& status_field,
                                  const Path& status_at) -> Status {
                                if (status_key == "capacity") {
                                  return DecodeResourceCounts(status_field, status_at,
                                                              node.capacity, bad_quantity);
                                }
                                if (status_key == "allocatable") {
                                  return DecodeResourceCounts(status_field, status_at,
                                                              node.allocatable, bad_quantity);
                                }
                                return OkStatus();
                              });
        }
        return OkStatus();
      });
  if (!status.ok()) return status;
  if (!bad_quantity.empty()) return bad_quantity.Report("node", node.name);
  node.instance_type = InstanceTypeFromLabels(node.labels);
  return OkStatus();
}

// Decodes a list object; `decode_item` fills one item from its value.
template <typename T, typename DecodeItem>
Status DecodeListValue(ondemand::value& value, const Path& path, ObjectList<T>& list,
                       DecodeItem&& decode_item) {
  return json::ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key == "metadata") {
          return json::ForEachFieldOf(
              field, at,
              [&](std::string_view meta_key, ondemand::value& meta_field,
                  const Path& meta_at) -> Status {
                if (meta_key == "resourceVersion") {
                  return json::ReadString(meta_field, meta_at, list.resource_version);
                }
                if (meta_key == "continue")
                  return json::ReadString(meta_field, meta_at, list.continue_token);
                return OkStatus();
              });
        }
        if (key != "items") return OkStatus();
        return json::ForEachElementOf(field, at,
                                      [&](size_t, ondemand::value& item, const Path& item_at) {
                                        T decoded;
                                        Status item_status = decode_item(item, item_at, decoded);
                                        if (item_status.ok())
                                          list.items.push_back(std::move(decoded));
                                        return item_status;
                                      });
      });
}

Status DecodeStatusObject(ondemand::value& value, const Path& path, int& code,
                          std::string& message) {
  return json::ForEachFieldOf(
      value, path, [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
        if (key == "message") return json::ReadString(field, at, message);
        if (key != "code") return OkStatus();
        int64_t value64 = 0;
        Status read = json::ReadInt64(field, at, value64);
        if (read.ok() && (value64 < 0 || value64 > 999)) {
          return json::ErrorAt(at, "expected an HTTP status code");
        }
        code = static_cast<int>(value64);
        return read;
      });
}

bool ParseEventType(std::string_view text, WatchEventType& type) {
  if (text == "ADDED") {
    type = WatchEventType::kAdded;
  } else if (text == "MODIFIED") {
    type = WatchEventType::kModified;
  } else if (text == "DELETED") {
    type = WatchEventType::kDeleted;
  } else if (text == "BOOKMARK") {
    type = WatchEventType::kBookmark;
  } else if (text == "ERROR") {
    type = WatchEventType::kError;
  } else {
    return false;
  }
  return true;
}

// Fills the event's payload from its "object" value, once the type is known.
template <typename T, typename DecodeObject>
Status DecodeEventObject(ondemand::value& value, const Path& path, WatchEvent<T>& event,
                         DecodeObject&& decode_object) {
  if (event.type == WatchEventType::kError) {
    return DecodeStatusObject(value, path, event.error_code, event.error_message);
  }
  Status status = decode_object(value, path, event.object);
  if (status.ok()) event.resource_version = event.object.resource_version;
  return status;
}

template <typename T, typename DecodeObject>
Result<WatchEvent<T>> DecodeWatchEventDocument(const simdjson::padded_string& line,
                                               DecodeObject&& decode_object) {
  WatchEvent<T> event;
  bool has_type = false;
  bool has_object = false;
  // Go writes "type" before "object"; if another writer does not, the object's raw text is
  // kept and decoded once the type is known.
  std::string deferred_object;
  Status status = json::DecodeDocument(line, [&](ondemand::value& root) -> Status {
    const Path path;
    return json::ForEachFieldOfRequired(
        root, path, "expected a watch event object, got null",
        [&](std::string_view key, ondemand::value& field, const Path& at) -> Status {
          if (key == "type") {
            std::string type_text;
            Status read = json::ReadString(field, at, type_text);
            if (!read.ok()) return read;
            if (!ParseEventType(type_text, event.type)) {
              return json::ErrorAt(at,
                                   "unknown watch event type \"" + type_text.substr(0, 40) + "\"");
            }
            has_type = true;
            return OkStatus();
          }
          if (key != "object") return OkStatus();
          has_object = true;
          if (has_type) return DecodeEventObject(field, at, event, decode_object);
          ondemand::object raw;
          bool raw_present = false;
          Status raw_open = json::OpenObject(field, at, raw, raw_present);
          if (!raw_open.ok()) return raw_open;
          if (!raw_present) return json::ErrorAt(at, "expected an object, got null");
          std::string_view text;
          if (auto error = raw.raw_json().get(text)) return json::JsonErrorAt(at, error);
          deferred_object.assign(text);
          return OkStatus();
        });
  });
  if (!status.ok()) return Error{status.error()};
  if (!has_type) return Error{"type: missing from watch event"};
  if (!has_object) return Error{"object: missing from watch event"};
  if (!deferred_object.empty()) {
    const simdjson::padded_string padded(deferred_object);
    status = json::DecodeDocument(padded, [&](ondemand::value& object) {
      return DecodeEventObject(object, Path("object"), event, decode_object);
    });
    if (!status.ok()) return Error{status.error()};
  }
  return event;
}

Status DecodePodAt(ondemand::value& value, const Path& path, Pod& pod) {
  return DecodePodValue(value, path, pod);
}
Status DecodeNodeAt(ondemand::value& value, const Path& path, Node& node) {
  return DecodeNodeValue(value, path, node);
}

template <typename T, typename DecodeItem>
Result<T> DecodeOneDocument(const simdjson::padded_string& json, DecodeItem&& decode_item) {
  T object;
  Status status = json::DecodeDocument(
      json, [&](ondemand::value& root) { return decode_item(root, Path(), object); });
  if (!status.ok()) return Error{status.error()};
  return object;
}

template <typename T, typename DecodeItem>
Result<ObjectList<T>> DecodeListDocument(const simdjson::padded_string& json,
                                         DecodeItem&& decode_item) {
  ObjectList<T> list;
  Status status = json::DecodeDocument(json, [&](ondemand::value& root) -> Status {
    const Path path;
    ondemand::json_type type;
    Status typed = json::TypeOf(root, path, type);
    if (!typed.ok()) return typed;
    if (type != ondemand::json_type::object) return json::ErrorAt(path, "expected a list object");
    return DecodeListValue<T>(root, path, list, decode_item);
  });
  if (!status.ok()) return Error{status.error()};
  return list;
}

}  // namespace

bool IsNodeLabelWeRead(std::string_view key) {
  return key == "node.kubernetes.io/instance-type" || key == "beta.kubernetes.io/instance-type" ||
         key.starts_with(kOwnKeyPrefix) || key.starts_with(kNeuronLabelPrefix);
}

bool IsOwnKey(std::string_view key) { return key.starts_with(kOwnKeyPrefix); }

bool IsPodLabelWeRead(std::string_view key) {
  return key.starts_with(kKubeflowTrainingLabelPrefix) ||
         key.starts_with(kLeaderWorkerSetLabelPrefix) || key.starts_with(kOwnKeyPrefix);
}

std::string InstanceTypeFromLabels(const std::map<std::string, std::string, std::less<>>& labels) {
  if (auto it = labels.find("node.kubernetes.io/instance-type"); it != labels.end()) {
    return it->second;
  }
  if (auto it = labels.find("beta.kubernetes.io/instance-type"); it != labels.end()) {
    return it->second;
  }
  return {};
}

Result<Pod> DecodePod(const simdjson::padded_string& json) {
  return DecodeOneDocument<Pod>(json, DecodePodAt);
}

Result<Node> DecodeNode(const simdjson::padded_string& json) {
  return DecodeOneDocument<Node>(json, DecodeNodeAt);
}

Result<ObjectList<Pod>> DecodePodList(const simdjson::padded_string& json) {
  return DecodeListDocument<Pod>(json, DecodePodAt);
}

Result<ObjectList<Node>> DecodeNodeList(const simdjson::padded_string& json) {
  return DecodeListDocument<Node>(json, DecodeNodeAt);
}

Result<WatchEvent<Pod>> DecodePodWatchEvent(const simdjson::padded_string& line) {
  return DecodeWatchEventDocument<Pod>(line, DecodePodAt);
}

Result<WatchEvent<Node>> DecodeNodeWatchEvent(const simdjson::padded_string& line) {
  return DecodeWatchEventDocument<Node>(line, DecodeNodeAt);
}

Result<Pod> DecodePod(simdjson::ondemand::value& value, std::string_view where) {
  Pod pod;
  Status status = DecodePodValue(value, Path(where), pod);
  if (!status.ok()) return Error{status.error()};
  return pod;
}

Result<Node> DecodeNode(simdjson::ondemand::value& value, std::string_view where) {
  Node node;
  Status status = DecodeNodeValue(value, Path(where), node);
  if (!status.ok()) return Error{status.error()};
  return node;
}

Result<std::vector<Node>> DecodeNodeListItems(simdjson::ondemand::value& value,
                                              std::string_view where) {
  ObjectList<Node> list;
  Status status = DecodeListValue<Node>(value, Path(where), list, DecodeNodeAt);
  if (!status.ok()) return Error{status.error()};
  return std::move(list.items);
}

}  // namespace toposched::kube
