#include "draplugin/node_info.h"

#include <array>

#include "base/json_reader.h"

namespace toposched::draplugin {

namespace ondemand = simdjson::ondemand;
using json::Path;

Result<NodeInfo> DecodeNodeInfo(std::string_view text) {
  NodeInfo info;
  std::array<std::string, 3> layers;
  const simdjson::padded_string padded(text);
  Status status = json::DecodeDocument(padded, [&](ondemand::value& root) -> Status {
    const Path path("node");
    ondemand::object object;
    bool present = false;
    TOPOSCHED_RETURN_IF_ERROR(json::OpenObject(root, path, object, present));
    if (!present) return json::ErrorAt(path, "expected a Node, got null");
    return json::ForEachField(
        object, path, [&](std::string_view key, ondemand::value value, const Path& at) -> Status {
          if (key != "metadata") return OkStatus();
          ondemand::object metadata;
          bool has = false;
          TOPOSCHED_RETURN_IF_ERROR(json::OpenObject(value, at, metadata, has));
          if (!has) return OkStatus();
          return json::ForEachField(
              metadata, at, [&](std::string_view k, ondemand::value v, const Path& p) -> Status {
                if (k == "name") return json::ReadString(v, p, info.name);
                if (k == "uid") return json::ReadString(v, p, info.uid);
                if (k != "labels") return OkStatus();
                ondemand::object labels;
                bool any = false;
                TOPOSCHED_RETURN_IF_ERROR(json::OpenObject(v, p, labels, any));
                if (!any) return OkStatus();
                return json::ForEachMapEntry(
                    labels, p,
                    [&](std::string_view label, ondemand::value lv, const Path& lp) -> Status {
                      if (label == kManagementLabel)
                        return json::ReadString(lv, lp, info.management);
                      if (label.starts_with(kNetworkNodeLayerPrefix)) {
                        const std::string_view n = label.substr(kNetworkNodeLayerPrefix.size());
                        if (n == "1" || n == "2" || n == "3") {
                          return json::ReadString(lv, lp, layers[static_cast<size_t>(n[0] - '1')]);
                        }
                      }
                      return OkStatus();
                    });
              });
        });
  });
  if (!status.ok()) return Error{status.error()};
  for (std::string& layer : layers) {
    if (layer.empty()) break;
    info.network_node_layers.push_back(std::move(layer));
  }
  return info;
}

}  // namespace toposched::draplugin
