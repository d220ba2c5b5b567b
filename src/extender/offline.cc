#include "extender/offline.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include "base/json_escape.h"
#include "kube/decode.h"

namespace toposched::extender {
namespace {

void EmitJson(const YAML::Node& node, std::string& out, int depth) {
  if (depth > 64) throw YAML::Exception(node.Mark(), "nesting deeper than 64 levels");
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      out += "null";
      return;
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (node.Tag() != "!" && (s == "true" || s == "false")) {
        out += s;
      } else {
        out += JsonQuote(s);
      }
      return;
    }
    case YAML::NodeType::Sequence: {
      out += '[';
      bool first = true;
      for (const auto& item : node) {
        if (!first) out += ',';
        first = false;
        EmitJson(item, out, depth + 1);
      }
      out += ']';
      return;
    }
    case YAML::NodeType::Map: {
      out += '{';
      bool first = true;
      for (const auto& kv : node) {
        if (!first) out += ',';
        first = false;
        out += JsonQuote(kv.first.Scalar());
        out += ':';
        EmitJson(kv.second, out, depth + 1);
      }
      out += '}';
      return;
    }
  }
}

}  // namespace

Result<std::string> YamlToJson(std::string_view yaml, std::string_view source) {
  try {
    const YAML::Node root = YAML::Load(std::string(yaml));
    std::string out;
    EmitJson(root, out, 0);
    return out;
  } catch (const YAML::Exception& e) {
    return Error{fmt::format("{}:{}:{}: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg)};
  }
}

Result<std::vector<kube::Node>> ParseNodeFile(std::string_view text, std::string_view source) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return Error{fmt::format("{}: the file is empty", source)};
  std::string json;
  if (text[first] == '{') {
    json.assign(text);
  } else {
    TOPOSCHED_ASSIGN_OR_RETURN(auto converted, YamlToJson(text, source));
    json = std::move(converted);
  }
  // A single Node is accepted too: wrap it as a list.
  auto list = kube::DecodeNodeList(json);
  if (list.ok() && !list->items.empty()) return std::move(list->items);
  auto single = kube::DecodeNode(json);
  if (single.ok() && !single->name.empty())
    return std::vector<kube::Node>{std::move(single).value()};
  if (!list.ok()) return Error{fmt::format("{}: not a NodeList: {}", source, list.error())};
  return Error{fmt::format("{}: the NodeList has no items", source)};
}

Status OfflineClusterWriter::Bind(const std::string& ns, const std::string& name,
                                  const std::string& uid, const std::string& node,
                                  const std::map<std::string, std::string>& annotations) {
  MutexLock lock(mu_);
  if (auto it = bindings_.find(uid); it != bindings_.end()) {
    return Error{
        fmt::format("pod {}/{} is already assigned to node {}", ns, name, it->second.node)};
  }
  bindings_[uid] = Binding{node, annotations};
  return OkStatus();
}

void OfflineClusterWriter::Event(const std::string& ns, const std::string& name,
                                 const std::string& uid, std::string_view type,
                                 std::string_view reason, std::string_view message) {
  spdlog::info("event on pod {}/{} ({}): {} {}: {}", ns, name, uid, type, reason, message);
}

std::map<std::string, OfflineClusterWriter::Binding> OfflineClusterWriter::Bindings() const {
  MutexLock lock(mu_);
  return bindings_;
}

}  // namespace toposched::extender
