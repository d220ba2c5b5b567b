#include "extender/offline.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include "base/json_writer.h"
#include "kube/decode.h"

namespace toposched::extender {
namespace {

// A YAML tree as JSON: a scalar is a string unless it is a plain true/false (the node files
// are read by kube's JSON decoder, which wants booleans where the API has them).
JsonTree JsonOf(const YAML::Node& node, int depth) {
  if (depth > 64) throw YAML::Exception(node.Mark(), "nesting deeper than 64 levels");
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (node.Tag() != "!" && (s == "true" || s == "false")) return s == "true";
      return s;
    }
    case YAML::NodeType::Sequence: {
      JsonTree out = JsonTree::array();
      for (const auto& item : node) out.push_back(JsonOf(item, depth + 1));
      return out;
    }
    case YAML::NodeType::Map: {
      JsonTree out = JsonTree::object();
      for (const auto& kv : node) out[kv.first.Scalar()] = JsonOf(kv.second, depth + 1);
      return out;
    }
  }
  return nullptr;
}

}  // namespace

Result<std::string> YamlToJson(std::string_view yaml, std::string_view source) {
  try {
    const YAML::Node root = YAML::Load(std::string(yaml));
    return WriteJson(JsonOf(root, 0));
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
