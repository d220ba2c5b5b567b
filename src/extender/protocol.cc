#include "extender/protocol.h"

#include <charconv>

#include <fmt/format.h>

#include "base/json_escape.h"
#include "kube/decode.h"

namespace toposched::extender {
namespace {

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

Error JsonError(std::string_view where, simdjson::error_code code) {
  return Error{fmt::format("{}: {}", where, simdjson::error_message(code))};
}

// Iterates the top-level object, calling on_field(key, value) -> Status for each field.
template <typename Fn>
Status ForEachField(simdjson::padded_string_view body, simdjson::ondemand::parser& parser,
                    Fn&& on_field) {
  simdjson::ondemand::document doc;
  if (auto err = parser.iterate(body).get(doc)) return JsonError("request body", err);
  simdjson::ondemand::object root;
  if (auto err = doc.get_object().get(root)) return JsonError("request body", err);
  for (auto field : root) {
    std::string_view key;
    if (auto err = field.unescaped_key().get(key)) return JsonError("request body", err);
    value v;
    if (auto err = field.value().get(v)) return JsonError(key, err);
    if (auto status = on_field(key, v); !status.ok()) return status;
  }
  return OkStatus();
}

Result<bool> IsNull(value& v, std::string_view where) {
  bool null = false;
  if (auto err = v.is_null().get(null)) return JsonError(where, err);
  return null;
}

Status ReadString(value& v, std::string_view where, std::string& out) {
  std::string_view s;
  if (auto err = v.get_string().get(s)) return JsonError(where, err);
  out.assign(s);
  return OkStatus();
}

Result<std::vector<std::string>> ReadStringArray(value& v, std::string_view where) {
  std::vector<std::string> out;
  simdjson::ondemand::array array;
  if (auto err = v.get_array().get(array)) return JsonError(where, err);
  for (auto item : array) {
    std::string_view s;
    if (auto err = item.get_string().get(s)) return JsonError(where, err);
    out.emplace_back(s);
  }
  return out;
}

Status ReadPod(value& v, kube::Pod& pod, bool& seen) {
  auto null = IsNull(v, "Pod");
  if (!null.ok()) return Error{null.error()};
  if (*null) return OkStatus();
  auto decoded = kube::DecodePod(v);
  if (!decoded.ok()) return Error{"Pod: " + decoded.error()};
  pod = std::move(decoded).value();
  seen = true;
  return OkStatus();
}

// Victims or MetaVictims: {"Pods":[...], "NumPDBViolations":N}; pods are full Pod objects or
// MetaPods {"UID":...}. Either way only the UID matters.
Status ReadVictims(value& v, std::string_view node, Victims& out) {
  const std::string where = fmt::format("victims of node {}", node);
  simdjson::ondemand::object obj;
  if (auto err = v.get_object().get(obj)) return JsonError(where, err);
  for (auto field : obj) {
    std::string_view key;
    if (auto err = field.unescaped_key().get(key)) return JsonError(where, err);
    value fv;
    if (auto err = field.value().get(fv)) return JsonError(where, err);
    if (KeyIs(key, "NumPDBViolations")) {
      if (auto err = fv.get_int64().get(out.num_pdb_violations)) return JsonError(where, err);
    } else if (KeyIs(key, "Pods")) {
      auto null = IsNull(fv, where);
      if (!null.ok()) return Error{null.error()};
      if (*null) continue;
      simdjson::ondemand::array pods;
      if (auto err = fv.get_array().get(pods)) return JsonError(where, err);
      for (auto item : pods) {
        simdjson::ondemand::object pod;
        if (auto err = item.get_object().get(pod)) return JsonError(where, err);
        std::string uid;
        for (auto pf : pod) {
          std::string_view pkey;
          if (auto err = pf.unescaped_key().get(pkey)) return JsonError(where, err);
          value pv;
          if (auto err = pf.value().get(pv)) return JsonError(where, err);
          if (KeyIs(pkey, "UID")) {  // MetaPod
            if (auto s = ReadString(pv, where, uid); !s.ok()) return s;
          } else if (pkey == "metadata") {  // full Pod
            simdjson::ondemand::object meta;
            if (auto err = pv.get_object().get(meta)) return JsonError(where, err);
            for (auto mf : meta) {
              std::string_view mkey;
              if (auto err = mf.unescaped_key().get(mkey)) return JsonError(where, err);
              if (mkey != "uid") continue;
              value mv;
              if (auto err = mf.value().get(mv)) return JsonError(where, err);
              if (auto s = ReadString(mv, where, uid); !s.ok()) return s;
            }
          }
        }
        if (uid.empty()) return Error{fmt::format("{}: a victim pod has no UID", where)};
        out.pod_uids.push_back(std::move(uid));
      }
    }
  }
  return OkStatus();
}

Status ReadVictimMap(value& v, std::map<std::string, Victims>& out) {
  auto null = IsNull(v, "NodeNameToVictims");
  if (!null.ok()) return Error{null.error()};
  if (*null) return OkStatus();
  simdjson::ondemand::object obj;
  if (auto err = v.get_object().get(obj)) return JsonError("NodeNameToVictims", err);
  for (auto field : obj) {
    std::string_view node;
    if (auto err = field.unescaped_key().get(node)) return JsonError("NodeNameToVictims", err);
    value fv;
    if (auto err = field.value().get(fv)) return JsonError("NodeNameToVictims", err);
    Victims victims;
    auto null_victims = IsNull(fv, node);
    if (!null_victims.ok()) return Error{null_victims.error()};
    if (!*null_victims) {
      if (auto s = ReadVictims(fv, node, victims); !s.ok()) return s;
    }
    out[std::string(node)] = std::move(victims);
  }
  return OkStatus();
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
  thread_local simdjson::ondemand::parser parser;
  ExtenderArgs args;
  bool saw_pod = false;
  auto status = ForEachField(body, parser, [&](std::string_view key, value& v) -> Status {
    if (KeyIs(key, "Pod")) return ReadPod(v, args.pod, saw_pod);
    if (KeyIs(key, "NodeNames")) {
      auto null = IsNull(v, "NodeNames");
      if (!null.ok()) return Error{null.error()};
      if (*null) return OkStatus();
      auto names = ReadStringArray(v, "NodeNames");
      if (!names.ok()) return Error{names.error()};
      args.node_names = std::move(names).value();
      return OkStatus();
    }
    if (KeyIs(key, "Nodes")) {
      auto null = IsNull(v, "Nodes");
      if (!null.ok()) return Error{null.error()};
      if (*null) return OkStatus();
      auto nodes = kube::DecodeNodeListItems(v);
      if (!nodes.ok()) return Error{"Nodes: " + nodes.error()};
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
  thread_local simdjson::ondemand::parser parser;
  BindingArgs args;
  auto status = ForEachField(body, parser, [&](std::string_view key, value& v) -> Status {
    if (KeyIs(key, "PodName")) return ReadString(v, "PodName", args.pod_name);
    if (KeyIs(key, "PodNamespace")) return ReadString(v, "PodNamespace", args.pod_namespace);
    if (KeyIs(key, "PodUID")) return ReadString(v, "PodUID", args.pod_uid);
    if (KeyIs(key, "Node")) return ReadString(v, "Node", args.node);
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
  thread_local simdjson::ondemand::parser parser;
  PreemptionArgs args;
  bool saw_pod = false;
  auto status = ForEachField(body, parser, [&](std::string_view key, value& v) -> Status {
    if (KeyIs(key, "Pod")) return ReadPod(v, args.pod, saw_pod);
    if (KeyIs(key, "NodeNameToMetaVictims") || KeyIs(key, "NodeNameToVictims")) {
      return ReadVictimMap(v, args.node_victims);
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
  return fmt::format(
      "{{\"Nodes\":null,\"NodeNames\":null,\"FailedNodes\":{{}},\"FailedAndUnresolvableNodes\":{{}}"
      ","
      "\"Error\":{}}}",
      JsonQuote(message));
}

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
  std::string out = "{\"NodeNameToMetaVictims\":{";
  bool first = true;
  for (const auto& [node, victims] : node_victims) {
    if (!first) out += ',';
    first = false;
    out += JsonQuote(node);
    out += ":{\"Pods\":[";
    for (size_t i = 0; i < victims.pod_uids.size(); ++i) {
      if (i != 0) out += ',';
      out += fmt::format("{{\"UID\":{}}}", JsonQuote(victims.pod_uids[i]));
    }
    out += fmt::format("],\"NumPDBViolations\":{}}}", victims.num_pdb_violations);
  }
  out += "}}";
  return out;
}

}  // namespace toposched::extender
