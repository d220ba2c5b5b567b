#include "extender/protocol.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "base/json_escape.h"
#include "base/json_reader.h"
#include "base/json_writer.h"
#include "kube/decode.h"

namespace toposched::extender {
namespace {

namespace ondemand = simdjson::ondemand;
using json::Path;
using simdjson::ondemand::value;

// Go's encoding/json matches keys case-insensitively; kube-scheduler sends the exact names.
bool KeyIs(std::string_view key, std::string_view name) {
  if (key.size() != name.size()) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    char a = key[i];
    char b = name[i];
    if (a >= 'A' && a <= 'Z') a = static_cast<char>(a - 'A' + 'a');
    if (b >= 'A' && b <= 'Z') b = static_cast<char>(b - 'A' + 'a');
    if (a != b) return false;
  }
  return true;
}

// Decodes `body` (one JSON object) with the thread's parser, calling on_field(key, value, path)
// -> Status for each top-level field.
template <typename Fn>
Status ForEachTopField(simdjson::padded_string_view body, Fn&& on_field) {
  return json::DecodeDocument(body, [&](value& root) -> Status {
    const Path path;
    ondemand::object object;
    bool present = false;
    if (auto s = json::OpenObject(root, path, object, present); !s.ok()) return s;
    if (!present) return json::ErrorAt(path, "expected an object, got null");
    return json::ForEachField(object, path, on_field);
  });
}

Status IsNull(value& v, const Path& path, bool& null) {
  ondemand::json_type type;
  if (auto s = json::TypeOf(v, path, type); !s.ok()) return s;
  null = type == ondemand::json_type::null;
  return OkStatus();
}

Status ReadStringArray(value& v, const Path& path, std::vector<std::string>& out) {
  ondemand::array array;
  bool present = false;
  if (Status s = json::OpenArray(v, path, array, present); !s.ok() || !present) return s;
  // Sized once (kube-scheduler sends up to thousands of names): no regrowth moves every name so
  // far, and no large request in between makes glibc's malloc merge its small free chunks. At
  // most a 100,000-node cluster's worth up front: a hostile array of numbers must not make a
  // body of bytes reserve a string per element before its first element is refused.
  constexpr size_t kReservedAtMost = 100'000;
  size_t count = 0;
  if (auto error = array.count_elements().get(count)) return json::JsonErrorAt(path, error);
  out.reserve(std::min(count, kReservedAtMost));
  return json::ForEachElement(array, path, [&](size_t, value& item, const Path& at) -> Status {
    return json::ReadString(item, at, out.emplace_back());
  });
}

Status ReadPod(value& v, const Path& path, kube::Pod& pod, bool& seen) {
  bool null = false;
  if (auto s = IsNull(v, path, null); !s.ok() || null) return s;
  auto decoded = kube::DecodePod(v);
  if (!decoded.ok()) return json::ErrorAt(path, decoded.error());
  pod = std::move(decoded).value();
  seen = true;
  return OkStatus();
}

// A victim pod's UID: a MetaPod {"UID":...} or a full Pod's metadata.uid.
Status ReadVictimUid(value& v, const Path& path, std::string& uid) {
  ondemand::object pod;
  bool present = false;
  if (auto s = json::OpenObject(v, path, pod, present); !s.ok()) return s;
  if (!present) return json::ErrorAt(path, "expected an object, got null");
  return json::ForEachField(
      pod, path, [&](std::string_view key, value& field, const Path& at) -> Status {
        if (KeyIs(key, "UID")) return json::ReadString(field, at, uid);  // MetaPod
        if (key != "metadata") return OkStatus();                        // full Pod
        return json::ForEachFieldOf(
            field, at,
            [&](std::string_view meta_key, value& meta_field, const Path& meta_at) -> Status {
              if (meta_key != "uid") return OkStatus();
              return json::ReadString(meta_field, meta_at, uid);
            });
      });
}

// Victims or MetaVictims: {"Pods":[...], "NumPDBViolations":N}; pods are full Pod objects or
// MetaPods {"UID":...}. Either way only the UID matters.
Status ReadVictims(value& v, std::string_view node, Victims& out) {
  const std::string where = fmt::format("victims of node {}", node);
  const Path path(where);
  return json::ForEachFieldOf(
      v, path, [&](std::string_view key, value& field, const Path& at) -> Status {
        if (KeyIs(key, "NumPDBViolations"))
          return json::ReadInt64(field, at, out.num_pdb_violations);
        if (!KeyIs(key, "Pods")) return OkStatus();
        return json::ForEachElementOf(field, at,
                                      [&](size_t, value& item, const Path& item_at) -> Status {
                                        std::string uid;
                                        if (auto s = ReadVictimUid(item, item_at, uid); !s.ok())
                                          return s;
                                        if (uid.empty())
                                          return json::ErrorAt(path, "a victim pod has no UID");
                                        out.pod_uids.push_back(std::move(uid));
                                        return OkStatus();
                                      });
      });
}

Status ReadVictimMap(value& v, const Path& path, std::map<std::string, Victims>& out) {
  return json::ForEachMapEntryOf(v, path,
                                 [&](std::string_view node, value& entry, const Path&) -> Status {
                                   Victims victims;
                                   if (auto s = ReadVictims(entry, node, victims); !s.ok())
                                     return s;
                                   out[std::string(node)] = std::move(victims);
                                   return OkStatus();
                                 });
}

void AppendStringMap(std::string& out, const std::map<std::string, std::string>& m) {
  out += '{';
  bool first = true;
  for (const auto& [k, v] : m) {
    if (!first) out += ',';
    first = false;
    AppendJsonQuoted(out, k);
    out += ':';
    AppendJsonQuoted(out, v);
  }
  out += '}';
}

}  // namespace

