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
    return json::ForEachFieldOfRequired(
        root, path, "expected a Node, got null",
        [&](std::string_view key, ondemand::value value, const Path& at) -> Status {
          if (key != "metadata") return OkStatus();
          return json::ForEachFieldOf(
              value, at, [&](std::string_view k, ondemand::value v, const Path& p) -> Status {
                if (k == "name") return json::ReadString(v, p, info.name);
                if (k == "uid") return json::ReadString(v, p, info.uid);
                if (k != "labels") return OkStatus();
                return json::ForEachMapEntryOf(
                    v, p,
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