const std::vector<std::string>& ExtenderArgs::CandidateNames() const {
  if (node_names) return *node_names;
  if (names_from_nodes_.empty() && nodes) {
    names_from_nodes_.reserve(nodes->size());
    for (const auto& n : *nodes) names_from_nodes_.push_back(n.name);
  }
  return names_from_nodes_;
}

Result<ExtenderArgs> DecodeExtenderArgs(simdjson::padded_string_view body) {
  ExtenderArgs args;
  bool saw_pod = false;
  auto status =
      ForEachTopField(body, [&](std::string_view key, value& v, const Path& at) -> Status {
        if (KeyIs(key, "Pod")) return ReadPod(v, at, args.pod, saw_pod);
        if (KeyIs(key, "NodeNames")) {
          bool null = false;
          if (auto s = IsNull(v, at, null); !s.ok() || null) return s;
          std::vector<std::string> names;
          if (auto s = ReadStringArray(v, at, names); !s.ok()) return s;
          args.node_names = std::move(names);
          return OkStatus();
        }
        if (KeyIs(key, "Nodes")) {
          bool null = false;
          if (auto s = IsNull(v, at, null); !s.ok() || null) return s;
          auto nodes = kube::DecodeNodeListItems(v);
          if (!nodes.ok()) return json::ErrorAt(at, nodes.error());
          args.nodes = std::move(nodes).value();
          return OkStatus();
        }
        return OkStatus();  // unknown keys are ignored, as Go does
      });
  if (!status.ok()) return Error{status.error()};
  if (!saw_pod) return Error{"ExtenderArgs has no Pod"};
  if (!args.node_names && !args.nodes) return Error{"ExtenderArgs has neither NodeNames nor Nodes"};
  return args;
}

Result<BindingArgs> DecodeBindingArgs(simdjson::padded_string_view body) {
  BindingArgs args;
  auto status =
      ForEachTopField(body, [&](std::string_view key, value& v, const Path& at) -> Status {
        if (KeyIs(key, "PodName")) return json::ReadString(v, at, args.pod_name);
        if (KeyIs(key, "PodNamespace")) return json::ReadString(v, at, args.pod_namespace);
        if (KeyIs(key, "PodUID")) return json::ReadString(v, at, args.pod_uid);
        if (KeyIs(key, "Node")) return json::ReadString(v, at, args.node);
        return OkStatus();
      });
  if (!status.ok()) return Error{status.error()};
  if (args.pod_name.empty() || args.pod_namespace.empty() || args.pod_uid.empty() ||
      args.node.empty()) {
    return Error{"ExtenderBindingArgs needs PodName, PodNamespace, PodUID and Node"};
  }
  return args;
}

Result<PreemptionArgs> DecodePreemptionArgs(simdjson::padded_string_view body) {
  PreemptionArgs args;
  bool saw_pod = false;
  auto status =
      ForEachTopField(body, [&](std::string_view key, value& v, const Path& at) -> Status {
        if (KeyIs(key, "Pod")) return ReadPod(v, at, args.pod, saw_pod);
        if (KeyIs(key, "NodeNameToMetaVictims") || KeyIs(key, "NodeNameToVictims")) {
          return ReadVictimMap(v, at, args.node_victims);
        }
        return OkStatus();
      });
  if (!status.ok()) return Error{status.error()};
  if (!saw_pod) return Error{"ExtenderPreemptionArgs has no Pod"};
  return args;
}

std::string EncodeFilterResult(const FilterResult& r) {
  std::string out;
  out.reserve(64 + r.passed.size() * 24 + (r.failed.size() + r.failed_unresolvable.size()) * 96);
  if (r.node_names_form) {
    out += "{\"Nodes\":null,\"NodeNames\":[";
    for (size_t i = 0; i < r.passed.size(); ++i) {
      if (i != 0) out += ',';
      AppendJsonQuoted(out, r.passed[i]);
    }
    out += "]";
  } else {
    // Each item carries only metadata.name instead of echoing megabytes of Node JSON.
    // kube-scheduler (1.20, pkg/scheduler/core/extender.go) passes these objects as they are to
    // later extenders and to prioritize: the service ignores them as a source of node facts
    // (ExtenderService::LearnNode), and looks nodes up by name.
    out += "{\"Nodes\":{\"metadata\":{},\"items\":[";
    for (size_t i = 0; i < r.passed.size(); ++i) {
      if (i != 0) out += ',';
      out += "{\"metadata\":{\"name\":";
      AppendJsonQuoted(out, r.passed[i]);
      out += "}}";
    }
    out += "]},\"NodeNames\":null";
  }
  out += ",\"FailedNodes\":";
  if (r.failed_unresolvable.empty()) {
    AppendStringMap(out, r.failed);
  } else {
    // Unresolvable nodes are listed in FailedNodes too. kube-scheduler before 1.22 knows no
    // FailedAndUnresolvableNodes: it drops a node named only there without its reason, so the
    // pod's event lost e.g. AWS's "does not support requests for device: 7" text (seen with a
    // real 1.20.2, test/e2e/rules.sh). Newer ones let FailedAndUnresolvableNodes take precedence
    // for a node in both maps.
    std::map<std::string, std::string> failed = r.failed;
    failed.insert(r.failed_unresolvable.begin(), r.failed_unresolvable.end());
    AppendStringMap(out, failed);
  }
  out += ",\"FailedAndUnresolvableNodes\":";
  AppendStringMap(out, r.failed_unresolvable);
  out += ",\"Error\":";
  out += JsonQuote(r.error);
  out += '}';
  return out;
}

std::string EncodeFilterError(std::string_view message) {
  return WriteJson({{"Nodes", nullptr},
                    {"NodeNames", nullptr},
                    {"FailedNodes", JsonTree::object()},
                    {"FailedAndUnresolvableNodes", JsonTree::object()},
                    {"Error", message}});
}

std::string EncodeErrorAnswer(std::string_view message) { return WriteJson({{"Error", message}}); }

std::string EncodeHostPriorityList(const std::vector<HostPriority>& priorities) {
  std::string out = "[";
  out.reserve(priorities.size() * 48 + 2);
  char score[24];
  for (size_t i = 0; i < priorities.size(); ++i) {
    if (i != 0) out += ',';
    out += "{\"Host\":";
    AppendJsonQuoted(out, priorities[i].host);
    out += ",\"Score\":";
    const auto [end, ec] = std::to_chars(score, score + sizeof(score), priorities[i].score);
    out.append(score, end);
    out += '}';
  }
  out += ']';
  return out;
}

std::string EncodeBindingResult(std::string_view error) {
  return fmt::format("{{\"Error\":{}}}", JsonQuote(error));
}

std::string EncodePreemptionResult(const std::map<std::string, Victims>& node_victims) {
  JsonTree by_node = JsonTree::object();
  for (const auto& [node, victims] : node_victims) {
    JsonTree pods = JsonTree::array();
    for (const std::string& uid : victims.pod_uids) pods.push_back({{"UID", uid}});
    by_node[node] = {{"Pods", std::move(pods)}, {"NumPDBViolations", victims.num_pdb_violations}};
  }
  return WriteJson({{"NodeNameToMetaVictims", std::move(by_node)}});
}

}  // namespace toposched::extender
